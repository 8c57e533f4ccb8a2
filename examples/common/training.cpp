#include "training.h"
#include "zeroshard/core/config.h"

#include "zeroshard/offload/offload_optimizer.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/ops/tensor.h>
#include <c10/util/Optional.h>

#include <google/protobuf/text_format.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "zeroshard/base/error.h"
#include "zeroshard/base/logging.h"
#include "zeroshard/core/host_memory.h"
#include "zeroshard/core/memory_report.h"
#include "zeroshard/offload/offload_optimizer.h"

namespace zs = zeroshard;

namespace zs_examples {

ExampleArgs parse_example_args(const std::vector<std::string>& args, const std::string& usage, bool accuracy_flag) {
  ExampleArgs a;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& k = args[i];
    auto value = [&]() -> std::string {
      ZS_REQUIRE(i + 1 < args.size(), zs::UsageError, k, " needs a value; ", usage);
      return args[++i];
    };
    if (k == "--metrics-out") {
      a.metrics_out = value();
    } else if (k == "--resume") {
      a.resume = true;
    } else if (k == "--memory-summary") {
      a.memory_summary = true;
    } else if (k == "--memory-trial") {
      a.memory_trial = true;
    } else if (k == "--check-loss-decreases") {
      a.check_loss_decreases = true;
    } else if (k == "--min-accuracy" && accuracy_flag) {
      const std::string v = value();
      char* end = nullptr;
      a.min_accuracy = std::strtod(v.c_str(), &end);
      ZS_REQUIRE(end != v.c_str() && *end == '\0' && a.min_accuracy >= 0 && a.min_accuracy <= 1, zs::UsageError,
                 "--min-accuracy '", v, "' is not a number in [0, 1]");
    } else if (k == "--help" || k == "-h") {
      a.help = true;
    } else {
      ZS_THROW(zs::UsageError, "unknown argument '", k, "'; ", usage);
    }
  }
  return a;
}

void set_threads(const zs::Session& s) {
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  at::set_num_threads(std::max(1, static_cast<int>(cores) / std::max(1, s.local_world_size())));
}

BatchPlan plan_batches(const zs::Config& cfg, int world_size) {
  const int64_t global = cfg.train().batch_size();
  const int micro = cfg.train().micro_batches();
  ZS_REQUIRE(global % (static_cast<int64_t>(world_size) * micro) == 0, zs::ConfigError, "train.batch_size = ", global,
             " is the global batch and must be a multiple of ranks (", world_size, ") x train.micro_batches (", micro,
             ") = ", static_cast<int64_t>(world_size) * micro, "; e.g. train.batch_size=",
             std::max<int64_t>(1, global / (static_cast<int64_t>(world_size) * micro)) * world_size * micro);
  return {global / (static_cast<int64_t>(world_size) * micro), micro, global};
}

zs::DataLoaderOptions loader_options(const zs::Config& cfg, int64_t batch_size, bool drop_last, c10::Device device) {
  zs::DataLoaderOptions o;
  o.batch_size = batch_size;
  o.drop_last = drop_last;
  o.num_workers = cfg.data().num_workers();
  o.prefetch_batches = cfg.data().prefetch_batches();
  o.device = device;
  o.pin_memory = cfg.data().pin_memory();
  return o;
}

BatchStream::BatchStream(std::shared_ptr<const zs::Dataset> dataset, int64_t samples, const zs::Session& s,
                         const zs::Config& cfg, int64_t batch_size)
    : sampler_(samples, s.world_size(), s.rank(),
               zs::SamplerOptions{cfg.data().shuffle(), cfg.runtime().seed(), /*drop_last=*/true}),
      loader_(std::move(dataset), loader_options(cfg, batch_size, /*drop_last=*/true, s.device())),
      batches_per_epoch_(sampler_.num_samples() / batch_size) {
  ZS_REQUIRE(batches_per_epoch_ > 0, zs::ConfigError, "the training set (", samples, " samples over ",
             s.world_size(), " rank(s), ", sampler_.num_samples(),
             " per rank) holds no full batch of train.batch_size / (ranks x micro_batches) = ", batch_size,
             " per rank; lower train.batch_size or raise data.limit_train_samples");
}

