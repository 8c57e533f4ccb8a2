#pragma once
// What the training examples share: their command line, the batch arithmetic, an endless stream of
// this rank's batches across epochs, and one optimizer step with micro-batches, loss scaling,
// clipping and the LR schedule. The model and its loss stay in each example.

#include <ATen/core/Tensor.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "zeroshard/core/session.h"
#include "zeroshard/train/loader.h"
#include "zeroshard/train/sampler.h"
#include "zeroshard/sharding/checkpoint.h"
#include "zeroshard/sharding/engine.h"
#include "zeroshard/sharding/grad_scaler.h"
#include "zeroshard/sharding/lr_scheduler.h"
#include "zeroshard/sharding/optimizer.h"

namespace zs_examples {

// Flags every example takes besides --config/--set (which the Session consumes).
struct ExampleArgs {
  std::string metrics_out;             // --metrics-out FILE: JSON lines per step + summary
  bool check_loss_decreases = false;   // --check-loss-decreases: exit 1 unless the held-out loss
                                       // ends below 90% of its value before training
  double min_accuracy = -1;            // --min-accuracy X (classifiers): exit 1 below it
  bool resume = false;                 // --resume: continue from the latest checkpoint in checkpoint.dir
  bool memory_summary = false;         // --memory-summary: rank 0 prints its memory summary at the end
  bool memory_trial = false;           // --memory-trial: two training steps, then report the memory
                                       // peak (zeroshard-launch --find-batch-size runs these)
  bool help = false;
};

// Parses the example's own flags; UsageError naming an unknown one, with `usage`.
ExampleArgs parse_example_args(const std::vector<std::string>& args, const std::string& usage, bool accuracy_flag);

// Intra-op threads: this host's cores shared by its ranks.
void set_threads(const zeroshard::Session& s);

// How a global batch splits: train.batch_size = ranks * micro_batches * micro_batch_size.
struct BatchPlan {
  int64_t micro_batch_size;  // samples per rank per micro-batch
  int micro_batches;
  int64_t global_batch;
};
// ConfigError naming train.batch_size, train.micro_batches and the world size when they do not divide.
BatchPlan plan_batches(const zeroshard::Config& cfg, int world_size);

// Loader options from the data section, delivering to `device`.
zeroshard::DataLoaderOptions loader_options(const zeroshard::Config& cfg, int64_t batch_size, bool drop_last,
                                            c10::Device device);

// This rank's training batches, epoch after epoch: each epoch reshuffles (DistributedSampler with
// drop_last, so every rank gets as many full batches) and restarts the loader.
class BatchStream {
 public:
  BatchStream(std::shared_ptr<const zeroshard::Dataset> dataset, int64_t samples, const zeroshard::Session& s,
              const zeroshard::Config& cfg, int64_t batch_size);
  // Starts epoch `epoch` now (skipping what is left of the current one).
  void begin_epoch(int64_t epoch);
  // The next batch; rolls over to the next epoch at the end of one.
  zeroshard::Batch next();
  // Where the stream is ("<epoch>:<batches consumed in it>"), and a jump back there (the epoch's
  // shuffle is a function of the seed and the epoch, so the same batches follow).
  std::string position() const;
  void seek(const std::string& position);
  int64_t epoch() const { return epoch_; }
  int64_t batches_per_epoch() const { return batches_per_epoch_; }

 private:
  zeroshard::DistributedSampler sampler_;
  zeroshard::DataLoader loader_;
  int64_t epoch_ = -1;
  int64_t consumed_ = 0;
  int64_t batches_per_epoch_;
};

// One optimizer step at a time, as docs/sharding.md describes: micro-batches (no_sync on all but
// the last when train.no_sync), GradScaler (fp16), clipping (optimizer.grad_clip_norm), the LR
// schedule, engine.step, zero_grad.
class Trainer {
 public:
  Trainer(zeroshard::Session& s, zeroshard::ShardingEngine& engine, const zeroshard::Config& cfg);

