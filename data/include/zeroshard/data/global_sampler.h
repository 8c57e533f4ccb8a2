// SPDX-License-Identifier: Apache-2.0
#pragma once
// GlobalSampler: which samples every optimizer step trains on, as a position in one global order
// that does not depend on the number of ranks, so a run resumes exactly at any world size.
//
//   GlobalSampler sampler({num_samples, /*global_batch=*/64, /*shuffle=*/true, /*seed=*/1234});
//   if (resuming) sampler.restore_json(saved);         // from the checkpoint
//   std::vector<int64_t> mine = sampler.next_step(rank, world_size);   // 64 / world_size ids
//   ...; checkpoint.save(sampler.state_json());        // the same text on every rank
//
// Epoch e orders the samples by an IndexPermutation keyed by the seed and e (the identity without
// shuffling). Step s of an epoch trains on positions [s*G, (s+1)*G) of that order, G the global
// batch; an epoch has floor(num_samples / G) steps and its last num_samples % G positions are left
// out (other samples each epoch when shuffling). Rank r of N takes the contiguous positions
// [s*G + r*G/N, s*G + (r+1)*G/N): G must be a multiple of N. The state is (epoch, samples
// consumed in the epoch over all ranks): after k steps it is the same whatever N was at each
// step, so runs split across world sizes see exactly the samples of one uninterrupted run, in the
// same order. Thread-safety: a value; one thread advances it.

#include <cstdint>
#include <string>
#include <vector>

namespace zeroshard::data {

struct GlobalSamplerOptions {
  int64_t num_samples = 0;
  int64_t global_batch = 1;  // samples per optimizer step over all ranks
  bool shuffle = true;
  uint64_t seed = 0;
};

struct SamplerState {
  int64_t epoch = 0;
  int64_t consumed = 0;  // positions of the epoch's order consumed by all ranks together
  bool operator==(const SamplerState& o) const { return epoch == o.epoch && consumed == o.consumed; }
};

class GlobalSampler {
 public:
  // UsageError for num_samples < global_batch or global_batch < 1.
  explicit GlobalSampler(GlobalSamplerOptions options);

  // This rank's sample ids for the next step, in order, then advances by one step (starting the
  // next epoch first when the current one has no full step left). UsageError when world_size does
  // not divide the global batch, or for a rank outside [0, world_size).
  std::vector<int64_t> next_step(int rank, int world_size);
  // The same ids without advancing.
  std::vector<int64_t> peek_step(int rank, int world_size) const;
  // The sample at `position` of epoch `epoch`'s order.
  int64_t sample_at(int64_t epoch, int64_t position) const;

  int64_t steps_per_epoch() const { return options_.num_samples / options_.global_batch; }
  const GlobalSamplerOptions& options() const { return options_; }
  const SamplerState& state() const { return state_; }
  // UsageError for a state outside the epoch (consumed beyond the samples).
  void restore(const SamplerState& state);

  // {"epoch":E,"consumed":C,"num_samples":N,"seed":S,"shuffle":B} on one line: what a checkpoint
  // stores (the same on every rank).
  std::string state_json() const;
  // Restores a state_json() text. CheckpointError naming the field when num_samples, seed or
  // shuffle differ from this sampler's (the data or its order changed: no exact resume), or when
  // the text is malformed. The global batch may differ: the order continues at the same sample.
  void restore_json(const std::string& json);

 private:
  SamplerState normalized() const;  // the state with a finished epoch rolled over
  uint64_t epoch_key(int64_t epoch) const;

  GlobalSamplerOptions options_;
  SamplerState state_;
};

}  // namespace zeroshard::data