void BatchStream::begin_epoch(int64_t epoch) {
  epoch_ = epoch;
  consumed_ = 0;
  sampler_.set_epoch(epoch);
  loader_.start(sampler_.indices());
}

zs::Batch BatchStream::next() {
  if (epoch_ < 0) begin_epoch(0);
  auto b = loader_.next();
  if (!b) {
    begin_epoch(epoch_ + 1);
    b = loader_.next();
  }
  ZS_CHECK(b.has_value(), "an epoch of ", batches_per_epoch_, " batches delivered none");
  ++consumed_;
  return std::move(*b);
}

std::string BatchStream::position() const { return std::to_string(epoch_) + ":" + std::to_string(consumed_); }

void BatchStream::seek(const std::string& position) {
  long long epoch = -1, consumed = -1;
  ZS_REQUIRE(std::sscanf(position.c_str(), "%lld:%lld", &epoch, &consumed) == 2 && consumed >= 0, zs::CheckpointError,
             "bad data position '", position, "' in the checkpoint (expected <epoch>:<batches>)");
  if (epoch < 0) return;  // saved before the first batch
  begin_epoch(epoch);
  for (long long i = 0; i < consumed; ++i) next();
}

Trainer::Trainer(zs::Session& s, zs::ShardingEngine& engine, const zs::Config& cfg)
    : session_(s),
      engine_(engine),
      optimizer_(zs::make_engine_optimizer(cfg, s.rank(), &engine.memory())),
      scheduler_(cfg.scheduler(), cfg.optimizer().lr()),
      scaler_(cfg.precision().loss_scale(), zs::GradScaler::uses_fp16(cfg.precision()), s.world()),
      micro_batches_(cfg.train().micro_batches()),
      no_sync_(cfg.train().no_sync()),
      clip_(cfg.optimizer().grad_clip_norm()),
      interval_(cfg.checkpoint().interval_steps()) {
  if (!cfg.checkpoint().dir().empty()) {
    std::string text;
    google::protobuf::TextFormat::PrintToString(cfg, &text);
    checkpointer_ = std::make_unique<zs::Checkpointer>(engine, zs::CheckpointOptions::from_config(cfg.checkpoint()), text);
  }
}

int64_t Trainer::resume(BatchStream& stream) {
  ZS_REQUIRE(checkpointer_ != nullptr, zs::UsageError,
             "--resume needs a checkpoint directory: --set checkpoint.dir=DIR");
  const zs::TrainingState st = checkpointer_->load(*optimizer_);
  if (st.grad_scaler) scaler_.load_state(*st.grad_scaler);
  auto it = st.per_rank.find("data");
  if (it != st.per_rank.end()) {
    stream.seek(it->second);
  } else {
    ZS_LOG(kWarn) << "checkpoint " << st.path << " has no data position for this rank (saved at another world "
                  << "size): the data stream starts again at epoch 0";
  }
  steps_ = st.step;
  return st.step;
}

void Trainer::save_if_due(const BatchStream& stream, bool last_step) {
  if (!checkpointer_) return;
  if (!last_step && (interval_ <= 0 || steps_ % interval_ != 0)) return;
  zs::TrainingState st;
  st.step = steps_;
  st.grad_scaler = scaler_.state();
  st.per_rank["data"] = stream.position();
  checkpointer_->save(*optimizer_, st);
  if (last_step) checkpointer_->wait();
}

Trainer::Result Trainer::step(const std::function<at::Tensor(int)>& micro_loss) {
  static const int kPhase = zs::memory_phase_id("training step, outside the engine");
  zs::MemoryPhase phase(kPhase);
  const auto t0 = std::chrono::steady_clock::now();
  const double lr = scheduler_.lr_at(steps_);
  optimizer_->set_lr(lr);
  double loss_sum = 0;
  for (int m = 0; m < micro_batches_; ++m) {
    c10::optional<zs::ShardingEngine::NoSync> hold;
    if (no_sync_ && m + 1 < micro_batches_) hold.emplace(engine_);  // reduce once, after the last
    at::Tensor loss = micro_loss(m);
    loss_sum += loss.detach().to(at::kDouble).cpu().item<double>();
    scaler_.scale(loss / micro_batches_).backward();
  }
  bool stepped = false;
  if (scaler_.unscale_and_check(engine_.param_shards())) {
    if (clip_ > 0) engine_.clip_grad_norm(clip_);
    engine_.step(*optimizer_);
    stepped = true;
  }
  scaler_.update();
  engine_.zero_grad();
  ++steps_;
  const double loss = all_reduce_sum(session_, {loss_sum / micro_batches_}, "example.loss")[0] /
                      session_.world_size();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  train_seconds_ += seconds;
  return {loss, lr, !stepped, seconds};
}

