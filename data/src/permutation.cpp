// SPDX-License-Identifier: Apache-2.0
// A random permutation of [0, n) evaluated per index: Feistel network with cycle walking
// (permutation.h).

#include "zeroshard/data/permutation.h"

#include "zeroshard/base/error.h"

namespace zeroshard::data {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

IndexPermutation::IndexPermutation(int64_t n, uint64_t seed) : n_(n) {
  ZS_REQUIRE(n >= 0, UsageError, "IndexPermutation: n = ", n, " must be >= 0");
  // Two halves of h bits each with 2^(2h) >= n (and h >= 1).
  int bits = 2;
  while (bits < 63 && (uint64_t{1} << bits) < static_cast<uint64_t>(n)) bits += 2;
  half_bits_ = bits / 2;
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
  uint64_t state = seed;
  for (uint64_t& k : keys_) {
    state += 0x9E3779B97F4A7C15ull;
    k = splitmix64(state);
  }
}

uint64_t IndexPermutation::encrypt(uint64_t x) const {
  uint64_t left = x >> half_bits_, right = x & half_mask_;
  for (uint64_t key : keys_) {
    const uint64_t next = left ^ (splitmix64(right ^ key) & half_mask_);
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

int64_t IndexPermutation::operator()(int64_t position) const {
  ZS_REQUIRE(position >= 0 && position < n_, UsageError, "IndexPermutation: position ", position,
             " is outside [0, ", n_, ")");
  uint64_t x = static_cast<uint64_t>(position);
  do {
    x = encrypt(x);
  } while (x >= static_cast<uint64_t>(n_));
  return static_cast<int64_t>(x);
}

}  // namespace zeroshard::data
