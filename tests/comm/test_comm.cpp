// SPDX-License-Identifier: Apache-2.0
// The MPI communicator, element by element against rank-seeded data, at 1, 2 and 4 ranks.

#include <ATen/ops/arange.h>
#include <ATen/ops/repeat_interleave.h>
#include <ATen/ops/sin.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/max.h>
#include <ATen/ops/min.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>

#include <chrono>
#include <climits>
#include <thread>

#include "common/test_util.h"
#include "zeroshard/comm/factory.h"
#include "zeroshard/base/error.h"

namespace zs = zeroshard;
using zeroshard::test::world;

namespace {

const std::vector<c10::ScalarType> kAllDtypes = {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf, at::kInt,
                                                 at::kLong,  at::kShort,  at::kByte,     at::kChar, at::kBool};
const std::vector<c10::ScalarType> kNumeric = {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf,
                                               at::kInt,   at::kLong,   at::kShort,    at::kByte, at::kChar};
// Shard sizes: empty, single element, small odd, larger than one 7-element chunk, uneven large.
const std::vector<int64_t> kShards = {0, 1, 7, 23, 40961};

// Element i of rank r: small integers, exact in every dtype, sums over 4 ranks still exact in bf16.
at::Tensor seeded(int64_t n, int rank, c10::ScalarType dtype) {
  at::Tensor v = at::arange(n, at::kLong).remainder(13).add(rank);
  return dtype == at::kBool ? v.remainder(2).to(at::kBool) : v.to(dtype);
}

std::string name(c10::ScalarType t) { return c10::toString(t); }

// Runs `fn` expecting a CommError whose text contains every fragment.
template <typename Fn>
void expect_comm_error(Fn fn, std::vector<std::string> fragments) {
  try {
    fn();
    ADD_FAILURE() << "expected a CommError containing '" << fragments.front() << "'";
  } catch (const zs::CommError& e) {
    for (const auto& f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
  }
}

void check_all_gather(zs::Communicator& c, c10::ScalarType dtype, int64_t shard) {
  const int n = c.size();
  at::Tensor out = at::full({shard * n}, 99, at::kLong).to(dtype);
  c.all_gather_into(out, seeded(shard, c.rank(), dtype), "t.ag")->wait();
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(at::equal(out.narrow(0, r * shard, shard), seeded(shard, r, dtype)))
        << name(dtype) << " shard " << shard << " from rank " << r << " on " << c.name();
  }
}

void check_reduce_scatter(zs::Communicator& c, c10::ScalarType dtype, int64_t shard, zs::ReduceOp op) {
  const int n = c.size(), me = c.rank();
  at::Tensor out = at::empty({shard}, dtype);
  c.reduce_scatter_into(out, seeded(shard * n, me, dtype), op, "t.rs")->wait();
  // Reference in double: op over ranks of every rank's piece `me`.
  at::Tensor ref = seeded(shard * n, 0, at::kDouble).narrow(0, me * shard, shard).clone();
  for (int r = 1; r < n; ++r) {
    at::Tensor piece = seeded(shard * n, r, at::kDouble).narrow(0, me * shard, shard);
    if (op == zs::ReduceOp::kMax) ref = at::max(ref, piece);
    else if (op == zs::ReduceOp::kMin) ref = at::min(ref, piece);
    else ref.add_(piece);
  }
  if (op == zs::ReduceOp::kAvg) ref.div_(n);
  EXPECT_TRUE(at::equal(out, ref.to(dtype))) << name(dtype) << " " << zs::to_string(op) << " shard " << shard;
}


// Rank r's gradient-like values for the quantized reduce-scatter: magnitudes that change by
// orders from block to block of 16 elements, one block of zeros in every 7, rank-dependent signs.
at::Tensor graded(int64_t n, int rank) {
  const at::Tensor i = at::arange(n, at::kDouble);
  const at::Tensor scale = at::pow(10.0, i.div(16, "floor").remainder(5).sub(2));
  at::Tensor v = at::sin(i.mul(0.37).add(rank * 1.3)).mul(scale);
  return v.masked_fill(i.div(16, "floor").remainder(7).eq(3), 0.0).to(at::kFloat);
}

// Largest |x| of the block of `block` elements (counted from the start of `x`) each element is in.
at::Tensor block_absmax(const at::Tensor& x, int64_t block) {
  const int64_t n = x.numel(), nb = (n + block - 1) / block;
  at::Tensor padded = at::zeros({nb * block}, x.options());
  padded.narrow(0, 0, n).copy_(x.abs());
  return std::get<0>(padded.view({nb, block}).max(1)).repeat_interleave(block).narrow(0, 0, n);
}

// reduce_scatter_int8_into on `c` (ranks grouped into nodes of `node_size` when c runs in stages):
// every element of this rank's shard within the documented bound of the exact fp64 sum, zeros
// exact, and not every element exact (the values did travel quantized).
void check_quantized_reduce_scatter(zs::Communicator& c, int64_t shard, int64_t block, zs::ReduceOp op,
                                    int node_size) {
  const int n = c.size(), me = c.rank();
  at::Tensor out = at::full({shard}, 99.0f, at::kFloat);
  c.reduce_scatter_int8_into(out, graded(shard * n, me), op, block, "t.rs.int8")->wait();
  at::Tensor exact = at::zeros({shard}, at::kDouble), bound = at::zeros({shard}, at::kDouble);
  std::vector<at::Tensor> parts;
  for (int r = 0; r < n; ++r) {
    parts.push_back(graded(shard * n, r).narrow(0, me * shard, shard).to(at::kDouble));
    exact.add_(parts.back());
    bound.add_(block_absmax(parts.back(), block).div(254.0));
  }
  if (!c.node_stages().empty()) {
    // The node sums are encoded again: each within absmax / 254 of its block, its own error included.
    const at::Tensor first = bound.clone();
    for (int m = 0; m < n / node_size; ++m) {
      at::Tensor node = at::zeros({shard}, at::kDouble);
      for (int r = m * node_size; r < (m + 1) * node_size; ++r) node.add_(parts[r]);
      bound.add_(block_absmax(node.abs().add(first), block).div(254.0));
    }
  }
  if (op == zs::ReduceOp::kAvg) {
    exact.div_(n);
    bound.div_(n);
  }
  // Slack for fp32 rounding in the encoding and the sum.
  bound.add_(exact.abs().mul(1e-6)).add_(1e-30);
  const at::Tensor err = out.to(at::kDouble).sub(exact).abs();
  const std::string what = c.name() + " shard " + std::to_string(shard) + " block " + std::to_string(block) + " " +
                           zs::to_string(op);
  const at::Tensor over = err.gt(bound).logical_or(err.isnan());
  EXPECT_EQ(over.sum().item<int64_t>(), 0) << what << ": first over the bound at "
                                           << (over.any().item<bool>() ? over.nonzero()[0].item<int64_t>() : -1);
  EXPECT_TRUE(at::equal(out.masked_select(exact.eq(0)), at::zeros({exact.eq(0).sum().item<int64_t>()})))
      << what << ": zeros stay exact";
  if (shard >= 16) EXPECT_TRUE(err.gt(0).any().item<bool>()) << what << ": every element exact, nothing quantized";
}
}  // namespace

