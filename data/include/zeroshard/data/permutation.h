// SPDX-License-Identifier: Apache-2.0
#pragma once
// IndexPermutation: a random permutation of [0, n) evaluated one index at a time, in O(1) memory,
// so a sampler over billions of samples never holds the order in memory.
//
//   IndexPermutation p(num_samples, seed);
//   int64_t id = p(position);   // the sample at `position` of the shuffled order
//
// A balanced Feistel network (6 rounds, round keys from SplitMix64 of the seed, a SplitMix64
// mixing round function) is a bijection of [0, 2^(2h)) with 2^(2h) < 4n; indices that land at or
// beyond n are encrypted again ("cycle walking") until they fall inside, which keeps it a
// bijection of [0, n). Integer arithmetic only: the same order on every machine and compiler.
// Thread-safety: immutable; operator() is thread-safe.

#include <array>
#include <cstdint>

namespace zeroshard::data {

class IndexPermutation {
 public:
  // UsageError for n < 0.
  IndexPermutation(int64_t n, uint64_t seed);
  int64_t size() const { return n_; }
  // The permuted index of `position` in [0, n) (UsageError outside).
  int64_t operator()(int64_t position) const;

 private:
  uint64_t encrypt(uint64_t x) const;

  int64_t n_;
  int half_bits_ = 1;
  uint64_t half_mask_ = 1;
  std::array<uint64_t, 6> keys_{};
};

// SplitMix64's output function (Steele, Lea, Flood 2014), the mixer used above.
uint64_t splitmix64(uint64_t x);

}  // namespace zeroshard::data
