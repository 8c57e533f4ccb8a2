// SPDX-License-Identifier: Apache-2.0
// Trainer::fit: the whole run a training program asks for (trainer.h), and the memory trial.

#include <ATen/ops/tensor.h>

#include <cstdio>
#include <sstream>

#include "zeroshard/base/error.h"
#include "zeroshard/base/logging.h"
#include "zeroshard/core/host_memory.h"
#include "zeroshard/core/memory_report.h"
#include "zeroshard/core/session.h"
#include "zeroshard/engine/engine.h"
#include "zeroshard/train/report.h"
#include "zeroshard/train/trainer.h"

namespace zeroshard {
namespace {

std::string describe_precision(const ShardingOptions& o) {
  if (o.autocast) return std::string("fp32 weights, autocast ") + c10::toString(o.autocast_dtype);
  return std::string("compute ") + c10::toString(o.param_dtype);
}

// "validation loss 2.2610" or "test accuracy 0.8123, test loss 0.5011".
std::string format_eval(const EvalSpec& eval, const std::vector<double>& values) {
  std::string out;
  char buf[64];
  for (size_t i = 0; i < values.size(); ++i) {
    std::snprintf(buf, sizeof(buf), "%.4f", values[i]);
    out += (i ? ", " : "") + eval.metrics[i].label + " " + buf;
  }
  return out;
}

int64_t limited(int64_t n, int64_t a, int64_t b) {
  if (a > 0) n = std::min(n, a);
  if (b > 0) n = std::min(n, b);
  return n;
}

}  // namespace

std::string Trainer::header(const TrainTask& task, int64_t steps) const {
  const BatchPlan& plan = start_.plan;
  std::ostringstream os;
  os << task.name << ": " << session_.world_size() << " rank(s) on " << session_.device().str() << ", "
     << to_string(engine_.options().strategy) << ", " << describe_precision(engine_.options()) << "; "
     << format_params(engine_.num_params()) << " parameters";
  for (const std::string& line : task.describe) os << "\n  " << line;
  os << "\n  batch: " << plan.global_batch << " " << task.sample_noun << " per step (" << plan.micro_batch_size
     << " per rank x " << plan.micro_batches << " micro-batch(es)); " << steps << " steps";
  if (start_.run.train.steps == 0) os << " (" << start_.run.train.epochs << " epoch(s))";
  os << "; " << optimizer_->describe() << ", " << scheduler_.describe();
  os << "\n  parameter groups: " << describe_param_groups(engine_.param_groups());
  return os.str();
}

ReportOptions Trainer::report_options(const TrainTask& task, int64_t steps) const {
  ReportOptions ro;
  ro.total_steps = steps;
  ro.items_name = task.items;
  ro.log_interval = start_.run.train.log_interval;
  ro.metrics_path = start_.flags.metrics_out;
  ro.tensorboard_dir = start_.flags.tensorboard.empty() ? start_.run.progress.tensorboard_dir : start_.flags.tensorboard;
  ro.progress = start_.run.progress.style;
  return ro;
}

namespace {

// How long the run is: train.steps, or train.epochs passes over the data.
struct RunLength {
  bool by_epochs = false;
  int64_t steps_per_epoch = 0;
  int64_t steps = 0;
};

RunLength run_length(const TrainOptions& o, const BatchPlan& plan, const BatchStream& stream) {
  RunLength r;
  r.steps_per_epoch = stream.batches_per_epoch() / plan.micro_batches;
  r.by_epochs = o.steps == 0;
  ZS_REQUIRE(r.steps_per_epoch > 0 || !r.by_epochs, ConfigError, "one epoch holds ", stream.batches_per_epoch(),
             " micro-batches per rank, fewer than train.micro_batches = ", plan.micro_batches,
             "; set train.steps or use more data");
  r.steps = r.by_epochs ? o.epochs * r.steps_per_epoch : o.steps;
  return r;
}

// The label of the evaluation due once `done` steps are done (at the end of an epoch, or every
// train.eval_interval steps before the last), or "" when none is.
std::string due_evaluation(const TrainOptions& o, const RunLength& len, int64_t done, double train_loss) {
  if (len.by_epochs && done % len.steps_per_epoch == 0) {
    char label[96];
    std::snprintf(label, sizeof(label), "epoch %lld/%d (train loss %.4f)",
                  static_cast<long long>(done / len.steps_per_epoch), o.epochs, train_loss);
    return label;
  }
  if (o.eval_interval > 0 && done % o.eval_interval == 0 && done < len.steps) return "step " + std::to_string(done);
  return "";
}

}  // namespace

TrainResult Trainer::fit(const TrainTask& task) {
  ZS_REQUIRE(task.train != nullptr && task.loss, UsageError, "Trainer::fit needs TrainTask::train and TrainTask::loss");
  const TrainOptions& o = start_.run.train;
  const BatchPlan& plan = start_.plan;
  BatchStream stream(task.train, limited(task.train->size(), task.train_samples, o.limit_train_samples), session_, o,
                     plan.micro_batch_size);
  const RunLength len = run_length(o, plan, stream);
  const int64_t steps = len.steps;
  // One micro-batch: the next batch of this rank's stream through the sharded model.
  // With TrainTask::loss_items the step's micro-batches are read at its first one, their items
  // counted over every rank (one all-reduce), and each summed loss scaled so that the step's loss
  // and gradients are the mean over the global batch's items (step() divides by the micro-batches,
  // the engine's reduction by the ranks).
  std::vector<Batch> pending;
  double factor = 1;
  auto micro_loss = [&](int m) {
    if (!task.loss_items) {
      Batch b = stream.next();
      return engine_.forward([&] { return task.loss(b); });
    }
    if (m == 0) {
      pending.clear();
      double items = 0;
      for (int i = 0; i < plan.micro_batches; ++i) {
        pending.push_back(stream.next());
        items += task.loss_items(pending.back());
      }
      const double total = all_reduce_sum(session_, {items}, "train.loss_items")[0];
      ZS_REQUIRE(total > 0, DataError, "step ", steps_ + 1, ": no sample of the global batch has an item the loss "
                 "counts (TrainTask::loss_items is 0 on every rank)");
      factor = static_cast<double>(session_.world_size()) * plan.micro_batches / total;
    }
    const Batch& b = pending.at(static_cast<size_t>(m));
    return engine_.forward([&] { return task.loss(b); }).mul(factor);
  };
  TrainResult result;
  if (start_.flags.memory_trial) {
    result.exit_status = run_memory_trial(micro_loss);
    return result;
  }

  TrainingReport report(session_, engine_, report_options(task, steps));
  report.note(header(task, steps));

  const bool evaluating = task.eval.data != nullptr;
  int64_t last_eval_step = -1;
  auto eval_now = [&](int64_t step, const std::string& label) {
    std::vector<double> values = evaluate(task.eval);
    for (size_t i = 0; i < values.size(); ++i) {
      // The line is printed once, with every metric; each metric is its own metrics-file line.
      report.eval(step, task.eval.metrics[i].name, values[i],
                  i + 1 == values.size() ? label + ": " + format_eval(task.eval, values) : std::string());
    }
    last_eval_step = step;
    return values;
  };

  const int64_t start = resuming_ ? resume(stream) : 0;
  if (start > 0) report.note("resumed at step " + std::to_string(start));
  if (evaluating) result.initial_eval = result.final_eval = eval_now(start, "step " + std::to_string(start));
  for (int64_t step = start; step < steps; ++step) {
    if (len.by_epochs && step % len.steps_per_epoch == 0) stream.begin_epoch(step / len.steps_per_epoch);
    const StepResult r = this->step(micro_loss);
    result.final_train_loss = r.loss;
    report.step(step + 1, r.loss, r.lr, plan.global_batch * task.items_per_sample, r.seconds,
                {r.grad_norm, r.loss_scale});
    const std::string due = evaluating ? due_evaluation(o, len, step + 1, r.loss) : std::string();
    if (!due.empty()) result.final_eval = eval_now(step + 1, due);
    save_if_due(stream, step + 1 == steps);
    if (r.stop_signal != 0 && step + 1 < steps) return stop_early(report, stream, r.stop_signal, steps);
  }
  report.finish_progress();
  if (evaluating && last_eval_step != steps) result.final_eval = eval_now(steps, "step " + std::to_string(steps));
  if (task.after_training) task.after_training();

  result.steps = steps;
  summarize(task, report, result, steps - start);
  result.exit_status |= run_checks(task, result);
  std::fflush(stdout);
  return result;
}

// The summary line and metrics of a finished run (`steps_run` of them in this process).
void Trainer::summarize(const TrainTask& task, TrainingReport& report, TrainResult& result, int64_t steps_run) {
  result.train_seconds = train_seconds_;
  result.skipped_steps = scaler_.skipped_steps();
  const int64_t items = steps_run * start_.plan.global_batch * task.items_per_sample;
  result.items_per_s = train_seconds_ > 0 ? static_cast<double>(items) / train_seconds_ : 0;
  const bool tokens = task.items == "tok";
  std::ostringstream text;
  char buf[160];
  std::snprintf(buf, sizeof(buf), "done: %lld steps in %.1f s of training, %.0f %s/s",
                static_cast<long long>(result.steps), train_seconds_, result.items_per_s,
                tokens ? "tokens" : task.sample_noun.c_str());
  text << buf;
  MetricFields values;
  values.add("steps", result.steps)
      .add("train_seconds", train_seconds_)
      .add(tokens ? "tokens_per_s" : "samples_per_s", result.items_per_s);
  for (size_t i = 0; i < result.initial_eval.size(); ++i) {
    const EvalSpec::Metric& m = task.eval.metrics[i];
    std::snprintf(buf, sizeof(buf), "%s%s %.4f -> %.4f", i ? ", " : "; ", m.label.c_str(), result.initial_eval[i],
                  result.final_eval[i]);
    text << buf;
    values.add("initial_" + m.name, result.initial_eval[i]).add("final_" + m.name, result.final_eval[i]);
  }
  std::snprintf(buf, sizeof(buf), "; last train loss %.4f", result.final_train_loss);
  text << buf;
  values.add("final_train_loss", result.final_train_loss).add("skipped_steps", result.skipped_steps);
  report.summary(values, text.str());

  if (start_.run.offload.overlap_step) {
    const ShardingEngine::OverlapStats o = engine_.overlap_stats();
    ZS_LOG(kInfo) << "offload.overlap_step: " << o.steps << " steps ran during backward (" << o.shards
                  << " shard updates); " << o.steps - o.redone - o.abandoned << " kept, " << o.redone
                  << " redone after a clip scaled the gradients, " << o.abandoned << " skipped and undone";
  }
  if (start_.flags.memory_summary && session_.rank() == 0) std::printf("%s", memory_summary().c_str());
}

// The task's checks and --check-loss-decreases: 0 when all pass, else 1.
int Trainer::run_checks(const TrainTask& task, const TrainResult& result) {
  int status = 0;
  for (const auto& check : task.checks) status |= check(result) ? 0 : 1;
  if (start_.flags.check_loss_decreases) {
    ZS_REQUIRE(task.eval.data != nullptr, UsageError, "--check-loss-decreases needs a held-out set (TrainTask::eval)");
    const double before = result.initial_eval[0], after = result.final_eval[0];
    const bool ok = after < 0.9 * before;
    if (session_.rank() == 0) {
      std::printf("CHECK %s: %s %.4f -> %.4f (%s 90%% of the initial value)\n", ok ? "PASSED" : "FAILED",
                  task.eval.metrics[0].label.c_str(), before, after, ok ? "below" : "not below");
    }
    status |= ok ? 0 : 1;
  }
  return status;
}

// A stop signal arrived (agreed by every rank after this step): a checkpoint of this step, one line,
// exit status 128 + the signal, as a shell reports a process the signal ended.
TrainResult Trainer::stop_early(TrainingReport& report, const BatchStream& stream, int signal, int64_t steps) {
  report.finish_progress();
  TrainResult result;
  result.steps = steps_;
  result.train_seconds = train_seconds_;
  result.skipped_steps = scaler_.skipped_steps();
  result.stop_signal = signal;
  result.exit_status = 128 + signal;
  result.checkpoint = save_now(stream);
  std::ostringstream text;
  text << "stopped by " << signal_name(signal) << " after step " << steps_ << " of " << steps << ": ";
  if (result.checkpoint.empty()) {
    text << "no checkpoint.dir, so nothing was saved";
  } else {
    text << "checkpoint " << result.checkpoint << " saved; run again with --resume (or --resume=auto) to continue";
  }
  report.note(text.str());
  std::fflush(stdout);
  return result;
}

// --memory-trial (docs/memory.md): kMemoryTrialSteps steps, then the highest peak over the ranks.
int Trainer::run_memory_trial(const std::function<at::Tensor(int)>& micro_loss) {
  for (int i = 0; i < kMemoryTrialSteps; ++i) step(micro_loss);
  const DeviceMemoryUse use = device_memory_use();
  ZS_REQUIRE(use.known, ConfigError, "--memory-trial cannot measure memory on ", session_.device().str(),
             ": set memory.track_allocations=true");
  at::Tensor peak = at::tensor(std::vector<int64_t>{use.peak}, at::kLong);
  session_.world()->all_reduce(peak, ReduceOp::kMax, "train.memory_trial")->wait();
  if (session_.rank() == 0) {
    std::printf("zeroshard-memory-trial: fits micro_batch_size=%lld peak_bytes=%lld limit_bytes=%lld\n",
                static_cast<long long>(start_.plan.micro_batch_size), static_cast<long long>(peak.item<int64_t>()),
                static_cast<long long>(use.limit));
    std::fflush(stdout);
  }
  return 0;
}

std::function<bool(const TrainResult&)> at_least_check(const Session& session, size_t metric, std::string label,
                                                       double required) {
  return [&session, metric, label = std::move(label), required](const TrainResult& r) {
    ZS_REQUIRE(metric < r.final_eval.size(), UsageError, "at_least_check: '", label, "' is evaluation metric ", metric,
               " but the task evaluates ", r.final_eval.size());
    const double value = r.final_eval[metric];
    const bool ok = value >= required;
    if (session.rank() == 0) {
      std::printf("CHECK %s: %s %.4f %s the required %.4f\n", ok ? "PASSED" : "FAILED", label.c_str(), value,
                  ok ? "reaches" : "is below", required);
    }
    return ok;
  };
}

}  // namespace zeroshard