TEST(Comm, WorldMatchesSession) {
  EXPECT_EQ(world()->size(), zs::test::world_size());
  EXPECT_EQ(world()->rank(), zs::test::rank());
  EXPECT_STREQ(world()->backend(), "mpi");
}

TEST(Comm, AllGatherEveryDtypeAndSize) {
  for (auto dtype : kAllDtypes) {
    for (int64_t shard : kShards) check_all_gather(*world(), dtype, shard);
  }
}

TEST(Comm, AllGatherInPlace) {
  const int n = world()->size(), me = world()->rank();
  const int64_t shard = 1001;
  at::Tensor out = at::zeros({shard * n}, at::kFloat);
  out.narrow(0, me * shard, shard).copy_(seeded(shard, me, at::kFloat));
  world()->all_gather_into(out, out.narrow(0, me * shard, shard), "t.ag.inplace")->wait();
  for (int r = 0; r < n; ++r) EXPECT_TRUE(at::equal(out.narrow(0, r * shard, shard), seeded(shard, r, at::kFloat)));
}

TEST(Comm, ReduceScatterEveryOp) {
  for (auto dtype : kNumeric) {
    for (int64_t shard : kShards) {
      for (auto op : {zs::ReduceOp::kSum, zs::ReduceOp::kMax, zs::ReduceOp::kMin}) {
        check_reduce_scatter(*world(), dtype, shard, op);
      }
      if (c10::isFloatingType(dtype)) check_reduce_scatter(*world(), dtype, shard, zs::ReduceOp::kAvg);
    }
  }
}

