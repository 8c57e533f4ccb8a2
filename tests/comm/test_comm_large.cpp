// SPDX-License-Identifier: Apache-2.0
// Messages over 2^31 elements (MPI counts are int): real sizes, within CI memory (about 3 GiB per
// rank at 2 ranks).

#include <ATen/ops/empty.h>

#include <climits>

#include "common/test_util.h"

namespace zs = zeroshard;
using zeroshard::test::world;

namespace {
constexpr int64_t kBig = int64_t{INT_MAX} + 5;  // one more than an int can count, and then some

bool all_equal(const at::Tensor& t, int64_t v) {
  return t.min().item<int64_t>() == v && t.max().item<int64_t>() == v;
}
}  // namespace

TEST(CommLarge, AllReduceOverIntMaxElements) {
  ZS_REQUIRE_RANKS(2);
  at::Tensor t = at::empty({kBig}, at::kChar).fill_(1);
  t[kBig - 1] = 2;  // the tail beyond INT_MAX is where a truncated count would fail
  world()->all_reduce(t, zs::ReduceOp::kSum, "large.ar")->wait();
  const int n = world()->size();
  EXPECT_TRUE(all_equal(t.narrow(0, 0, kBig - 1), n));
  EXPECT_EQ(t[kBig - 1].item<int64_t>(), 2 * n);
}

TEST(CommLarge, BroadcastOverIntMaxElements) {
  ZS_REQUIRE_RANKS(2);
  at::Tensor t = at::empty({kBig}, at::kByte).fill_(world()->rank() + 1);
  world()->broadcast(t, 1, "large.bcast")->wait();
  EXPECT_TRUE(all_equal(t, 2));
}

TEST(CommLarge, AllGatherBeyondIntMaxOffsets) {
  ZS_REQUIRE_RANKS(2);
  // Each shard fits an int, the gathered buffer does not: offsets past 2^31 elements.
  const int64_t shard = (int64_t{1} << 30) + 3;
  const int n = world()->size();
  at::Tensor in = at::empty({shard}, at::kByte).fill_(world()->rank() + 1);
  in[shard - 1] = 100 + world()->rank();
  at::Tensor out = at::empty({shard * n}, at::kByte).fill_(0);
  world()->all_gather_into(out, in, "large.ag")->wait();
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(all_equal(out.narrow(0, r * shard, shard - 1), r + 1)) << "rank " << r;
    EXPECT_EQ(out[r * shard + shard - 1].item<int64_t>(), 100 + r);
  }
}
