// SPDX-License-Identifier: Apache-2.0
// DistributedSampler: the ranks' shards partition the dataset (PyTorch's semantics), computed
// in-process for 1, 2 and 4 ranks.

#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

#include "common/test_util.h"
#include "zeroshard/base/error.h"
#include "zeroshard/train/sampler.h"

namespace zs = zeroshard;

namespace {

std::vector<std::vector<int64_t>> shards(int64_t n, int ranks, zs::SamplerOptions o, int64_t epoch = 0) {
  std::vector<std::vector<int64_t>> out;
  for (int r = 0; r < ranks; ++r) {
    zs::DistributedSampler s(n, ranks, r, o);
    s.set_epoch(epoch);
    out.push_back(s.indices());
  }
  return out;
}

TEST(Sampler, PartitionWithPaddingCoversEverySampleOnce) {
  for (int ranks : {1, 2, 4}) {
    for (int64_t n : {1, 3, 7, 8, 10, 101}) {
      for (bool shuffle : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "n=" << n << " ranks=" << ranks << " shuffle=" << shuffle);
        zs::SamplerOptions o{shuffle, 7, /*drop_last=*/false};
        auto parts = shards(n, ranks, o);
        const int64_t per_rank = (n + ranks - 1) / ranks;
        std::vector<int64_t> unique, all;
        for (int r = 0; r < ranks; ++r) {
          zs::DistributedSampler s(n, ranks, r, o);
          ASSERT_EQ(static_cast<int64_t>(parts[r].size()), per_rank);
          EXPECT_EQ(s.num_samples(), per_rank);
          EXPECT_EQ(s.total_size(), per_rank * ranks);
          // The first num_unique_samples() of every rank are distinct samples; together all of them.
          unique.insert(unique.end(), parts[r].begin(), parts[r].begin() + s.num_unique_samples());
          all.insert(all.end(), parts[r].begin(), parts[r].end());
        }
        std::vector<int64_t> expect(static_cast<size_t>(n));
        std::iota(expect.begin(), expect.end(), int64_t{0});
        std::sort(unique.begin(), unique.end());
        EXPECT_EQ(unique, expect) << "the unpadded parts must partition the dataset";
        std::set<int64_t> covered(all.begin(), all.end());
        EXPECT_EQ(static_cast<int64_t>(covered.size()), n) << "the union must be every index";
        EXPECT_EQ(static_cast<int64_t>(all.size()) - n, per_rank * ranks - n) << "padding count";
      }
    }
  }
}

TEST(Sampler, DropLastGivesDisjointEqualShards) {
  for (int ranks : {1, 2, 4}) {
    for (int64_t n : {4, 7, 10, 101}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n << " ranks=" << ranks);
      zs::SamplerOptions o{true, 3, /*drop_last=*/true};
      auto parts = shards(n, ranks, o);
      std::set<int64_t> seen;
      for (int r = 0; r < ranks; ++r) {
        EXPECT_EQ(static_cast<int64_t>(parts[r].size()), n / ranks);
        EXPECT_EQ(zs::DistributedSampler(n, ranks, r, o).num_unique_samples(), n / ranks);
        for (int64_t i : parts[r]) {
          EXPECT_TRUE(i >= 0 && i < n);
          EXPECT_TRUE(seen.insert(i).second) << "index " << i << " appears twice";
        }
      }
      EXPECT_EQ(static_cast<int64_t>(seen.size()), ranks * (n / ranks));
    }
  }
}

TEST(Sampler, WrapAroundPaddingAndDropLastMatchPyTorch) {
  // Without shuffling PyTorch gives: padded list 0 1 2 3 4 0 1 2; rank r takes positions r, r+4.
  auto pad = shards(5, 4, {false, 0, false});
  EXPECT_EQ(pad[0], (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(pad[1], (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(pad[2], (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(pad[3], (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(zs::DistributedSampler(5, 4, 0, {false, 0, false}).num_unique_samples(), 2);
  EXPECT_EQ(zs::DistributedSampler(5, 4, 1, {false, 0, false}).num_unique_samples(), 1);
  // Padding as long as the dataset: 2 samples over 4 ranks, padded list 0 1 0 1.
  auto many = shards(2, 4, {false, 0, false});
  EXPECT_EQ(many[2], (std::vector<int64_t>{0}));
  EXPECT_EQ(many[3], (std::vector<int64_t>{1}));
  // drop_last cuts the tail: 10 samples over 4 ranks, 2 each from 0..7.
  auto cut = shards(10, 4, {false, 0, true});
  EXPECT_EQ(cut[0], (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(cut[3], (std::vector<int64_t>{3, 7}));
}

TEST(Sampler, ReshufflesPerEpochFromTheSeed) {
  zs::SamplerOptions o{true, 11, false};
  auto e0 = shards(100, 2, o, 0), e0_again = shards(100, 2, o, 0), e1 = shards(100, 2, o, 1);
  EXPECT_EQ(e0, e0_again) << "the same seed and epoch must give the same order";
  EXPECT_NE(e0[0], e1[0]) << "a new epoch must reshuffle";
  auto other_seed = shards(100, 2, {true, 12, false}, 0);
  EXPECT_NE(e0[0], other_seed[0]);
  // Both epochs still partition the dataset.
  for (const auto& parts : {e0, e1}) {
    std::set<int64_t> all(parts[0].begin(), parts[0].end());
    all.insert(parts[1].begin(), parts[1].end());
    EXPECT_EQ(all.size(), 100u);
  }
  // The order is a real shuffle, not the identity.
  std::vector<int64_t> identity(50);
  for (int i = 0; i < 50; ++i) identity[i] = 2 * i;
  EXPECT_NE(e0[0], identity);
}

TEST(Sampler, PermutationIsStableAndValid) {
  for (int64_t n : {0, 1, 2, 17, 1000}) {
    std::vector<int64_t> p = zs::random_permutation(n, 5);
    std::vector<int64_t> sorted = p;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(sorted[i], i);
  }
  // The sequence is ours (SplitMix64 + Fisher-Yates) and must not drift between builds: a change
  // here reorders every user's training data.
  EXPECT_EQ(zs::random_permutation(10, 42), (std::vector<int64_t>{0, 9, 5, 8, 6, 4, 7, 2, 1, 3}));
}

TEST(Sampler, RejectsBadArguments) {
  EXPECT_THROW(zs::DistributedSampler(10, 0, 0), zs::UsageError);
  EXPECT_THROW(zs::DistributedSampler(10, 2, 2), zs::UsageError);
  EXPECT_THROW(zs::DistributedSampler(10, 2, -1), zs::UsageError);
  EXPECT_THROW(zs::DistributedSampler(-1, 2, 0), zs::UsageError);
  try {
    zs::DistributedSampler(3, 4, 0, {true, 0, true});
    FAIL() << "drop_last with fewer samples than ranks must throw";
  } catch (const zs::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("drop_last with 3 sample(s) and 4 ranks"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(zs::DistributedSampler(0, 2, 1).indices().empty());
}

}  // namespace