std::optional<ExampleStart> start_example(const zs::Session& s, const std::string& usage, bool accuracy_flag) {
  ExampleStart start{parse_example_args(s.args(), usage, accuracy_flag), {}};
  if (start.args.help) {
    if (s.rank() == 0) std::printf("%s\n", usage.c_str());
    return std::nullopt;
  }
  set_threads(s);
  start.plan = plan_batches(s.config(), s.world_size());
  if (start.args.memory_trial) announce_memory_trial(s, start.plan);
  return start;
}

void announce_memory_trial(const zs::Session& s, const BatchPlan& plan) {
  if (s.rank() != 0) return;
  std::printf("zeroshard-memory-trial: plan world_size=%d per_rank_batch=%lld micro_batches=%d micro_batch_size=%lld\n",
              s.world_size(), static_cast<long long>(plan.micro_batch_size * plan.micro_batches), plan.micro_batches,
              static_cast<long long>(plan.micro_batch_size));
  std::fflush(stdout);
}

int run_memory_trial(zs::Session& s, Trainer& trainer, const BatchPlan& plan,
                     const std::function<at::Tensor(int)>& micro_loss) {
  for (int i = 0; i < kMemoryTrialSteps; ++i) trainer.step(micro_loss);
  const zs::DeviceMemoryUse use = zs::device_memory_use();
  ZS_REQUIRE(use.known, zs::ConfigError, "--memory-trial cannot measure memory on ", s.device().str(),
             ": set memory.track_allocations=true");
  at::Tensor peak = at::tensor(std::vector<int64_t>{use.peak}, at::kLong);
  s.world()->all_reduce(peak, zs::ReduceOp::kMax, "example.memory_trial")->wait();
  if (s.rank() == 0) {
    std::printf("zeroshard-memory-trial: fits micro_batch_size=%lld peak_bytes=%lld limit_bytes=%lld\n",
                static_cast<long long>(plan.micro_batch_size), static_cast<long long>(peak.item<int64_t>()),
                static_cast<long long>(use.limit));
    std::fflush(stdout);
  }
  return 0;
}

void seed_model_init(const zs::Config& cfg) { at::manual_seed(cfg.runtime().seed()); }

void seed_training(const zs::Config& cfg, int rank) {
  at::manual_seed(cfg.runtime().seed() + 1 + static_cast<uint64_t>(rank));
}

std::vector<double> all_reduce_sum(zs::Session& s, std::vector<double> values, const char* tag) {
  at::Tensor t = at::tensor(values, at::kDouble);
  s.world()->all_reduce(t, zs::ReduceOp::kSum, tag)->wait();
  const double* p = t.data_ptr<double>();
  return std::vector<double>(p, p + values.size());
}

std::string describe_precision(const zs::ShardingOptions& o) {
  if (o.autocast) return std::string("fp32 weights, autocast ") + c10::toString(o.autocast_dtype);
  return std::string("compute ") + c10::toString(o.param_dtype);
}

std::string format_params(int64_t n) {
  char buf[32];
  const double v = static_cast<double>(n);
  if (v >= 1e9) std::snprintf(buf, sizeof(buf), "%.2fB", v / 1e9);
  else if (v >= 1e6) std::snprintf(buf, sizeof(buf), "%.2fM", v / 1e6);
  else if (v >= 1e3) std::snprintf(buf, sizeof(buf), "%.1fk", v / 1e3);
  else std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(n));
  return buf;
}

}  // namespace zs_examples