// comm.reduce_scatter_ring = false: Open MPI's MPI_Reduce_scatter_block (the default above is
// zeroshard's ring), for the same dtypes and ops; and the ring at a piece limit that splits every
// step into many messages.
TEST(Comm, ReduceScatterThroughMpiAndSmallRingPieces) {
  zs::CommOptions o = zs::test::test_comm_options("rs.mpi");
  o.reduce_scatter_ring = false;
  auto mpi = zs::make_mpi_world_communicator(o);
  zs::CommOptions p = zs::test::test_comm_options("rs.pieces");
  p.max_elements_per_call = 100;
  auto pieces = zs::make_mpi_world_communicator(p);
  for (auto dtype : kNumeric) {
    for (auto op : {zs::ReduceOp::kSum, zs::ReduceOp::kMax, zs::ReduceOp::kMin}) {
      check_reduce_scatter(*mpi, dtype, 40961, op);
      check_reduce_scatter(*pieces, dtype, 4097, op);
    }
  }
}

TEST(Comm, AllReduceAndBroadcast) {
  const int n = world()->size(), me = world()->rank();
  for (auto dtype : kNumeric) {
    at::Tensor t = seeded(40961, me, dtype);
    world()->all_reduce(t, zs::ReduceOp::kSum, "t.ar")->wait();
    at::Tensor ref = at::zeros({40961}, at::kDouble);
    for (int r = 0; r < n; ++r) ref.add_(seeded(40961, r, at::kDouble));
    EXPECT_TRUE(at::equal(t, ref.to(dtype))) << name(dtype);
    for (int root = 0; root < n; ++root) {
      at::Tensor b = seeded(1001, me, dtype);
      world()->broadcast(b, root, "t.bcast")->wait();
      EXPECT_TRUE(at::equal(b, seeded(1001, root, dtype))) << name(dtype) << " root " << root;
    }
  }
  at::Tensor flags = seeded(64, me, at::kBool);
  world()->all_reduce(flags, zs::ReduceOp::kMax, "t.ar.bool")->wait();  // logical or
  at::Tensor any = seeded(64, 0, at::kBool);
  for (int r = 1; r < n; ++r) any = any.logical_or(seeded(64, r, at::kBool));
  EXPECT_TRUE(at::equal(flags, any));
}

TEST(Comm, ChunkedPathMatches) {
  // Messages larger than one MPI call's count are split; force it with a 7-element limit.
  zs::CommOptions o = zs::test::test_comm_options("chunked");
  o.max_elements_per_call = 7;
  auto c = zs::make_mpi_world_communicator(o);
  for (auto dtype : {at::kFloat, at::kBFloat16, at::kLong}) {
    for (int64_t shard : {6, 7, 8, 23, 1001}) {
      check_all_gather(*c, dtype, shard);
      check_reduce_scatter(*c, dtype, shard, zs::ReduceOp::kSum);
    }
    at::Tensor t = seeded(1001, c->rank(), dtype);
    c->all_reduce(t, zs::ReduceOp::kMax, "t.chunk.ar")->wait();
    EXPECT_TRUE(at::equal(t, seeded(1001, c->size() - 1, dtype)));
    at::Tensor b = seeded(1001, c->rank(), dtype);
    c->broadcast(b, 0, "t.chunk.bcast")->wait();
    EXPECT_TRUE(at::equal(b, seeded(1001, 0, dtype)));
  }
  // In-place all-gather through the chunked path.
  const int64_t shard = 30;
  at::Tensor out = at::zeros({shard * c->size()}, at::kFloat);
  out.narrow(0, c->rank() * shard, shard).copy_(seeded(shard, c->rank(), at::kFloat));
  c->all_gather_into(out, out.narrow(0, c->rank() * shard, shard), "t.chunk.inplace")->wait();
  for (int r = 0; r < c->size(); ++r) EXPECT_TRUE(at::equal(out.narrow(0, r * shard, shard), seeded(shard, r, at::kFloat)));
}

