#pragma once
// The training loop's settings (the config's `train` and `data` sections as a plain struct), how
// the global batch splits into micro-batches, and this rank's endless stream of training batches.
// Thread-safety: values, and a BatchStream used from one thread.

#include <cstdint>
#include <memory>
#include <string>

#include "zeroshard/train/loader.h"
#include "zeroshard/train/sampler.h"

namespace zeroshard {

class Session;
namespace config {
class Config;
}  // namespace config

struct TrainOptions {
  // train.*
  int64_t steps = 0;         // optimizer steps; 0: `epochs` passes over the data
  int epochs = 1;
  int64_t batch_size = 32;   // global: samples per optimizer step over all ranks
  int micro_batches = 1;     // per optimizer step (gradient accumulation)
  bool no_sync = false;      // accumulate unsharded, reduce once per step
  int64_t eval_interval = 0; // also evaluate every N steps; 0: off (always at the end)
  int eval_batches = 0;      // per rank per evaluation; 0: the whole held-out set
  int log_interval = 10;     // progress lines every N steps when not on a terminal
  // optimizer.grad_clip_norm, checkpoint.interval_steps
  double grad_clip_norm = 0;
  int checkpoint_interval = 0;
  // data.*
  int num_workers = 2;
  int prefetch_batches = 4;
  bool pin_memory = true;
  bool shuffle = true;
  int64_t limit_train_samples = 0;
  int64_t limit_eval_samples = 0;
  uint64_t seed = 0;  // runtime.seed: the shuffle of every epoch
  static TrainOptions from_config(const config::Config& cfg);
};

// train.batch_size = ranks x micro_batches x micro_batch_size.
struct BatchPlan {
  int64_t micro_batch_size = 0;  // samples per rank per micro-batch
  int micro_batches = 1;
  int64_t global_batch = 0;
};
// ConfigError naming train.batch_size, train.micro_batches and the world size when they do not
// divide, with the nearest batch size that does.
BatchPlan plan_batches(const TrainOptions& o, int world_size);

// Loader options delivering batches of `batch_size` to `device`.
DataLoaderOptions loader_options(const TrainOptions& o, int64_t batch_size, bool drop_last, c10::Device device);

// This rank's training batches, epoch after epoch: each epoch reshuffles (DistributedSampler with
// drop_last, so every rank gets as many full batches) and restarts the loader.
class BatchStream {
 public:
  // ConfigError when the rank's part of `samples` holds no full batch.
  BatchStream(std::shared_ptr<const Dataset> dataset, int64_t samples, const Session& s, const TrainOptions& o,
              int64_t batch_size);
  // Starts epoch `epoch` now (skipping what is left of the current one).
  void begin_epoch(int64_t epoch);
  // The next batch; rolls over to the next epoch at the end of one.
  Batch next();
  // Where the stream is ("<epoch>:<batches consumed in it>"), and a jump back there (the epoch's
  // shuffle is a function of the seed and the epoch, so the same batches follow).
  std::string position() const;
  void seek(const std::string& position);
  int64_t epoch() const { return epoch_; }
  int64_t batches_per_epoch() const { return batches_per_epoch_; }

 private:
  DistributedSampler sampler_;
  DataLoader loader_;
  int64_t epoch_ = -1;
  int64_t consumed_ = 0;
  int64_t batches_per_epoch_;
};

}  // namespace zeroshard
