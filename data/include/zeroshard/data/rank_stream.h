// SPDX-License-Identifier: Apache-2.0
#pragma once
// RankStream: what one rank trains on, step after step: its micro-batches of fixed-length samples
// in the global order of a GlobalSampler, and the state a checkpoint stores. This is the trainer's
// one entry point into zs_data; the trainer turns each SampleBatch into tensors.
//
//   RankStream stream(samples, {/*global_batch=*/64, /*micro_batches=*/2, /*shuffle=*/true, seed}, rank, world);
//   if (resuming) stream.restore_json(saved);          // saved at any world size
//   for (step...) for (int m = 0; m < 2; ++m) train_on(stream.next_micro_batch());   // 16 samples each at 2 ranks
//   save(stream.state_json());                         // after a step; the same text on every rank
//
// Step s gives rank r of N the sampler's positions [s*G + r*G/N, s*G + (r+1)*G/N) of the epoch's
// order (global_sampler.h), cut in order into micro_batches pieces of G/(N*M). Reads happen in
// next_micro_batch(), on the calling thread (a sample's tokens are one small mapped read).
// Thread-safety: one thread uses a stream.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "zeroshard/data/global_sampler.h"
#include "zeroshard/data/sample.h"

namespace zeroshard::data {

struct StreamOptions {
  int64_t global_batch = 1;  // samples per optimizer step over all ranks
  int micro_batches = 1;     // per rank per step
  bool shuffle = true;
  uint64_t seed = 0;
};

class RankStream {
 public:
  // UsageError when global_batch is not a multiple of world_size x micro_batches (naming the
  // three and the nearest batch that is), or when the samples hold no global batch.
  RankStream(std::shared_ptr<const SampleSource> samples, StreamOptions options, int rank, int world_size);

  // The next micro-batch of this rank (global_batch / (world_size x micro_batches) samples).
  SampleBatch next_micro_batch();

  int64_t steps_per_epoch() const { return sampler_.steps_per_epoch(); }
  int64_t micro_batch_size() const { return micro_size_; }
  // Where the next step starts (GlobalSampler's state).
  const SamplerState& state() const { return sampler_.state(); }
  // GlobalSampler::state_json(); UsageError between micro-batches of a step (save after a step).
  std::string state_json() const;
  // GlobalSampler::restore_json(); the stream continues at the start of the saved step.
  void restore_json(const std::string& json);

 private:
  std::shared_ptr<const SampleSource> samples_;
  StreamOptions options_;
  int rank_, world_size_;
  int64_t micro_size_;
  GlobalSampler sampler_;
  std::vector<int64_t> step_ids_;  // this rank's ids of the current step
  int next_micro_ = 0;             // micro-batches of the current step handed out
};

}  // namespace zeroshard::data