// comm.node_stages with the ranks grouped into "nodes" of CommOptions::node_size consecutive
// ranks: at 4 ranks in 2 nodes all-gathers and ring reduce-scatters run in two stages (between the
// nodes and inside them) and give the same elements as one collective, for every dtype, size and
// op, in place and in small pieces; every other layout runs one collective over all ranks.
TEST(Comm, CollectivesInTwoStagesAcrossNodes) {
  const int n = world()->size();
  auto make = [&](const std::string& name, int node_size, bool stages, int64_t max) {
    zs::CommOptions o = zs::test::test_comm_options(name);
    o.node_size = node_size;
    o.node_stages = stages;
    o.max_elements_per_call = max;
    return zs::make_mpi_world_communicator(o);
  };
  EXPECT_EQ(world()->node_stages(), "") << "the test ranks run on one host";
  EXPECT_EQ(make("st.one_rank_nodes", 1, true, INT_MAX)->node_stages(), "");
  EXPECT_EQ(make("st.off", 2, false, INT_MAX)->node_stages(), "");
  EXPECT_EQ(make("st.uneven", 3, true, INT_MAX)->node_stages(), "") << "nodes of 3 and " << n - 3;
  auto staged = make("st.staged", 2, true, INT_MAX);
  auto pieces = make("st.staged.pieces", 2, true, 7);
  if (n != 4) {
    EXPECT_EQ(staged->node_stages(), "") << n << " ranks make no 2 nodes of 2 or more";
    GTEST_SKIP() << "two stages need 4 ranks in nodes of 2 here";
  }
  EXPECT_EQ(staged->node_stages(), "2 nodes x 2 ranks");
  EXPECT_EQ(pieces->node_stages(), "2 nodes x 2 ranks");
  for (auto dtype : kAllDtypes) {
    for (int64_t shard : kShards) check_all_gather(*staged, dtype, shard);
  }
  for (auto dtype : kNumeric) {
    for (int64_t shard : kShards) {
      for (auto op : {zs::ReduceOp::kSum, zs::ReduceOp::kMax, zs::ReduceOp::kMin}) {
        check_reduce_scatter(*staged, dtype, shard, op);
      }
      if (c10::isFloatingType(dtype)) check_reduce_scatter(*staged, dtype, shard, zs::ReduceOp::kAvg);
    }
  }
  for (int64_t shard : {6, 7, 8, 23, 1001}) {
    check_all_gather(*pieces, at::kFloat, shard);
    check_reduce_scatter(*pieces, at::kBFloat16, shard, zs::ReduceOp::kSum);
  }
  for (auto* c : {staged.get(), pieces.get()}) {
    const int64_t shard = 1001;
    at::Tensor out = at::zeros({shard * n}, at::kFloat);
    out.narrow(0, c->rank() * shard, shard).copy_(seeded(shard, c->rank(), at::kFloat));
    c->all_gather_into(out, out.narrow(0, c->rank() * shard, shard), "t.staged.inplace")->wait();
    for (int r = 0; r < n; ++r) {
      EXPECT_TRUE(at::equal(out.narrow(0, r * shard, shard), seeded(shard, r, at::kFloat))) << c->name() << " " << r;
    }
  }
}

