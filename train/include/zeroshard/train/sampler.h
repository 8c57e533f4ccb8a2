// SPDX-License-Identifier: Apache-2.0
#pragma once
// DistributedSampler: which dataset indices each rank reads in an epoch (PyTorch's
// torch.utils.data.DistributedSampler semantics).
//
//   zeroshard::DistributedSampler sampler(dataset.size(), s.world_size(), s.rank(), {/*shuffle=*/true, seed});
//   for (int64_t epoch = 0; ...; ++epoch) {
//     sampler.set_epoch(epoch);
//     loader.start(sampler.indices());
//     ...
//   }
//
// Every epoch all ranks compute the same order of [0, size): a permutation drawn from
// seed + epoch when shuffling, the identity otherwise. Then
//   - drop_last = false: the order is padded by wrap-around (its own first elements, repeated as
//     often as needed) to total_size() = num_replicas * ceil(size / num_replicas), so every rank
//     gets the same number of samples and a few samples appear twice in the epoch;
//   - drop_last = true: the order is cut to total_size() = num_replicas * floor(size / num_replicas),
//     dropping its tail (a different tail each epoch when shuffling).
// Rank r takes positions r, r + num_replicas, r + 2 * num_replicas, ... of that list, so the ranks'
// indices are disjoint (up to padding) and their union is every index (drop_last = false).
// The permutation is our own Fisher-Yates over a SplitMix64 stream: the same on every platform,
// compiler and LibTorch version (it is not PyTorch's randperm sequence).
// Thread-safety: a plain value; const member functions may be called concurrently.

#include <cstdint>
#include <vector>

namespace zeroshard {

struct SamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;  // the same on every rank
  bool drop_last = false;
};

class DistributedSampler {
 public:
  // Throws UsageError for size < 0, num_replicas < 1, rank outside [0, num_replicas), or
  // drop_last with fewer samples than ranks (every rank would get nothing).
  DistributedSampler(int64_t size, int num_replicas, int rank, SamplerOptions options = {});

  // Selects the epoch's permutation (seed + epoch). Call before indices() each epoch.
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

  // This rank's dataset indices for the current epoch, in reading order; num_samples() of them.
  std::vector<int64_t> indices() const;
  // Indices per rank per epoch (the same on every rank).
  int64_t num_samples() const { return num_samples_; }
  // Indices per epoch over all ranks (num_replicas * num_samples()).
  int64_t total_size() const { return num_samples_ * num_replicas_; }
  // How many of this rank's indices() come first and are not wrap-around padding: positions at or
  // beyond it repeat samples another rank (or this one) already has. Evaluation uses it to count
  // every sample exactly once. num_samples() when drop_last.
  int64_t num_unique_samples() const;

  int64_t dataset_size() const { return size_; }

 private:
  int64_t size_;
  int num_replicas_;
  int rank_;
  SamplerOptions options_;
  int64_t num_samples_;
  int64_t epoch_ = 0;
};

// The permutation of [0, n) the sampler uses for `seed` (Fisher-Yates, SplitMix64, unbiased
// bounded draws). Exposed for tests and for samplers of other shapes.
std::vector<int64_t> random_permutation(int64_t n, uint64_t seed);

}  // namespace zeroshard
