// train_fashion_mnist: a small two-convolution CNN trained with zeroshard on Fashion-MNIST, each rank
// reading its own shard of the training set (DistributedSampler), with the test accuracy after
// every epoch.
//
//   mpirun -n 2 build/bin/train_fashion_mnist [--config FILE] [--set key=value ...] [--metrics-out FILE]
//                                             [--check-loss-decreases] [--min-accuracy X]
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

#include "common/report.h"
#include "zeroshard/core/config.h"
#include "common/training.h"
#include "zeroshard/base/error.h"
#include "zeroshard/core/host_memory.h"
#include "zeroshard/core/main.h"
#include "zeroshard/core/memory_report.h"
#include "zeroshard/train/images.h"
#include "zeroshard/sharding/sharded_init.h"

namespace zs = zeroshard;
namespace ex = zs_examples;
namespace F = torch::nn::functional;

namespace {

constexpr const char* kUsage =
    "usage: mpirun -n N train_fashion_mnist [--config FILE] [--set key=value ...] [--metrics-out FILE] "
    "[--check-loss-decreases] [--min-accuracy X] [--resume] [--memory-trial] [--memory-summary]; config keys: docs/config.md";

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

struct EvalResult {
  double loss, accuracy;
};

// Loss and accuracy over the first `samples` test images, each counted once. Collective.
EvalResult evaluate(zs::Session& s, zs::ShardingEngine& engine, Cnn& model, std::shared_ptr<const zs::Dataset> data,
                    int64_t samples, int64_t batch, const zs::Config& cfg) {
  zs::DistributedSampler sampler(samples, s.world_size(), s.rank(), {/*shuffle=*/false, 0, /*drop_last=*/false});
  zs::DataLoader loader(std::move(data), ex::loader_options(cfg, batch, /*drop_last=*/false, s.device()));
  loader.start(sampler.indices());
  const int64_t max_batches = cfg.train().eval_batches();
  double loss = 0, correct = 0, count = 0;
  model->eval();
  {
    torch::NoGradGuard no_grad;
    int64_t position = 0;  // in this rank's list of sample indices
    for (int64_t k = 0; max_batches == 0 || k < max_batches; ++k) {
      c10::optional<zs::Batch> b = loader.next();
      if (!b) break;
      at::Tensor logits = engine.forward([&] { return model->forward(b->data.to(engine.compute_dtype())); });
      at::Tensor l = F::cross_entropy(logits, b->target, F::CrossEntropyFuncOptions().reduction(torch::kNone));
      at::Tensor hit = at::argmax(logits, 1).eq(b->target);
      at::Tensor keep = (at::arange(b->size(), at::kLong) + position < sampler.num_unique_samples()).to(s.device());
      loss += l.masked_select(keep).sum().item<double>();
      correct += hit.masked_select(keep).sum().item<double>();
      count += keep.sum().item<double>();
      position += b->size();
    }
  }
  model->train();
  auto t = ex::all_reduce_sum(s, {loss, correct, count}, "example.eval");
  ZS_REQUIRE(t[2] > 0, zs::DataError, "the test set is empty");
  return {t[0] / t[2], t[1] / t[2]};
}

int run(zs::Session& s) {
  const std::optional<ex::ExampleStart> started = ex::start_example(s, kUsage, /*accuracy_flag=*/true);
  if (!started) return 0;  // --help
  const ex::ExampleArgs& args = started->args;
  const ex::BatchPlan& plan = started->plan;
  const zs::Config& cfg = s.config();

  // Data first: missing files fail before any model memory. (Memory phases label what each
  // allocation is for in memory summaries and out-of-memory reports, docs/memory.md.)
  zs::set_memory_phase(zs::memory_phase_id("dataset, loaded into memory"));
  const std::string dir = cfg.data().path().empty() ? zs::kFashionMnistDir : cfg.data().path();
  auto train_set = std::make_shared<zs::ImageClassificationDataset>(zs::load_fashion_mnist(dir, true),
                                                                   zs::kFashionMnistMean, zs::kFashionMnistStd);
  auto test_set = std::make_shared<zs::ImageClassificationDataset>(zs::load_fashion_mnist(dir, false),
                                                                  zs::kFashionMnistMean, zs::kFashionMnistStd);
  auto limit = [](int64_t n, int64_t lim) { return lim > 0 ? std::min(n, lim) : n; };
  const int64_t train_samples = limit(train_set->size(), cfg.data().limit_train_samples());
  const int64_t test_samples = limit(test_set->size(), cfg.data().limit_eval_samples());
  ex::BatchStream stream(train_set, train_samples, s, cfg, plan.micro_batch_size);
  const int64_t steps_per_epoch = stream.batches_per_epoch() / plan.micro_batches;
  const bool by_epochs = cfg.train().steps() == 0;
  ZS_REQUIRE(steps_per_epoch > 0 || !by_epochs, zs::ConfigError, "one epoch holds ", stream.batches_per_epoch(),
             " micro-batches per rank, fewer than train.micro_batches = ", plan.micro_batches,
             "; set train.steps or use more data");
  const int64_t steps = by_epochs ? cfg.train().epochs() * steps_per_epoch : cfg.train().steps();

  const zs::ShardingOptions sharding = zs::ShardingOptions::from_config(cfg.sharding(), cfg.precision());
  zs::set_memory_phase(zs::memory_phase_id("model construction"));
  zs::ShardedInit init(s, sharding);
  ex::seed_model_init(cfg);
  Cnn model(cfg.model().dropout(), s.device());
  zs::ShardingEngine engine(init, model.ptr());
  ex::seed_training(cfg, s.rank());
  zs::set_memory_phase(0);
  ex::Trainer trainer(s, engine, cfg);
  // One micro-batch: the next batch of this rank's stream through the sharded model.
  auto micro_loss = [&](int) {
    zs::Batch b = stream.next();
    return engine.forward(
        [&] { return F::cross_entropy(model->forward(b.data.to(engine.compute_dtype())), b.target); });
  };
  if (args.memory_trial) return ex::run_memory_trial(s, trainer, plan, micro_loss);

  ex::ReportOptions ro;
  ro.total_steps = steps;
  ro.items_name = "samples";
  ro.log_interval = cfg.train().log_interval();
  ro.metrics_path = args.metrics_out;
  ro.reduce_dtype = sharding.reduce_dtype;
  ex::TrainingReport report(s, engine, ro);
  {
    std::ostringstream os;
    os << "train_fashion_mnist: " << s.world_size() << " rank(s) on " << s.device().str() << ", "
       << zs::config::ShardingConfig::Strategy_Name(cfg.sharding().strategy()) << ", "
       << ex::describe_precision(sharding) << "\n  model: conv32-bn-pool, conv64-bn-pool, fc128, fc10 (dropout "
       << cfg.model().dropout() << "): " << ex::format_params(engine.num_params()) << " parameters\n  data: " << dir
       << ": " << train_samples << " training images, " << test_samples << " test images\n  batch: "
       << plan.global_batch << " images per step (" << plan.micro_batch_size << " per rank x " << plan.micro_batches
       << " micro-batch(es)); " << steps << " steps"
       << (by_epochs ? " (" + std::to_string(cfg.train().epochs()) + " epoch(s))" : std::string()) << "; "
       << trainer.optimizer().describe() << ", " << trainer.scheduler().describe();
    report.note(os.str());
  }

  // Evaluation runs micro-batches too: the size training showed fits (zeroshard-launch
  // --auto-micro-batches picks it), and without gradients it needs less memory than training.
  const int64_t eval_batch = plan.micro_batch_size;
  auto eval_now = [&](int64_t step, const std::string& label) {
    EvalResult r = evaluate(s, engine, model, test_set, test_samples, eval_batch, cfg);
    char text[160];
    std::snprintf(text, sizeof(text), "%s: test accuracy %.4f, test loss %.4f", label.c_str(), r.accuracy, r.loss);
    report.eval(step, "test_accuracy", r.accuracy, text);
    return r;
  };
  const int64_t start = args.resume ? trainer.resume(stream) : 0;
  const EvalResult initial = eval_now(start, start > 0 ? "resumed at step " + std::to_string(start) : "before training");
  EvalResult last = initial;
  double last_loss = 0;
  for (int64_t step = start; step < steps; ++step) {
    if (by_epochs && step % steps_per_epoch == 0) stream.begin_epoch(step / steps_per_epoch);
    auto r = trainer.step(micro_loss);
    last_loss = r.loss;
    report.step(step + 1, r.loss, r.lr, plan.global_batch, r.seconds);
    const bool epoch_end = by_epochs && (step + 1) % steps_per_epoch == 0;
    const int64_t every = cfg.train().eval_interval();
    if (epoch_end) {
      char label[96];
      std::snprintf(label, sizeof(label), "epoch %lld/%d (train loss %.4f)",
                    static_cast<long long>((step + 1) / steps_per_epoch), cfg.train().epochs(), r.loss);
      last = eval_now(step + 1, label);
    } else if ((every > 0 && (step + 1) % every == 0) || step + 1 == steps) {
      last = eval_now(step + 1, "step " + std::to_string(step + 1));
    }
    trainer.save_if_due(stream, step + 1 == steps);
  }
  report.finish_progress();
  const double samples_per_s =
      trainer.train_seconds() > 0 ? static_cast<double>(steps * plan.global_batch) / trainer.train_seconds() : 0;
  char summary[256];
  std::snprintf(summary, sizeof(summary),
                "done: %lld steps in %.1f s of training, %.0f images/s; test accuracy %.4f -> %.4f, test loss "
                "%.4f -> %.4f",
                static_cast<long long>(steps), trainer.train_seconds(), samples_per_s, initial.accuracy,
                last.accuracy, initial.loss, last.loss);
  report.summary({{"steps", static_cast<double>(steps)},
                  {"train_seconds", trainer.train_seconds()},
                  {"samples_per_s", samples_per_s},
                  {"final_test_accuracy", last.accuracy},
                  {"initial_test_loss", initial.loss},
                  {"final_test_loss", last.loss},
                  {"final_train_loss", last_loss}},
                 summary);
  int status = 0;
  if (args.min_accuracy >= 0) {
    const bool ok = last.accuracy >= args.min_accuracy;
    if (s.rank() == 0) {
      std::printf("CHECK %s: test accuracy %.4f %s the required %.4f\n", ok ? "PASSED" : "FAILED", last.accuracy,
                  ok ? "reaches" : "is below", args.min_accuracy);
    }
    status |= ok ? 0 : 1;
  }
  if (args.memory_summary && s.rank() == 0) std::printf("%s", zs::memory_summary().c_str());
  if (args.check_loss_decreases) {
    const bool ok = last.loss < 0.9 * initial.loss;
    if (s.rank() == 0) {
      std::printf("CHECK %s: test loss %.4f -> %.4f (%s 90%% of the initial value)\n", ok ? "PASSED" : "FAILED",
                  initial.loss, last.loss, ok ? "below" : "not below");
    }
    status |= ok ? 0 : 1;
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) { return zs::run_main(argc, argv, run); }