// ZeRO++'s quantized gradients: the int8 reduce-scatter through all-to-all, summed in fp32, within
// its bound of the exact sum at every rank count, flat, in two stages across 2 "nodes" of 2 ranks,
// and with the all-to-all in pieces of 7 bytes; a NaN poisons its block only; bad arguments refused.
TEST(Comm, QuantizedReduceScatter) {
  const int n = world()->size();
  auto make = [&](const std::string& name, int node_size, int64_t max) {
    zs::CommOptions o = zs::test::test_comm_options(name);
    o.node_size = node_size;
    o.max_elements_per_call = max;
    return zs::make_mpi_world_communicator(o);
  };
  for (int64_t shard : {1, 7, 64, 1001}) {
    for (int64_t block : {8, 64}) {
      check_quantized_reduce_scatter(*world(), shard, block, zs::ReduceOp::kSum, 1);
      check_quantized_reduce_scatter(*world(), shard, block, zs::ReduceOp::kAvg, 1);
    }
  }
  auto pieces = make("q.pieces", 0, 7);
  check_quantized_reduce_scatter(*pieces, 1001, 64, zs::ReduceOp::kSum, 1);
  auto staged = make("q.staged", 2, INT_MAX);
  if (n == 4) {
    ASSERT_EQ(staged->node_stages(), "2 nodes x 2 ranks");
    for (int64_t shard : {1, 64, 1001}) check_quantized_reduce_scatter(*staged, shard, 16, zs::ReduceOp::kAvg, 2);
    auto staged_pieces = make("q.staged.pieces", 2, 7);
    check_quantized_reduce_scatter(*staged_pieces, 1001, 16, zs::ReduceOp::kSum, 2);
  }
  // A NaN in rank 0's element 5 of every part: its block of 8 is NaN on every rank, the rest finite.
  {
    const int64_t shard = 32;
    at::Tensor in = graded(shard * n, world()->rank());
    if (world()->rank() == 0) {
      for (int r = 0; r < n; ++r) in[r * shard + 5] = NAN;
    }
    at::Tensor out = at::empty({shard}, at::kFloat);
    world()->reduce_scatter_int8_into(out, in, zs::ReduceOp::kSum, 8, "t.rs.int8.nan")->wait();
    EXPECT_TRUE(out.narrow(0, 0, 8).isnan().all().item<bool>());
    EXPECT_TRUE(out.narrow(0, 8, shard - 8).isfinite().all().item<bool>());
  }
  const at::Tensor out = at::empty({4}, at::kFloat), in = at::zeros({4 * n}, at::kFloat);
  expect_comm_error([&] { world()->reduce_scatter_int8_into(out, in, zs::ReduceOp::kMax, 8); },
                    {"reduce_scatter_int8_into: reduce op max cannot run on quantized values; use sum or avg"});
  expect_comm_error([&] { world()->reduce_scatter_int8_into(out, in, zs::ReduceOp::kSum, 6); },
                    {"reduce_scatter_int8_into: block 6 is out of range; allowed: a multiple of 4 in [8, 65536]"});
  expect_comm_error(
      [&] {
        world()->reduce_scatter_int8_into(at::empty({4}, at::kInt), at::zeros({4 * n}, at::kInt), zs::ReduceOp::kSum, 8);
      },
      {"in_flat has dtype Int; int8 quantization takes floating-point values"});
  expect_comm_error([&] { world()->reduce_scatter_int8_into(out, at::zeros({4 * n + 1}), zs::ReduceOp::kSum, 8); },
                    {"in_flat has ", "elements but must have size() * out_shard.numel()"});
}

