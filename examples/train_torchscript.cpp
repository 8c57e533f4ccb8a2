// SPDX-License-Identifier: Apache-2.0
// train_torchscript: a model written in Python, scripted (torch.jit.script(model).save("model.pt"))
// or traced, trained sharded with zeroshard; no Python runs.
//
//   mpirun -n 2 build/bin/train_torchscript --model FILE.pt --units PATTERNS [--unit-types NAMES]
//        [--task fashion_mnist|text] [--export FILE.pt] [--config FILE] [--set key=value ...]
//        [--metrics-out FILE] [--check-loss-decreases] [--min-accuracy X] [--resume]
//
// --units: comma-separated submodule paths that become sharded units, '*' matching within one
// path component ("blocks.*", "encoder.layers.*"); --unit-types: comma-separated class names
// ("Block"). The tasks say what the model takes and returns:
//   fashion_mnist  images [N, 1, 28, 28] (normalised) -> logits [N, 10]; data.path, default
//                  /usr/share/datasets/fashion-mnist; test loss and accuracy evaluated
//   text           byte windows [N, model.seq_len] (int64) -> logits [N, model.seq_len, V >= 256];
//                  data.path, default the fortunes corpus; validation loss evaluated
// Everything else comes from the config, as for every zeroshard program (docs/config.md): train.*,
// optimizer.*, scheduler.*, precision.*, sharding.*, checkpoint.*, offload.*,
// activation_checkpointing.* (checkpoints every every_n_blocks-th unit, in call order).
// --export FILE: after training, the trained values written into a copy of the model file that
// Python's torch.jit.load reads without zeroshard (docs/torchscript.md).
// --min-accuracy X (fashion_mnist): exit status 1 unless the final test accuracy is at least X.

#include <ATen/ops/argmax.h>
#include <torch/nn/functional/loss.h>

#include <cstdio>
#include <sstream>

#include "zeroshard/base/error.h"
#include "zeroshard/config/main.h"
#include "zeroshard/core/session.h"
#include "zeroshard/engine/engine.h"
#include "zeroshard/models/torchscript.h"
#include "zeroshard/train/images.h"
#include "zeroshard/train/text.h"
#include "zeroshard/train/trainer.h"

namespace zs = zeroshard;
namespace F = torch::nn::functional;

