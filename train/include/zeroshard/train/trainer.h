// SPDX-License-Identifier: Apache-2.0
#pragma once
// The training loop as a library: a training program is a model, a dataset and a config.
//
//   int main(int argc, char** argv) {
//     const zeroshard::Program program{"my_train", {zeroshard::keys::engine(), zeroshard::keys::trainer()}};
//     return zeroshard::run_main(argc, argv, program, [](zeroshard::Session& s, const zeroshard::Run& run) {
//       auto start = zeroshard::start_training(s, run, "Trains my model on my data.");
//       if (!start) return 0;                                    // --help, --version
//       auto data = std::make_shared<MyDataset>(...);
//       zeroshard::ShardedInit init(s, run.options.sharding);
//       MyModel model(...);                                      // sharded unit by unit as built
//       zeroshard::ShardingEngine engine(init, model.ptr());
//       zeroshard::Trainer trainer(s, engine, *start);           // + model.init_from weights
//       zeroshard::TrainTask task;
//       task.train = data;
//       task.loss = [&](const zeroshard::Batch& b) { return loss_fn(model->forward(b.data), b.target); };
//       return trainer.fit(task).exit_status;
//     });
//   }
//
// What fit() does, from the run's options (resolved from the config, docs/config.md) and the flags
// every training program takes:
// epochs or steps; each step splits the rank's batch into train.micro_batches micro-batches
// (no_sync on all but the last when train.no_sync), scales the loss for fp16 (loss scaler),
// clips (optimizer.grad_clip_norm), follows the LR schedule and steps the optimizer, whose state
// lives on the device, in host memory or on NVMe as offload.* says (make_engine_optimizer);
// evaluates before training, every
// train.eval_interval steps, after every epoch and at the end; saves checkpoints every
// checkpoint.interval_steps and at the end (--resume continues from the latest; --resume=auto
// when there is one); stops early at a step boundary on SIGTERM or SIGUSR1 (stop_signals.h),
// saving a checkpoint first and returning 128 + the signal as its exit status; shows a
// progress bar, writes --metrics-out JSON lines and --tensorboard event files, prints
// --memory-summary; and --memory-trial runs
// the trial zeroshard-launch --find-batch-size reads (docs/memory.md) instead of training.
// Collective: every rank runs the same calls in the same order. Not thread-safe.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "zeroshard/config/run_options.h"
#include "zeroshard/optim/grad_scaler.h"
#include "zeroshard/optim/lr_scheduler.h"
#include "zeroshard/optim/optimizer.h"
#include "zeroshard/train/batches.h"
#include "zeroshard/train/stop_signals.h"