// A backend without a quantized reduce-scatter (NCCL's today): the base class refuses it by name.
class NoQuantizedBackend final : public zs::Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  const std::string& name() const override { return name_; }
  const char* backend() const override { return "other"; }
  c10::Device device() const override { return c10::Device(c10::kCPU); }
  std::shared_ptr<zs::Communicator> split(int, int) override { return nullptr; }

 protected:
  std::string device_requirement(const at::Tensor&) const override { return {}; }
  bool supports_dtype(c10::ScalarType) const override { return true; }
  const char* supported_dtypes() const override { return "all"; }
  std::shared_ptr<zs::Work> run_all_gather(const at::Tensor&, const at::Tensor&, bool, std::string_view) override {
    return nullptr;
  }
  std::shared_ptr<zs::Work> run_reduce_scatter(const at::Tensor&, const at::Tensor&, zs::ReduceOp,
                                               std::string_view) override {
    return nullptr;
  }
  std::shared_ptr<zs::Work> run_all_reduce(const at::Tensor&, zs::ReduceOp, std::string_view) override {
    return nullptr;
  }
  std::shared_ptr<zs::Work> run_broadcast(const at::Tensor&, int, std::string_view) override { return nullptr; }
  std::shared_ptr<zs::Work> run_barrier(std::string_view) override { return nullptr; }

 private:
  std::string name_ = "plain";
};

TEST(Comm, QuantizedReduceScatterIsRefusedByABackendWithoutIt) {
  NoQuantizedBackend c;
  expect_comm_error([&] { c.reduce_scatter_int8_into(at::empty({4}), at::zeros({8}), zs::ReduceOp::kSum, 8); },
                    {"communicator 'plain' (other): reduce_scatter_int8_into: the other backend has no quantized "
                     "reduce-scatter; it runs on the MPI backend (CPU tensors) only"});
}

TEST(Comm, SplitIntoSubGroups) {
  const int me = world()->rank(), n = world()->size();
  // Two groups by parity, ordered by descending world rank inside each group.
  auto g = world()->split(me % 2, -me);
  ASSERT_NE(g, nullptr);
  const int members = (n - me % 2 + 1) / 2;
  EXPECT_EQ(g->size(), members);
  int expected_rank = 0;
  for (int r = n - 1; r > me; --r) expected_rank += (r % 2 == me % 2);
  EXPECT_EQ(g->rank(), expected_rank);
  EXPECT_NE(g->name().find("split(" + std::to_string(me % 2) + ")"), std::string::npos) << g->name();
  at::Tensor t = at::full({5}, me, at::kLong);
  g->all_reduce(t, zs::ReduceOp::kSum, "t.group")->wait();
  int64_t sum = 0;
  for (int r = me % 2; r < n; r += 2) sum += r;
  EXPECT_TRUE(at::equal(t, at::full({5}, sum, at::kLong)));
  check_all_gather(*g, at::kFloat, 23);
  // A rank passing a negative color joins no group.
  auto none = world()->split(me == 0 ? -1 : 1, 0);
  EXPECT_EQ(none == nullptr, me == 0);
  if (none) EXPECT_EQ(none->size(), n - 1);
}

TEST(Comm, ProgressesWithoutWait) {
  // The progress thread completes collectives while the caller does other work and never waits.
  const int64_t shard = (1 << 20) / world()->size();
  at::Tensor out = at::empty({shard * world()->size()}, at::kFloat);
  at::Tensor in = at::ones({shard}, at::kFloat);
  auto work = world()->all_gather_into(out, in, "t.progress");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!work->is_completed() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(work->is_completed());
  EXPECT_EQ(work->exception(), nullptr);
  EXPECT_EQ(out.sum().item<float>(), static_cast<float>(in.numel() * world()->size()));
}

TEST(Comm, KeepsTensorsAliveUntilDone) {
  // Temporaries passed in and handles dropped at once: the communicator must hold the buffers.
  const int n = world()->size();
  at::Tensor out = at::zeros({1000 * n}, at::kFloat);
  for (int i = 0; i < 5; ++i) world()->all_gather_into(out, at::full({1000}, float(i + 1)), "t.alive");
  world()->barrier("t.alive.done")->wait();  // runs after the gathers on the same communicator
  EXPECT_TRUE(at::equal(out, at::full({1000 * n}, 5.0f)));
}