namespace {

constexpr const char* kUsage =
    "usage: mpirun -n N train_torchscript --model FILE.pt --units PATTERNS [--unit-types NAMES] "
    "[--task fashion_mnist|text] [--export FILE.pt] [--config FILE] [--set key=value ...] [--metrics-out FILE] "
    "[--check-loss-decreases] [--min-accuracy X] [--resume]; config keys: docs/config.md";

std::string flag(const zs::TrainFlags& flags, const std::string& name, const std::string& fallback = "") {
  auto it = flags.program.find(name);
  return it == flags.program.end() ? fallback : it->second;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

const zs::ProgramFlag kMinAccuracy{"--min-accuracy", true, "X",
                                   "fashion_mnist: exit 1 unless the final test accuracy is at least X (a fraction)",
                                   zs::ProgramFlag::Type::kNumber, 0, 1};

// Logits [N, classes] or [N, T, V] against integer targets [N] or [N, T]: the mean loss per item
// of every sample.
at::Tensor per_sample_loss(const at::Tensor& logits, const at::Tensor& targets) {
  const at::Tensor per_item = F::cross_entropy(logits.to(at::kFloat).reshape({-1, logits.size(-1)}),
                                               targets.reshape({-1}), F::CrossEntropyFuncOptions().reduction(torch::kNone));
  return per_item.view({targets.size(0), -1}).mean(1);
}

at::Tensor mean_loss(const at::Tensor& logits, const at::Tensor& targets) {
  return F::cross_entropy(logits.to(at::kFloat).reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

int run(zs::Session& s, const zs::Run& run) {
  const std::optional<zs::TrainStart> start =
      zs::start_training(s, run, kUsage,
                         {{"--model", true, "FILE.pt", "the TorchScript module to train (torch.jit.script/trace + save)"},
                          {"--units", true, "PATTERNS",
                           "comma-separated submodule paths that become sharded units, '*' within one component"},
                          {"--unit-types", true, "NAMES", "comma-separated class names whose submodules become units"},
                          {"--task", true, "fashion_mnist|text", "what the model takes and returns (default fashion_mnist)"},
                          {"--export", true, "FILE.pt", "write the trained module there (torch.jit.load reads it)"},
                          kMinAccuracy});
  if (!start) return 0;  // --help
  const zs::RunOptions& o = run.options;
  const zs::TrainFlags& flags = start->flags;
  const std::string model_path = flag(flags, "--model"), task_name = flag(flags, "--task", "fashion_mnist");
  const std::string export_path = flag(flags, "--export");
  ZS_REQUIRE(!model_path.empty(), zs::UsageError, "--model FILE.pt is required (a TorchScript module); ", kUsage);
  ZS_REQUIRE(task_name == "fashion_mnist" || task_name == "text", zs::UsageError, "--task '", task_name,
             "' is not one of fashion_mnist, text");
  const std::string accuracy_text = flag(flags, kMinAccuracy.name);
  const double required_accuracy = accuracy_text.empty() ? -1 : std::stod(accuracy_text);
  ZS_REQUIRE(required_accuracy < 0 || task_name == "fashion_mnist", zs::UsageError,
             "--min-accuracy needs --task fashion_mnist");

  // Data first: a missing dataset fails before the model is loaded.
  zs::TrainTask task;
  task.name = "train_torchscript";
  std::string data_line;
  if (task_name == "fashion_mnist") {
    const std::string dir = o.data.path.empty() ? zs::kFashionMnistDir : o.data.path;
    task.train = std::make_shared<zs::ImageClassificationDataset>(zs::load_fashion_mnist(dir, true),
                                                                 zs::kFashionMnistMean, zs::kFashionMnistStd);
    task.eval.data = std::make_shared<zs::ImageClassificationDataset>(zs::load_fashion_mnist(dir, false),
                                                                     zs::kFashionMnistMean, zs::kFashionMnistStd);
    task.eval.metrics = {{"test_loss", "test loss"}, {"test_accuracy", "test accuracy"}};
    task.sample_noun = "images";
    data_line = "data: " + dir + ": " + std::to_string(task.train->size()) + " training images, " +
                std::to_string(task.eval.data->size()) + " test images";
  } else {
    const std::string path = o.data.path.empty() ? zs::kFortunesDir : o.data.path;
    const int64_t seq_len = o.model.seq_len;
    const zs::TextCorpus corpus = zs::load_text_corpus(path, o.data.val_fraction);
    task.train = std::make_shared<zs::TokenWindowDataset>(corpus.train, seq_len);
    task.eval.data = std::make_shared<zs::TokenWindowDataset>(corpus.val, seq_len);
    task.eval.metrics = {{"val_loss", "validation loss"}};
    task.sample_noun = "sequences x " + std::to_string(seq_len) + " tokens";
    task.items = "tok";
    task.items_per_sample = seq_len;
    data_line = "data: " + path + ": " + std::to_string(corpus.train.numel()) + " train bytes, " +
                std::to_string(corpus.val.numel()) + " validation bytes, windows of " + std::to_string(seq_len);
  }

  zs::TorchScriptOptions units;
  units.units = split_list(flag(flags, "--units"));
  units.unit_types = split_list(flag(flags, "--unit-types"));
  ZS_REQUIRE(!units.units.empty() || !units.unit_types.empty(), zs::UsageError,
             "--units PATTERNS or --unit-types NAMES is required: which submodules of '", model_path,
             "' are sharded units (e.g. --units 'blocks.*')");
  units.checkpoint = o.model.checkpointing.enabled;
  units.checkpoint_every = o.model.checkpointing.every_n_blocks;
  zs::TorchScriptModel model(model_path, units, s.device());
  zs::ShardingEngine engine(s, model.module(), o.sharding);

  zs::Trainer trainer(s, engine, *start);
  task.loss = [&](const zs::Batch& b) { return mean_loss(model.forward(b.data), b.target); };
  if (task_name == "fashion_mnist") {
    task.eval.per_sample = [&](const zs::Batch& b) {
      const at::Tensor logits = model.forward(b.data);
      return std::vector<at::Tensor>{per_sample_loss(logits, b.target),
                                     at::argmax(logits, -1).eq(b.target).to(at::kFloat)};
    };
  } else {
    task.eval.per_sample = [&](const zs::Batch& b) {
      return std::vector<at::Tensor>{per_sample_loss(model.forward(b.data), b.target)};
    };
  }
  std::ostringstream model_line;
  model_line << "model: " << model_path << " (TorchScript), " << model.unit_names().size() << " units (";
  for (size_t i = 0; i < model.unit_names().size(); ++i) {
    model_line << (i ? ", " : "") << model.unit_names()[i];
    if (i == 5 && model.unit_names().size() > 7) {
      model_line << ", ... " << model.unit_names().back();
      break;
    }
  }
  model_line << "), activation checkpointing "
             << (units.checkpoint ? "every " + std::to_string(units.checkpoint_every) + " unit(s)" : std::string("off"));
  task.describe = {model_line.str(), data_line};
  task.after_training = [&] {
    if (export_path.empty()) return;
    const auto state = engine.full_state_dict();  // collective
    if (s.rank() == 0) {
      model.save(state, export_path);
      std::printf("exported the trained model to %s (TorchScript; torch.jit.load reads it)\n", export_path.c_str());
    }
  };
  if (required_accuracy >= 0) task.checks.push_back(zs::at_least_check(s, 1, "test accuracy", required_accuracy));
  return trainer.fit(task).exit_status;
}

}  // namespace

int main(int argc, char** argv) {
  const zs::Program program{"train_torchscript",
                            {zs::keys::engine(), zs::keys::trainer(),
                             {"activation_checkpointing", "data.path", "data.val_fraction", "model.seq_len"}}};
  return zs::run_main(argc, argv, program, run);
}
