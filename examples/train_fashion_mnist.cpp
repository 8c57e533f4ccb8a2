// SPDX-License-Identifier: Apache-2.0
// train_fashion_mnist: a small two-convolution CNN trained with zeroshard on Fashion-MNIST, each rank
// reading its own shard of the training set (DistributedSampler), with the test accuracy after
// every epoch.
//
//   mpirun -n 2 build/bin/train_fashion_mnist [--config FILE] [--set key=value ...] [--metrics-out FILE]
//                                             [--check-loss-decreases] [--min-accuracy X]   (--help lists all)
//
// Data: data.path (default /usr/share/datasets/fashion-mnist, Debian package dataset-fashion-mnist).
// Training: train.epochs passes (or train.steps steps) of train.batch_size images per step over all
// ranks; optimizer.*, scheduler.*, precision.*, sharding.* as for every zeroshard program; the CNN's
// shape is fixed, model.dropout sets its dropout. The test set is evaluated before training, after
// every epoch, every train.eval_interval steps and at the end.
// --min-accuracy X: exit status 1 unless the final test accuracy is at least X.
// --check-loss-decreases: exit status 1 unless the final test loss is below 90% of the initial one.

#include <ATen/ops/arange.h>
#include <ATen/ops/argmax.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/functional/pooling.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>

#include <cstdio>
#include <sstream>

#include "zeroshard/base/error.h"
#include "zeroshard/config/main.h"
#include "zeroshard/core/host_memory.h"
#include "zeroshard/core/memory_report.h"
#include "zeroshard/train/images.h"
#include "zeroshard/engine/sharded_init.h"
#include "zeroshard/train/trainer.h"

namespace zs = zeroshard;
namespace F = torch::nn::functional;

namespace {

constexpr const char* kUsage =
    "Trains a small CNN on Fashion-MNIST with zeroshard, with the test accuracy after every epoch. Every "
    "setting comes from the config (docs/config.md: data.path, train.*, optimizer.*, the engine's sections).";

// conv(1->32) BN ReLU pool, conv(32->64) BN ReLU pool: [N, 1, 28, 28] -> [N, 64 * 7 * 7].
struct FeaturesImpl : torch::nn::Module {
  explicit FeaturesImpl(c10::Device device) {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3).padding(1).bias(false)));
    bn1 = register_module("bn1", torch::nn::BatchNorm2d(32));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(32, 64, 3).padding(1).bias(false)));
    bn2 = register_module("bn2", torch::nn::BatchNorm2d(64));
    to(device);  // before a ShardedInit shards the unit, on its device
  }
  torch::Tensor forward(torch::Tensor x) {
    x = F::max_pool2d(torch::relu(bn1(conv1(x))), F::MaxPool2dFuncOptions(2));
    x = F::max_pool2d(torch::relu(bn2(conv2(x))), F::MaxPool2dFuncOptions(2));
    return x.flatten(1);
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
};

// Dropout, fc(3136 -> 128), ReLU, dropout.
struct HiddenImpl : torch::nn::Module {
  HiddenImpl(double dropout, c10::Device device) {
    drop = register_module("drop", torch::nn::Dropout(dropout));
    fc = register_module("fc", torch::nn::Linear(64 * 7 * 7, 128));
    to(device);
  }
  torch::Tensor forward(torch::Tensor x) { return drop(torch::relu(fc(drop(x)))); }
  torch::nn::Dropout drop{nullptr};
  torch::nn::Linear fc{nullptr};
};

// Two sharded units (features, hidden) and the root's own output layer.
struct CnnImpl : torch::nn::Module {
  explicit CnnImpl(double dropout, c10::Device device) {
    features = register_module("features", zeroshard::Unit<FeaturesImpl>(device));
    hidden = register_module("hidden", zeroshard::Unit<HiddenImpl>(dropout, device));
    head = register_module("head", torch::nn::Linear(128, 10));
    head->to(device);
  }
  torch::Tensor forward(torch::Tensor x) { return head(hidden(features(x))); }
  zeroshard::Unit<FeaturesImpl> features{nullptr};
  zeroshard::Unit<HiddenImpl> hidden{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(Cnn);

const zs::ProgramFlag kMinAccuracy{"--min-accuracy", true, "X",
                                   "exit 1 unless the final test accuracy is at least X (a fraction)",
                                   zs::ProgramFlag::Type::kNumber, 0, 1};

// --min-accuracy X (checked by the flag parser); -1 when not given.
double min_accuracy(const zs::TrainFlags& flags) {
  auto it = flags.program.find(kMinAccuracy.name);
  return it == flags.program.end() ? -1 : std::stod(it->second);
}

int run(zs::Session& s, const zs::Run& run) {
  const std::optional<zs::TrainStart> start = zs::start_training(s, run, kUsage, {kMinAccuracy});
  if (!start) return 0;  // --help
  const double required_accuracy = min_accuracy(start->flags);
  const zs::RunOptions& o = run.options;

  // Data first: missing files fail before any model memory. (Memory phases label what each
  // allocation is for in memory summaries and out-of-memory reports, docs/memory.md.)
  zs::set_memory_phase(zs::memory_phase_id("dataset, loaded into memory"));
  const std::string dir = o.data.path.empty() ? zs::kFashionMnistDir : o.data.path;
  auto train_set = std::make_shared<zs::ImageClassificationDataset>(zs::load_fashion_mnist(dir, true),
                                                                   zs::kFashionMnistMean, zs::kFashionMnistStd);
  auto test_set = std::make_shared<zs::ImageClassificationDataset>(zs::load_fashion_mnist(dir, false),
                                                                  zs::kFashionMnistMean, zs::kFashionMnistStd);

  zs::set_memory_phase(zs::memory_phase_id("model construction"));
  zs::ShardedInit init(s, o.sharding);
  at::manual_seed(o.session.seed);
  Cnn model(o.model.dropout, s.device());
  zs::ShardingEngine engine(init, model.ptr());
  zs::set_memory_phase(0);

  zs::Trainer trainer(s, engine, *start);
  zs::TrainTask task;
  task.name = "train_fashion_mnist";
  task.train = train_set;
  task.loss = [&](const zs::Batch& b) {
    return F::cross_entropy(model->forward(b.data.to(engine.compute_dtype())), b.target);
  };
  task.eval.data = test_set;
  task.eval.metrics = {{"test_loss", "test loss"}, {"test_accuracy", "test accuracy"}};
  task.eval.per_sample = [&](const zs::Batch& b) {
    const at::Tensor logits = model->forward(b.data.to(engine.compute_dtype()));
    return std::vector<at::Tensor>{F::cross_entropy(logits, b.target, F::CrossEntropyFuncOptions().reduction(torch::kNone)),
                                   at::argmax(logits, 1).eq(b.target).to(at::kFloat)};
  };
  task.sample_noun = "images";
  std::ostringstream model_line;
  model_line << "model: conv32-bn-pool, conv64-bn-pool, fc128, fc10 (dropout " << o.model.dropout << ")";
  task.describe = {model_line.str(), "data: " + dir + ": " + std::to_string(train_set->size()) + " training images, " +
                                         std::to_string(test_set->size()) + " test images"};
  if (required_accuracy >= 0) task.checks.push_back(zs::at_least_check(s, 1, "test accuracy", required_accuracy));
  return trainer.fit(task).exit_status;
}

}  // namespace

int main(int argc, char** argv) {
  const zs::Program program{"train_fashion_mnist",
                            {zs::keys::engine(), zs::keys::trainer(), {"model.dropout", "data.path"}}};
  return zs::run_main(argc, argv, program, run);
}