namespace zeroshard {

class TrainingReport;
struct ReportOptions;

class Session;
class ShardingEngine;
class Checkpointer;
struct Run;  // zeroshard/config/main.h

// ---- the command line -------------------------------------------------------------------------

// A flag a program takes besides the common ones, e.g.
//   {"--min-accuracy", true, "X", "exit 1 unless the final test accuracy is at least X",
//    ProgramFlag::Type::kNumber, 0, 1}
struct ProgramFlag {
  enum class Type { kText, kInteger, kNumber };
  std::string name;
  bool takes_value = false;
  std::string value_name;  // for --help
  std::string help;        // for --help
  Type type = Type::kText;  // the value is checked as this (a UsageError names the flag and the text)
  double min = -std::numeric_limits<double>::infinity();  // range of kInteger / kNumber values
  double max = std::numeric_limits<double>::infinity();
};

struct TrainFlags {
  std::string metrics_out;            // --metrics-out FILE: JSON lines per step, evaluation, summary
  std::string tensorboard;            // --tensorboard DIR: TensorBoard event files (logging.tensorboard_dir)
  bool resume = false;                // --resume: continue from the latest checkpoint in checkpoint.dir
  bool resume_auto = false;           // --resume=auto: the same when checkpoint.dir has one, else start
  bool memory_summary = false;        // --memory-summary: rank 0 prints its memory summary at the end
  bool memory_trial = false;          // --memory-trial: two steps, then the peak (zeroshard-launch)
  bool check_loss_decreases = false;  // --check-loss-decreases: exit 1 unless the held-out loss ends
                                      // below 90% of its value before training
  bool help = false;                  // --help / -h
  bool version = false;               // --version
  std::map<std::string, std::string> program;  // the program's own flags given (checked value or "")
};

// Parses `args` (argv[0] first, as Run::args gives them) with zeroshard/base/cli.h: the
// common flags above and the program's, as `--flag value` or `--flag=value`. `usage` is the
// program's description, the first paragraph of --help. UsageError naming an unknown flag (and
// the nearest one), a missing value, or a value that is not of the flag's type or range, located
// at the caller's line (the program's), not this library's.
TrainFlags parse_train_flags(const std::vector<std::string>& args, const std::string& usage,
                             const std::vector<ProgramFlag>& program_flags = {},
                             const char* caller_file = __builtin_FILE(), int caller_line = __builtin_LINE());
// The --help text of a training program (what start_training prints).
std::string train_flags_help(const std::string& program, const std::string& usage,
                             const std::vector<ProgramFlag>& program_flags = {});

// ---- starting -------------------------------------------------------------------------------

struct TrainStart {
  TrainFlags flags;
  RunOptions run;           // the run's options (Run::options); the loop's are run.train
  std::string config_text;  // Run::config_text(): what checkpoints store
  BatchPlan plan;
};

// What every training program does first, before any data or model memory: its flags (rank 0
// prints the help or the version and it returns nullopt for --help / --version), intra-op threads (this host's cores shared by its
// ranks), the batch plan, and for --memory-trial the plan line (so a trial that runs out of memory
// building the model has still said its batch).
// A usage error in the flags names the caller's line.
std::optional<TrainStart> start_training(Session& s, const Run& run, const std::string& usage,
                                         const std::vector<ProgramFlag>& program_flags = {},
                                         const char* caller_file = __builtin_FILE(), int caller_line = __builtin_LINE());

// ---- the task -------------------------------------------------------------------------------

// A held-out evaluation: named metrics averaged over samples, each sample counted once.
struct EvalSpec {
  std::shared_ptr<const Dataset> data;  // null: no evaluation
  int64_t samples = 0;                  // the first N samples; 0: all (data.limit_eval_samples caps)
  struct Metric {
    std::string name;   // metrics-file key, e.g. "val_loss"
    std::string label;  // printed, e.g. "validation loss"
  };
  std::vector<Metric> metrics;  // the first one is the held-out loss --check-loss-decreases checks
  // Per-sample values of each metric for one batch, in `metrics` order: tensors of [batch] (any
  // floating dtype, any device). Run without gradients, inside engine.forward, in eval mode.
  std::function<std::vector<at::Tensor>(const Batch&)> per_sample;
};

struct TrainTask {
  std::string name = "train";                // the program, for the header line
  std::shared_ptr<const Dataset> train;
  int64_t train_samples = 0;                 // the first N samples; 0: all (data.limit_train_samples caps)
  // The mean loss of one micro-batch (run inside engine.forward; the Trainer does the backward).
  std::function<at::Tensor(const Batch&)> loss;
  // Losses that are a mean over items of unequal count per sample (a language model's trained
  // tokens): the items of one micro-batch. When set, `loss` returns the micro-batch's SUM over its
  // items, and each step's loss and gradients are those of the mean over every item of the global
  // batch, whatever the split over ranks and micro-batches (one all-reduce of the counts per step).
  std::function<double(const Batch&)> loss_items;
  EvalSpec eval;
  std::string sample_noun = "samples";       // header: "32 <sample_noun> per step"
  std::string items = "samples";             // throughput unit: "tok" for tokens, else samples
  int64_t items_per_sample = 1;              // e.g. the sequence length for a language model
  std::vector<std::string> describe;         // lines for the header (model, data)
  // Called after the last step and evaluation, before the summary (e.g. to sample from a model).
  std::function<void()> after_training;
  // Further pass/fail checks after the summary: each prints its line on rank 0 and returns false
  // on failure (fit's exit status becomes 1). They run before --check-loss-decreases's.
  std::vector<std::function<bool(const struct TrainResult&)>> checks;
};

struct TrainResult {
  int64_t steps = 0;                // optimizer steps done (all of them, a resumed run's included)
  double train_seconds = 0;         // wall time inside training steps
  double items_per_s = 0;
  double final_train_loss = 0;
  int64_t skipped_steps = 0;        // by the loss scaler
  std::vector<double> initial_eval;  // EvalSpec::metrics order; empty without evaluation
  std::vector<double> final_eval;
  int exit_status = 0;              // 1 when a check failed; 128 + stop_signal after a stop
  int stop_signal = 0;              // the run stopped early on this signal (0: it ran to the end)
  std::string checkpoint;           // a stop's checkpoint (empty: none was saved)
};

// A TrainTask check: passes when final evaluation metric `metric` (its index in eval.metrics) is
// at least `required`; rank 0 prints "CHECK PASSED: <label> X reaches the required Y" (or FAILED).
// `session` must outlive the check.
std::function<bool(const TrainResult&)> at_least_check(const Session& session, size_t metric, std::string label,
                                                       double required);

// ---- the trainer ----------------------------------------------------------------------------

class Trainer {
 public:
  // The optimizer, LR schedule, loss scaler, parameter groups and checkpointer from start.run,
  // per-rank RNG seeds for training, and (unless --resume) the pretrained weights of
  // start.run.init_from (zeroshard/checkpoint/pretrained.h). Collective.
  Trainer(Session& s, ShardingEngine& engine, const TrainStart& start);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // The whole run (see the header comment). Collective.
  TrainResult fit(const TrainTask& task);