TEST(Comm, SequenceNumbersAndSignatures) {
  auto c = zs::make_mpi_world_communicator(zs::test::test_comm_options("seq"));
  at::Tensor t = at::ones({3}, at::kFloat);
  auto w1 = c->all_reduce(t, zs::ReduceOp::kSum, "first");
  auto w2 = c->barrier("second");
  w2->wait();
  w1->wait();
  EXPECT_EQ(w1->signature().seq, 1u);
  EXPECT_EQ(w2->signature().seq, 2u);
  EXPECT_EQ(w1->signature().to_string(), "#1 all_reduce(Float, count=3, op=sum) tag='first' on seq");
}

TEST(Comm, BadInputIsAClearError) {
  auto& w = *world();
  const int n = w.size();
  expect_comm_error([&] { w.all_gather_into(at::empty({n * 4}, at::kFloat), at::empty({4}, at::kDouble)); },
                    {"out_flat has dtype Float but in_shard has Double", "communicator 'world'"});
  expect_comm_error([&] { w.all_gather_into(at::empty({n * 4 + 1}, at::kFloat), at::empty({4}, at::kFloat)); },
                    {"out_flat has " + std::to_string(n * 4 + 1) + " elements"});
  expect_comm_error([&] { w.reduce_scatter_into(at::empty({4}), at::empty({n * 4 + 2}), zs::ReduceOp::kSum); },
                    {"in_flat has " + std::to_string(n * 4 + 2) + " elements"});
  expect_comm_error([&] { w.all_reduce(at::empty({4, 4}).t(), zs::ReduceOp::kSum); }, {"tensor", "not contiguous"});
  expect_comm_error([&] { w.all_reduce(at::Tensor(), zs::ReduceOp::kSum); }, {"undefined"});
  // A tensor on another device (meta here; CUDA tensors on a GPU build) is refused by name.
  expect_comm_error([&] { w.all_gather_into(at::empty({n * 4}, at::kFloat), at::empty({4}, at::device(at::kMeta))); },
                    {"in_shard is on meta", "the MPI backend takes CPU tensors"});
  expect_comm_error([&] { w.all_reduce(at::empty({4}, at::kLong), zs::ReduceOp::kAvg); }, {"avg needs a floating-point"});
  expect_comm_error([&] { w.all_reduce(at::empty({4}, at::kComplexFloat), zs::ReduceOp::kSum); },
                    {"ComplexFloat", "not supported"});
  expect_comm_error([&] { w.broadcast(at::empty({4}), n); }, {"root " + std::to_string(n) + " is out of range"});
  at::Tensor buf = at::empty({4 * n + 4}, at::kFloat);
  expect_comm_error([&] { w.all_gather_into(buf.narrow(0, 0, 4 * n), buf.narrow(0, 1, 4)); }, {"overlap"});
  // The communicator is still usable afterwards: nothing was enqueued.
  at::Tensor t = at::ones({2});
  w.all_reduce(t, zs::ReduceOp::kSum, "t.after_errors")->wait();
  EXPECT_TRUE(at::equal(t, at::full({2}, float(n))));
}

TEST(Comm, MismatchedSizesAcrossRanksAreReported) {
  ZS_REQUIRE_RANKS(2);
  zs::CommOptions o = zs::test::test_comm_options("checked");
  o.check_signatures = true;
  auto c = zs::make_mpi_world_communicator(o);
  const int me = c->rank();
  const int64_t shard = me == 1 ? 12 : 10;  // rank 1 disagrees
  at::Tensor out = at::empty({shard * c->size()}, at::kFloat);
  expect_comm_error([&] { c->all_gather_into(out, at::ones({shard}), "unit.3")->wait(); },
                    {"collective signatures diverge", "rank 0 called #1 all_gather(Float, count=10",
                     "rank 1 called #1 all_gather(Float, count=12", "tag='unit.3'"});
  // Detected before anything ran, identically everywhere: the communicator stays usable.
  at::Tensor t = at::ones({3});
  c->all_reduce(t, zs::ReduceOp::kSum, "after")->wait();
  EXPECT_TRUE(at::equal(t, at::full({3}, float(c->size()))));
}
