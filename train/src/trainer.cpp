// SPDX-License-Identifier: Apache-2.0
// Trainer: construction from the config, one optimizer step, evaluation, checkpoints (trainer.h).
// The whole run (fit) is in fit.cpp.

#include "zeroshard/train/trainer.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/tensor.h>
#include <c10/util/Optional.h>

#include <chrono>
#include <filesystem>
#include <cstdio>
#include <limits>
#include <utility>

#include "zeroshard/base/error.h"
#include "zeroshard/base/logging.h"
#include "zeroshard/core/host_memory.h"
#include "zeroshard/core/session.h"
#include "zeroshard/offload/offload_optimizer.h"
#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/checkpoint/checkpoint_format.h"
#include "zeroshard/engine/engine.h"
#include "zeroshard/checkpoint/pretrained.h"

namespace zeroshard {

namespace {
// Whether checkpoint root `dir` holds a complete checkpoint, as rank 0 sees it (the same answer
// on every rank: one all-reduce). UsageError for --resume=auto without checkpoint.dir.
bool has_checkpoint(Session& s, const std::string& dir) {
  ZS_REQUIRE(!dir.empty(), UsageError, "--resume=auto needs a checkpoint directory: --set checkpoint.dir=DIR");
  const bool here = s.rank() == 0 && std::filesystem::exists(std::filesystem::path(dir) / ckpt::kLatestName);
  return all_reduce_sum(s, {here ? 1.0 : 0.0}, "train.has_checkpoint")[0] > 0;
}
}  // namespace

Trainer::Trainer(Session& s, ShardingEngine& engine, const TrainStart& start)
    : session_(s),
      engine_(engine),
      start_(start),
      optimizer_(make_engine_optimizer(start.run.optimizer, start.run.offload, s.rank(), &engine.memory())),
      scheduler_(start.run.scheduler, start.run.optimizer.lr),
      scaler_(start.run.loss_scale, start.run.fp16, s.world()) {
  const RunOptions& run = start.run;
  // Before any checkpoint is loaded: a resume checks the groups it was saved with.
  engine.set_param_groups(run.param_groups);
  if (!run.checkpoint.dir.empty()) {
    checkpointer_ = std::make_unique<Checkpointer>(engine, run.checkpoint, start.config_text);
  }
  resuming_ = start.flags.resume || (start.flags.resume_auto && has_checkpoint(s, run.checkpoint.dir));
  if (!run.init_from.empty() && !resuming_) load_pretrained(engine, run.init_from, run.pretrained);
  stop_ = std::make_unique<StopSignals>(std::vector<int>{SIGTERM, SIGUSR1}, run.train.stop_deadline_s,
                                        "rank " + std::to_string(s.rank()));
  // Training draws from a stream of its own on every rank (dropout masks differ across ranks);
  // the model was built under the session's seed, the same on every rank.
  at::manual_seed(run.session.seed + 1 + static_cast<uint64_t>(s.rank()));
}

Trainer::~Trainer() {
  // A step begun during a backward that threw holds on to the optimizer this trainer owns: the
  // engine, which outlives it, restores the shards now.
  if (start_.run.offload.overlap_step) {
    try {
      engine_.zero_grad();
    } catch (...) {
    }
  }
}

namespace {
// One copy to the host: the step's loss sum and, when defined, the gradient norm (NaN otherwise).
std::pair<double, double> read_loss_and_norm(const at::Tensor& loss_sum, const at::Tensor& norm) {
  at::Tensor both = loss_sum.to(at::kDouble).reshape({1});
  if (norm.defined()) both = at::cat({both, norm.to(both.options()).reshape({1})});
  both = both.cpu();
  const double* p = both.data_ptr<double>();
  return {p[0], norm.defined() ? p[1] : std::numeric_limits<double>::quiet_NaN()};
}
}  // namespace

Trainer::StepResult Trainer::step(const std::function<at::Tensor(int)>& micro_loss) {
  static const int kPhase = memory_phase_id("training step, outside the engine");
  MemoryPhase phase(kPhase);
  const auto t0 = std::chrono::steady_clock::now();
  const double lr = scheduler_.lr_at(steps_);
  optimizer_->set_lr(lr);
  const int micro_batches = start_.plan.micro_batches;
  at::Tensor loss_sum;  // on the loss's device: read once per step, not per micro-batch
  for (int m = 0; m < micro_batches; ++m) {
    c10::optional<ShardingEngine::NoSync> hold;
    if (start_.run.train.no_sync && m + 1 < micro_batches) hold.emplace(engine_);  // reduce once, after the last
    at::Tensor loss = micro_loss(m);
    const at::Tensor detached = loss.detach().to(at::kFloat);
    loss_sum = loss_sum.defined() ? loss_sum + detached : detached;
    // offload.overlap_step: the last backward updates each unit's shards as they are reduced; a
    // clip that scales the gradients makes step() redo it, a skipped step undoes it (zero_grad).
    if (start_.run.offload.overlap_step && m + 1 == micro_batches) engine_.step_during_backward(*optimizer_);
    scaler_.scale(loss / micro_batches).backward();
  }
  // Host synchronisations per step: one read of [loss sum, gradient norm] from the device, plus
  // the loss scaler's all-reduced flag when loss scaling is on. Without loss scaling the inf/nan
  // check is the norm's: the clip already computed and all-reduced it on the device.
  const double clip = start_.run.train.grad_clip_norm;
  const double max_norm = clip > 0 ? clip : std::numeric_limits<double>::infinity();
  const double loss_scale = scaler_.scale();
  const bool scaling = scaler_.mode() != LossScaleMode::kDisabled;
  bool finite = true;
  at::Tensor norm;  // measured every step (reported); gradients change only when clipping is on
  if (scaling) {
    finite = scaler_.unscale_and_check(engine_.gradients());
    if (finite) norm = engine_.clip_grad_norm_tensor(max_norm);
  } else {
    norm = engine_.clip_grad_norm_tensor(max_norm);
  }
  // Read before the optimizer only when the decision needs it (no loss scaling).
  std::pair<double, double> read;
  if (!scaling) {
    read = read_loss_and_norm(loss_sum, norm);
    finite = scaler_.check_norm(read.second);
  }
  if (finite) engine_.step(*optimizer_);
  if (scaling) read = read_loss_and_norm(loss_sum, norm);
  scaler_.update();
  engine_.zero_grad();
  ++steps_;
  const double grad_norm = finite ? read.second : std::numeric_limits<double>::quiet_NaN();
  const double mean = read.first / micro_batches;
  // The loss all-reduce carries, per watched stop signal, the ranks that received it: a stop
  // asked of one rank stops every rank after the same step, at no extra collective.
  const std::vector<int>& watched = stop_->signals();
  std::vector<double> sums = {mean};
  const int received = stop_->received();
  for (int sig : watched) sums.push_back(received == sig ? 1.0 : 0.0);
  sums = all_reduce_sum(session_, sums, "train.loss");
  const double loss = sums[0] / session_.world_size();
  int stop_signal = 0;
  for (size_t i = 0; i < watched.size() && stop_signal == 0; ++i) {
    if (sums[i + 1] > 0) stop_signal = watched[i];
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  train_seconds_ += seconds;
  return {loss, lr, !finite, seconds, grad_norm, loss_scale, stop_signal};
}

std::vector<double> Trainer::evaluate(const EvalSpec& eval) {
  ZS_REQUIRE(eval.data != nullptr && eval.per_sample && !eval.metrics.empty(), UsageError,
             "Trainer::evaluate needs a dataset, per_sample and at least one metric");
  int64_t samples = eval.data->size();
  if (eval.samples > 0) samples = std::min(samples, eval.samples);
  if (start_.run.train.limit_eval_samples > 0) samples = std::min(samples, start_.run.train.limit_eval_samples);
  DistributedSampler sampler(samples, session_.world_size(), session_.rank(), {/*shuffle=*/false, 0, /*drop_last=*/false});
  DataLoader loader(eval.data, loader_options(start_.run.train, start_.plan.micro_batch_size, /*drop_last=*/false,
                                              session_.device()));
  loader.start(sampler.indices());
  const size_t n = eval.metrics.size();
  std::vector<double> sums(n + 1, 0.0);  // the metrics, then the sample count
  engine_.model().eval();
  {
    at::NoGradGuard no_grad;
    int64_t position = 0;  // in this rank's list of sample indices
    for (int64_t k = 0; start_.run.train.eval_batches == 0 || k < start_.run.train.eval_batches; ++k) {
      c10::optional<Batch> b = loader.next();
      if (!b) break;
      const std::vector<at::Tensor> values = engine_.forward([&] { return eval.per_sample(*b); });
      ZS_REQUIRE(values.size() == n, UsageError, "EvalSpec::per_sample returned ", values.size(),
                 " tensors for ", n, " metrics");
      // The sampler pads the last ranks' lists with repeats so every rank runs as many forwards:
      // those count 0.
      const at::Tensor keep = at::arange(b->size(), at::kLong) + position < sampler.num_unique_samples();
      for (size_t i = 0; i < n; ++i) {
        const at::Tensor v = values[i].detach().to(at::kDouble).cpu().reshape({-1});
        ZS_REQUIRE(v.numel() == b->size(), UsageError, "EvalSpec::per_sample: metric '", eval.metrics[i].name,
                   "' has ", v.numel(), " values for a batch of ", b->size(), " samples (one per sample)");
        sums[i] += v.masked_select(keep).sum().item<double>();
      }
      sums[n] += keep.sum().item<double>();
      position += b->size();
    }
  }
  engine_.model().train();
  const std::vector<double> totals = all_reduce_sum(session_, sums, "train.eval");
  ZS_REQUIRE(totals[n] > 0, DataError, "the held-out set is empty");
  std::vector<double> means(n);
  for (size_t i = 0; i < n; ++i) means[i] = totals[i] / totals[n];
  return means;
}

namespace {
// What a checkpoint stores of the data stream (TrainingState::global, the same on every rank):
// the epoch and the optimizer steps taken in it, and the global batch they were taken with.
constexpr const char* kDataKey = "train.data";
constexpr const char* kBatchKey = "train.global_batch";
}  // namespace

int64_t Trainer::resume(BatchStream& stream) {
  ZS_REQUIRE(checkpointer_ != nullptr, UsageError, "--resume needs a checkpoint directory: --set checkpoint.dir=DIR");
  const TrainingState st = checkpointer_->load(*optimizer_);
  if (st.grad_scaler) scaler_.load_state(*st.grad_scaler);
  const auto data = st.global.find(kDataKey), batch = st.global.find(kBatchKey);
  ZS_REQUIRE(data != st.global.end() && batch != st.global.end(), CheckpointError, "checkpoint '", st.path,
             "' holds no data position (", kDataKey, "): it was not saved by this program's training loop; to start "
             "a new run from its weights, use model.init_from");
  ZS_REQUIRE(batch->second == std::to_string(start_.plan.global_batch), ConfigError, "--resume: checkpoint '",
             st.path, "' was trained with train.batch_size = ", batch->second, ", this run has ",
             start_.plan.global_batch, ": resuming the data exactly needs the same global batch (model.init_from "
             "starts a new run from the checkpoint's weights)");
  long long epoch = -1, steps = -1;
  ZS_REQUIRE(std::sscanf(data->second.c_str(), "%lld:%lld", &epoch, &steps) == 2 && steps >= 0, CheckpointError,
             "checkpoint '", st.path, "': bad data position '", data->second, "' (expected <epoch>:<steps>)");
  if (epoch >= 0) stream.begin_epoch(epoch, steps * start_.plan.micro_batches);
  steps_ = st.step;
  return st.step;
}

void Trainer::save_if_due(const BatchStream& stream, bool last_step) {
  if (!checkpointer_) return;
  const int interval = start_.run.train.checkpoint_interval;
  if (!last_step && (interval <= 0 || steps_ % interval != 0)) return;
  TrainingState st;
  st.step = steps_;
  st.grad_scaler = scaler_.state();
  // A global position: every rank has read as many batches, so any world size can continue it.
  st.global[kDataKey] = std::to_string(stream.epoch()) + ":" + std::to_string(stream.consumed() /
                                                                             start_.plan.micro_batches);
  st.global[kBatchKey] = std::to_string(start_.plan.global_batch);
  saved_path_ = checkpointer_->save(*optimizer_, st);
  saved_step_ = steps_;
  if (last_step) checkpointer_->wait();
}

std::string Trainer::save_now(const BatchStream& stream) {
  if (!checkpointer_) return "";
  if (saved_step_ != steps_) save_if_due(stream, /*last_step=*/true);
  checkpointer_->wait();
  return saved_path_;
}

std::vector<double> all_reduce_sum(Session& s, std::vector<double> values, const char* tag) {
  at::Tensor t = at::tensor(values, at::kDouble);
  s.world()->all_reduce(t, ReduceOp::kSum, tag)->wait();
  const double* p = t.data_ptr<double>();
  return std::vector<double>(p, p + values.size());
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

}  // namespace zeroshard
