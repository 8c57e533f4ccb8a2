// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/train/sampler.h"

#include <numeric>

#include "zeroshard/base/error.h"

namespace zeroshard {
namespace {

// SplitMix64 (Steele, Lea, Flood 2014): a tiny generator with a fixed, documented sequence.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound) without modulo bias (rejection of the short last interval).
  uint64_t below(uint64_t bound) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
    uint64_t x;
    do {
      x = next();
    } while (x >= limit);
    return x % bound;
  }
};

}  // namespace

std::vector<int64_t> random_permutation(int64_t n, uint64_t seed) {
  ZS_REQUIRE(n >= 0, UsageError, "random_permutation: n = ", n, " must be >= 0");
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  SplitMix64 rng{seed};
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i) + 1));
    std::swap(p[i], p[j]);
  }
  return p;
}

DistributedSampler::DistributedSampler(int64_t size, int num_replicas, int rank, SamplerOptions options)
    : size_(size), num_replicas_(num_replicas), rank_(rank), options_(options) {
  ZS_REQUIRE(size >= 0, UsageError, "DistributedSampler: dataset size ", size, " must be >= 0");
  ZS_REQUIRE(num_replicas >= 1, UsageError, "DistributedSampler: num_replicas = ", num_replicas, " must be >= 1");
  ZS_REQUIRE(rank >= 0 && rank < num_replicas, UsageError, "DistributedSampler: rank ", rank,
             " is outside [0, ", num_replicas, ")");
  if (options.drop_last) {
    ZS_REQUIRE(size >= num_replicas, UsageError, "DistributedSampler: drop_last with ", size, " sample(s) and ",
               num_replicas, " ranks leaves every rank empty; use a larger dataset or drop_last = false");
    num_samples_ = size / num_replicas;
  } else {
    num_samples_ = (size + num_replicas - 1) / num_replicas;
  }
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order;
  if (options_.shuffle) {
    order = random_permutation(size_, options_.seed + static_cast<uint64_t>(epoch_));
  } else {
    order.resize(static_cast<size_t>(size_));
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  const int64_t total = total_size();
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  // Position p of the padded list is order[p % size] (wrap-around) or, with drop_last, p < size.
  for (int64_t p = rank_; p < total; p += num_replicas_) mine.push_back(order[static_cast<size_t>(p % size_)]);
  return mine;
}

int64_t DistributedSampler::num_unique_samples() const {
  if (options_.drop_last) return num_samples_;
  // Positions rank_ + k * num_replicas_ below size_ are real samples.
  return rank_ >= size_ ? 0 : (size_ - rank_ + num_replicas_ - 1) / num_replicas_;
}

}  // namespace zeroshard
