// SPDX-License-Identifier: Apache-2.0
#pragma once
// How the global batch of TrainOptions (zeroshard/config/run_options.h) splits into micro-batches,
// and this rank's endless stream of training batches.
// Thread-safety: values, and a BatchStream used from one thread.

#include <cstdint>
#include <memory>
#include <string>

#include "zeroshard/config/run_options.h"  // TrainOptions
#include "zeroshard/train/loader.h"
#include "zeroshard/train/sampler.h"

namespace zeroshard {

class Session;

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
  // Starts epoch `epoch` now (skipping what is left of the current one), at this rank's batch
  // `skip` of it (its first `skip` batches are not read). Since every epoch's order is one global
  // permutation that rank r reads at positions r, r + N, ..., the first k x micro_batches
  // batches of every rank together are the epoch's first k global batches whatever the number of
  // ranks N: a stream restarted at that batch continues a run saved at another world size.
  void begin_epoch(int64_t epoch, int64_t skip = 0);
  // The next batch; rolls over to the next epoch at the end of one.
  Batch next();
  int64_t epoch() const { return epoch_; }
  int64_t consumed() const { return consumed_; }  // this rank's batches of the current epoch read
  int64_t batches_per_epoch() const { return batches_per_epoch_; }

 private:
  DistributedSampler sampler_;
  DataLoader loader_;
  int64_t epoch_ = -1;
  int64_t consumed_ = 0;
  int64_t batches_per_epoch_;
};

}  // namespace zeroshard