  // ---- pieces, for programs with their own loop ----
  struct StepResult {
    double loss;        // mean over micro-batches and ranks
    double lr;          // the rate this step used
    bool skipped;       // the loss scaler skipped it (inf/nan gradients)
    double seconds;     // wall time of the step
    double grad_norm;   // global L2 norm of the gradients before clipping (every step: one small
                        // all-reduce); NaN when the step was skipped
    double loss_scale;  // the loss scale the step used (1 without fp16 loss scaling)
    int stop_signal;    // a stop signal some rank received before this step's end, the same on
                        // every rank (agreed in the step's loss all-reduce); 0: none
  };
  // One optimizer step; `micro_loss(m)` runs micro-batch m's forward through engine.forward and
  // returns its mean loss. Collective.
  StepResult step(const std::function<at::Tensor(int)>& micro_loss);
  // The means of eval.metrics over its samples. Collective.
  std::vector<double> evaluate(const EvalSpec& eval);
  // Loads the latest checkpoint of checkpoint.dir (model, optimizer, loss scaler, RNG and
  // `stream`'s position); returns the step to continue from. UsageError without checkpoint.dir.
  int64_t resume(BatchStream& stream);
  // Saves every checkpoint.interval_steps steps and after the last step (waiting for an async
  // save then). Collective.
  void save_if_due(const BatchStream& stream, bool last_step);
  // Saves now unless this step is saved already, and waits until it is durable; returns its
  // directory ("" without checkpoint.dir). Collective.
  std::string save_now(const BatchStream& stream);
  // Whether the run continues from a checkpoint: --resume, or --resume=auto with one present.
  bool resuming() const { return resuming_; }

  int64_t steps_done() const { return steps_; }
  double train_seconds() const { return train_seconds_; }
  const ShardedOptimizer& optimizer() const { return *optimizer_; }
  const GradScaler& scaler() const { return scaler_; }
  const LrScheduler& scheduler() const { return scheduler_; }
  const TrainStart& start() const { return start_; }

 private:
  int run_memory_trial(const std::function<at::Tensor(int)>& micro_loss);
  ReportOptions report_options(const TrainTask& task, int64_t steps) const;
  void summarize(const TrainTask& task, TrainingReport& report, TrainResult& result, int64_t steps_run);
  int run_checks(const TrainTask& task, const TrainResult& result);
  TrainResult stop_early(TrainingReport& report, const BatchStream& stream, int signal, int64_t steps);
  std::string header(const TrainTask& task, int64_t steps) const;

  Session& session_;
  ShardingEngine& engine_;
  TrainStart start_;
  std::unique_ptr<ShardedOptimizer> optimizer_;
  LrScheduler scheduler_;
  GradScaler scaler_;
  int64_t steps_ = 0;
  double train_seconds_ = 0;
  std::unique_ptr<Checkpointer> checkpointer_;
  int64_t saved_step_ = -1;  // the step of the last save (-1: none)
  std::string saved_path_;
  bool resuming_ = false;
  std::unique_ptr<StopSignals> stop_;  // SIGTERM / SIGUSR1 while the Trainer lives
};

// The number of memory-trial steps: the second one has the optimizer state allocated, so it is
// the step with the highest peak.
constexpr int kMemoryTrialSteps = 2;

// Sum of `values` over all ranks (CPU doubles, one all-reduce). Collective.
std::vector<double> all_reduce_sum(Session& s, std::vector<double> values, const char* tag);

// Human-readable parameter count: "1.23M", "6.7B".
std::string format_params(int64_t n);

}  // namespace zeroshard