  struct Result {
    double loss;   // mean over micro-batches and ranks (all-reduced)
    double lr;     // the rate this step used
    bool skipped;  // the loss scaler skipped it (inf/nan gradients)
    double seconds;  // wall time of the step
  };
  // `micro_loss(m)` runs micro-batch m's forward through engine.forward and returns its mean loss.
  Result step(const std::function<at::Tensor(int)>& micro_loss);

  int64_t steps_done() const { return steps_; }
  // Wall time spent inside step(), seconds.
  double train_seconds() const { return train_seconds_; }
  const zeroshard::ShardedOptimizer& optimizer() const { return *optimizer_; }
  const zeroshard::GradScaler& scaler() const { return scaler_; }
  const zeroshard::LrScheduler& scheduler() const { return scheduler_; }

  // Training checkpoints, when checkpoint.dir is set (docs/checkpoints.md). resume() loads the
  // latest one (model, optimizer, loss scaler, RNG, and `stream`'s position) and returns the step
  // to continue from; save_if_due() saves every checkpoint.interval_steps steps and after the
  // last step, and waits for an async save before returning from the last one.
  bool checkpointing() const { return checkpointer_ != nullptr; }
  int64_t resume(BatchStream& stream);
  void save_if_due(const BatchStream& stream, bool last_step);

 private:
  zeroshard::Session& session_;
  zeroshard::ShardingEngine& engine_;
  std::unique_ptr<zeroshard::ShardedOptimizer> optimizer_;
  zeroshard::LrScheduler scheduler_;
  zeroshard::GradScaler scaler_;
  int micro_batches_;
  bool no_sync_;
  double clip_;
  int64_t steps_ = 0;
  double train_seconds_ = 0;
  int interval_ = 0;
  std::unique_ptr<zeroshard::Checkpointer> checkpointer_;
};

// How every example starts: its flags (printing the usage and returning nullopt for --help),
// intra-op threads, the batch plan, and for --memory-trial the plan line (before any model
// memory, so a trial that runs out of memory building the model has still said its batch).
struct ExampleStart {
  ExampleArgs args;
  BatchPlan plan;
};
std::optional<ExampleStart> start_example(const zeroshard::Session& s, const std::string& usage, bool accuracy_flag);

// --memory-trial, the protocol zeroshard-launch --find-batch-size / --auto-micro-batches reads
// (docs/memory.md). announce_memory_trial prints, on rank 0 and before the model is built,
//   zeroshard-memory-trial: plan world_size=W per_rank_batch=P micro_batches=M micro_batch_size=S
// run_memory_trial then runs kMemoryTrialSteps optimizer steps (the second one has the optimizer
// state allocated, so it is the step with the highest peak) and prints
//   zeroshard-memory-trial: fits micro_batch_size=S peak_bytes=B limit_bytes=L
// with B the highest peak over the ranks. Running out of memory instead ends the job with
// kOutOfMemoryExitCode (3). Collective.
constexpr int kMemoryTrialSteps = 2;
void announce_memory_trial(const zeroshard::Session& s, const BatchPlan& plan);
int run_memory_trial(zeroshard::Session& s, Trainer& trainer, const BatchPlan& plan,
                     const std::function<at::Tensor(int)>& micro_loss);

// Seeds LibTorch's default generators (CPU and CUDA), which it otherwise seeds at random: with
// `seed` before building the model (the same initial weights on every rank and run), then with
// seed + 1 + rank for training, so each rank draws its own dropout masks.
void seed_model_init(const zeroshard::Config& cfg);
void seed_training(const zeroshard::Config& cfg, int rank);

// Sum of `values` over all ranks (CPU doubles, one all-reduce).
std::vector<double> all_reduce_sum(zeroshard::Session& s, std::vector<double> values, const char* tag);

// "compute BFloat16", or "fp32 weights, autocast BFloat16" under precision.autocast.
std::string describe_precision(const zeroshard::ShardingOptions& o);

// Human-readable parameter count: "1.23M", "6.7B".
std::string format_params(int64_t n);

}  // namespace zs_examples
