// SPDX-License-Identifier: Apache-2.0
// NCCL backend tests (tests/CMakeLists.txt: test_nccl, label "gpu").
//
// Two kinds of tests:
// - NcclFactory.*: run everywhere, GPU or not; they check that asking for the NCCL backend where
//   it cannot run is a CommError that says why, never a crash.
// - Nccl.*: need a CUDA device, a CUDA-enabled LibTorch and a build with NCCL; elsewhere they skip
//   visibly ("no CUDA device: NCCL runtime test skipped"). Inputs are seeded by rank and element
//   index and every element is compared with the value computed on the host.
// Every rank takes the same skip decision (homogeneous machines), so no rank waits alone.
//
// The file compiles against a CPU-only LibTorch: CUDA tensors are created through TensorOptions
// (which fails only at run time, after the skip).

#include <ATen/Context.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/ScalarType.h>
#include <c10/core/TensorOptions.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/test_util.h"
#include "zeroshard/comm/factory.h"
#include "zeroshard/base/error.h"

namespace zeroshard {
namespace {

using Expected = std::function<double(int64_t)>;

// Why the NCCL runtime tests cannot run in this process, or empty.
std::string why_no_nccl_runtime() {
  if (!nccl_compiled()) return "zeroshard was built without NCCL";
  if (!at::hasCUDA() || at::getNumGPUs() == 0)
    return "LibTorch sees no CUDA device (or has no CUDA)";
  return {};
}

// Small integers: exact in every dtype tested (BFloat16 holds integers up to 256 exactly), and
// sums over up to 40 ranks stay exact too.
double seed_value(int rank, int64_t i) {
  return static_cast<double>((i * 7 + rank * 3) % 13) - 6.0;
}

double sum_over_ranks(int size, int64_t i) {
  double s = 0;
  for (int r = 0; r < size; ++r) s += seed_value(r, i);
  return s;
}

// The message of the CommError `fn` throws, or a text saying what happened instead.
template <typename Fn>
std::string comm_error_of(Fn&& fn) {
  try {
    fn();
  } catch (const CommError& e) {
    return e.message();
  } catch (const std::exception& e) {
    return std::string("<not a CommError: ") + e.what() + ">";
  }
  return "<no exception>";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// ---------------------------------------------------------------------------------------------
// Runs on every machine.

TEST(NcclFactory, CompiledFlagMatchesTheBuild) {
#ifdef ZS_HAVE_NCCL
  EXPECT_TRUE(nccl_compiled());
#else
  EXPECT_FALSE(nccl_compiled());
#endif
}

TEST(NcclFactory, AbsentDeviceIsACommErrorNamingTheDeviceCount) {
  const std::string msg = comm_error_of(
      [] { make_nccl_communicator(test::world(), 4096, test::test_comm_options("nccl_absent")); });
  if (nccl_compiled()) {
    EXPECT_TRUE(contains(msg, "device count")) << msg;
    EXPECT_TRUE(contains(msg, "4096")) << msg;
    EXPECT_TRUE(contains(msg, "nccl_absent")) << msg;
  } else {
    EXPECT_TRUE(contains(msg, "built without NCCL")) << msg;
    EXPECT_TRUE(contains(msg, "NCCL_ROOT")) << msg;
  }
}

TEST(NcclFactory, NullBootstrapIsACommError) {
  const std::string msg = comm_error_of(
      [] { make_nccl_communicator(nullptr, 0, test::test_comm_options("nccl_null")); });
  EXPECT_TRUE(contains(msg, nccl_compiled() ? "bootstrap" : "built without NCCL")) << msg;
}

// ---------------------------------------------------------------------------------------------
// Need a GPU.

class Nccl : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = why_no_nccl_runtime();
    if (!why.empty()) GTEST_SKIP() << "no CUDA device: NCCL runtime test skipped (" << why << ")";
    const int gpus = static_cast<int>(at::getNumGPUs());
    if (gpus < test::world_size()) {  // NCCL refuses two ranks of one communicator on one GPU
      GTEST_SKIP() << "needs one GPU per rank: " << test::world_size() << " ranks, " << gpus << " GPU(s)";
    }
    const c10::Device session_device = test::session().device();
    device_ = session_device.is_cuda() ? session_device.index()
                                       : test::rank() % static_cast<int>(at::getNumGPUs());
    comm_ = make_nccl_communicator(test::world(), device_, test::test_comm_options("nccl_world"));
  }

  int size() const { return comm_->size(); }
  int rank() const { return comm_->rank(); }

  c10::TensorOptions on_gpu(c10::ScalarType dtype) const {
    return c10::TensorOptions().dtype(dtype).device(
        c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device_)));
  }

  // A CUDA tensor of `n` elements with value(i) (computed on the host, copied on the current
  // stream).
  at::Tensor make(int64_t n, c10::ScalarType dtype, const Expected& value) const {
    at::Tensor host = at::empty({n}, c10::TensorOptions().dtype(c10::ScalarType::Double));
    double* p = host.data_ptr<double>();
    for (int64_t i = 0; i < n; ++i) p[i] = value(i);
    return host.to(on_gpu(dtype));
  }
  at::Tensor seeded(int seed_rank, int64_t n, c10::ScalarType dtype, int64_t offset = 0) const {
    return make(n, dtype, [=](int64_t i) { return seed_value(seed_rank, offset + i); });
  }

  // Element-by-element comparison on the host (the copy runs on the current stream, which the
  // Work's wait() has ordered after the collective).
  static ::testing::AssertionResult matches(const at::Tensor& got, const Expected& expected,
                                            double tolerance = 0.0) {
    at::Tensor host = got.to(c10::TensorOptions().dtype(c10::ScalarType::Double).device(c10::kCPU));
    const double* p = host.data_ptr<double>();
    int64_t wrong = 0;
    int64_t first = -1;
    for (int64_t i = 0; i < host.numel(); ++i) {
      if (std::abs(p[i] - expected(i)) > tolerance) {
        if (first < 0) first = i;
        ++wrong;
      }
    }
    if (wrong == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << wrong << " of " << host.numel() << " elements differ; first at " << first << ": got "
           << p[first] << ", expected " << expected(first);
  }

  int device_ = 0;
  std::shared_ptr<Communicator> comm_;
};

const std::vector<c10::ScalarType> kDtypes = {c10::ScalarType::Float, c10::ScalarType::BFloat16,
                                              c10::ScalarType::Half, c10::ScalarType::Int,
                                              c10::ScalarType::Long};
// Odd and uneven shard sizes, one above 1 Mi elements.
const std::vector<int64_t> kShardSizes = {1, 3, 4097, (int64_t{1} << 20) + 5};

TEST_F(Nccl, AllGatherEveryDtypeAndSize) {
  for (c10::ScalarType dtype : kDtypes) {
    for (int64_t s : kShardSizes) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " shard " + std::to_string(s));
      at::Tensor in = seeded(rank(), s, dtype);
      at::Tensor out = at::empty({size() * s}, on_gpu(dtype));
      comm_->all_gather_into(out, in, "test.all_gather")->wait();
      EXPECT_TRUE(
          matches(out, [&](int64_t j) { return seed_value(static_cast<int>(j / s), j % s); }));
    }
  }
}

TEST_F(Nccl, AllGatherOfAPaddedFlatParameter) {
  // A 1001-element "parameter" padded to a multiple of the world size; each rank owns a view.
  const int64_t numel = 1001;
  const int64_t shard = (numel + size() - 1) / size();
  at::Tensor padded = make(size() * shard, c10::ScalarType::Float,
                           [&](int64_t i) { return i < numel ? seed_value(99, i) : 0.0; });
  at::Tensor in = padded.narrow(0, rank() * shard, shard);
  at::Tensor out = at::empty({size() * shard}, on_gpu(c10::ScalarType::Float));
  comm_->all_gather_into(out, in, "test.padded")->wait();
  EXPECT_TRUE(matches(out, [&](int64_t i) { return i < numel ? seed_value(99, i) : 0.0; }));
}

TEST_F(Nccl, ReduceScatterSumEveryDtypeAndSize) {
  for (c10::ScalarType dtype : kDtypes) {
    for (int64_t s : kShardSizes) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " shard " + std::to_string(s));
      at::Tensor in = seeded(rank(), size() * s, dtype);
      at::Tensor out = at::empty({s}, on_gpu(dtype));
      comm_->reduce_scatter_into(out, in, ReduceOp::kSum, "test.reduce_scatter")->wait();
      EXPECT_TRUE(matches(out, [&](int64_t i) { return sum_over_ranks(size(), rank() * s + i); }));
    }
  }
}

TEST_F(Nccl, AllReduceSumMaxMinEveryDtype) {
  const int64_t n = 4099;
  for (c10::ScalarType dtype : kDtypes) {
    SCOPED_TRACE(c10::toString(dtype));
    at::Tensor sum = seeded(rank(), n, dtype);
    at::Tensor max = seeded(rank(), n, dtype);
    at::Tensor min = seeded(rank(), n, dtype);
    comm_->all_reduce(sum, ReduceOp::kSum, "test.sum");
    comm_->all_reduce(max, ReduceOp::kMax, "test.max");
    comm_->all_reduce(min, ReduceOp::kMin, "test.min")->wait();  // the comm stream runs in order
    EXPECT_TRUE(matches(sum, [&](int64_t i) { return sum_over_ranks(size(), i); }));
    EXPECT_TRUE(matches(max, [&](int64_t i) {
      double m = seed_value(0, i);
      for (int r = 1; r < size(); ++r) m = std::max(m, seed_value(r, i));
      return m;
    }));
    EXPECT_TRUE(matches(min, [&](int64_t i) {
      double m = seed_value(0, i);
      for (int r = 1; r < size(); ++r) m = std::min(m, seed_value(r, i));
      return m;
    }));
  }
}

TEST_F(Nccl, AverageOfFloats) {
  at::Tensor t = seeded(rank(), 1000, c10::ScalarType::Float);
  comm_->all_reduce(t, ReduceOp::kAvg, "test.avg")->wait();
  EXPECT_TRUE(matches(
      t, [&](int64_t i) { return sum_over_ranks(size(), i) / size(); }, 1e-5));
}

TEST_F(Nccl, BroadcastFromFirstAndLastRank) {
  for (int root : {0, size() - 1}) {
    for (c10::ScalarType dtype : kDtypes) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " root " + std::to_string(root));
      at::Tensor t = seeded(rank(), 12345, dtype);
      comm_->broadcast(t, root, "test.broadcast")->wait();
      EXPECT_TRUE(matches(t, [&](int64_t i) { return seed_value(root, i); }));
    }
  }
}

// A model's bool mask or int16 buffer is broadcast at wrap time: both dtypes must travel.
TEST_F(Nccl, BoolAndShortBroadcastAndAllGather) {
  for (c10::ScalarType dtype : {c10::ScalarType::Bool, c10::ScalarType::Short}) {
    SCOPED_TRACE(c10::toString(dtype));
    // Bool: 0/1 by element and rank; Short: values beyond one byte, negative ones included.
    const auto value = [dtype](int r, int64_t i) {
      return dtype == c10::ScalarType::Bool ? static_cast<double>((i + r) % 3 == 0)
                                            : static_cast<double>((i * 37 + r * 1001) % 60001 - 30000);
    };
    const int root = size() - 1;
    at::Tensor b = make(4097, dtype, [&](int64_t i) { return value(rank(), i); });
    comm_->broadcast(b, root, "test.broadcast_bool_short")->wait();
    EXPECT_TRUE(matches(b, [&](int64_t i) { return value(root, i); }));
    const int64_t s = 1025;
    at::Tensor in = make(s, dtype, [&](int64_t i) { return value(rank(), i); });
    at::Tensor out = at::empty({size() * s}, on_gpu(dtype));
    comm_->all_gather_into(out, in, "test.all_gather_bool_short")->wait();
    EXPECT_TRUE(matches(out, [&](int64_t j) { return value(static_cast<int>(j / s), j % s); }));
  }
}

// Bool reductions are logical: sum and max are or, min is and (never a 2 stored in a bool).
TEST_F(Nccl, BoolAllReduceIsLogicalAndShortIsRefused) {
  const auto flag = [](int r, int64_t i) { return static_cast<double>(((i >> r) & 1) != 0); };
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
    SCOPED_TRACE(to_string(op));
    at::Tensor t = make(64, c10::ScalarType::Bool, [&](int64_t i) { return flag(rank(), i); });
    comm_->all_reduce(t, op, "test.bool_reduce")->wait();
    EXPECT_TRUE(matches(t, [&](int64_t i) {
      bool any = false, all = true;
      for (int r = 0; r < size(); ++r) {
        any = any || flag(r, i) != 0;
        all = all && flag(r, i) != 0;
      }
      return static_cast<double>(op == ReduceOp::kMin ? all : any);
    }));
  }
  at::Tensor s = at::zeros({8}, on_gpu(c10::ScalarType::Short));
  const std::string msg = comm_error_of([&] { comm_->all_reduce(s, ReduceOp::kSum, "test.short_reduce"); });
  EXPECT_TRUE(contains(msg, "Short cannot be reduced by NCCL")) << msg;
  EXPECT_TRUE(contains(msg, "all_reduce")) << msg;
}

TEST_F(Nccl, BarrierAndSignatures) {
  at::Tensor t = seeded(rank(), 8, c10::ScalarType::Long);
  auto first = comm_->all_reduce(t, ReduceOp::kSum, "test.sig");
  auto second = comm_->barrier("test.barrier");
  second->wait();
  EXPECT_EQ(first->signature().seq, 1u);
  EXPECT_EQ(first->signature().kind, CollectiveKind::kAllReduce);
  EXPECT_EQ(first->signature().count, 8);
  EXPECT_EQ(first->signature().tag, "test.sig");
  EXPECT_EQ(first->signature().comm, "nccl_world");
  EXPECT_EQ(second->signature().seq, 2u);
  EXPECT_EQ(second->signature().kind, CollectiveKind::kBarrier);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!second->is_completed() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_TRUE(first->is_completed());
  EXPECT_TRUE(second->is_completed());
  EXPECT_EQ(second->exception(), nullptr);
}

TEST_F(Nccl, SplitByParityInReverseOrder) {
  const int world_rank = rank();
  const int color = world_rank % 2;
  auto sub = comm_->split(color, -world_rank);  // key -rank: highest world rank becomes rank 0
  ASSERT_NE(sub, nullptr);
  std::vector<int> members;
  for (int r = size() - 1; r >= 0; --r) {
    if (r % 2 == color) members.push_back(r);
  }
  EXPECT_EQ(sub->size(), static_cast<int>(members.size()));
  EXPECT_EQ(members[sub->rank()], world_rank);
  EXPECT_EQ(sub->name(), "nccl_world/split(" + std::to_string(color) + ")");
  EXPECT_STREQ(sub->backend(), "nccl");
  at::Tensor t = make(3, c10::ScalarType::Int, [&](int64_t i) { return world_rank + i; });
  sub->all_reduce(t, ReduceOp::kSum, "test.split")->wait();
  double member_sum = 0;
  for (int r : members) member_sum += r;
  EXPECT_TRUE(matches(t, [&](int64_t i) {
    return member_sum + static_cast<double>(i) * static_cast<double>(members.size());
  }));
}

TEST_F(Nccl, SplitWithNegativeColorJoinsNoGroup) {
  auto sub = comm_->split(rank() == 0 ? -1 : 7, 0);
  if (rank() == 0) {
    EXPECT_EQ(sub, nullptr);
    return;
  }
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->size(), size() - 1);
  at::Tensor t = make(5, c10::ScalarType::Float, [](int64_t) { return 1.0; });
  sub->all_reduce(t, ReduceOp::kSum, "test.split_neg")->wait();
  EXPECT_TRUE(matches(t, [&](int64_t) { return size() - 1.0; }));
}

// Every collective on communicators of one rank: a split that leaves each rank alone, and a split
// of that split (nested sub-groups work and are named after their parents).
TEST_F(Nccl, EveryCollectiveOnSubGroupsOfOneRank) {
  auto alone = comm_->split(rank(), 0);
  ASSERT_NE(alone, nullptr);
  auto nested = alone->split(0, 0);
  ASSERT_NE(nested, nullptr);
  EXPECT_EQ(nested->name(), "nccl_world/split(" + std::to_string(rank()) + ")/split(0)");
  const int64_t n = 4097;
  const auto own = [&](int64_t i) { return seed_value(rank(), i); };
  for (Communicator* c : {alone.get(), nested.get()}) {
    SCOPED_TRACE(c->name());
    EXPECT_EQ(c->size(), 1);
    EXPECT_EQ(c->rank(), 0);
    at::Tensor gathered = at::empty({n}, on_gpu(c10::ScalarType::Float));
    c->all_gather_into(gathered, seeded(rank(), n, c10::ScalarType::Float), "test.one.all_gather")->wait();
    EXPECT_TRUE(matches(gathered, own));
    at::Tensor reduced = at::empty({n}, on_gpu(c10::ScalarType::BFloat16));
    c->reduce_scatter_into(reduced, seeded(rank(), n, c10::ScalarType::BFloat16), ReduceOp::kSum,
                           "test.one.reduce_scatter")
        ->wait();
    EXPECT_TRUE(matches(reduced, own));
    at::Tensor averaged = seeded(rank(), n, c10::ScalarType::Float);
    c->all_reduce(averaged, ReduceOp::kAvg, "test.one.all_reduce")->wait();
    EXPECT_TRUE(matches(averaged, own));
    at::Tensor broadcast = seeded(rank(), n, c10::ScalarType::Long);
    c->broadcast(broadcast, 0, "test.one.broadcast")->wait();
    EXPECT_TRUE(matches(broadcast, own));
    auto barrier = c->barrier("test.one.barrier");
    barrier->wait();
    EXPECT_EQ(barrier->signature().seq, 5u) << "each communicator counts its own collectives";
  }
}

// HYBRID_SHARD's gradient path on raw communicators: reduce-scatter inside a shard group of (up
// to) 2 ranks, then average each shard across the replica group. At one rank both groups have
// one member and the result is the rank's own data.
TEST_F(Nccl, ReduceScatterInShardGroupThenAverageAcrossReplicas) {
  const int g = size() >= 2 && size() % 2 == 0 ? 2 : 1;
  auto shard_group = comm_->split(rank() / g, rank());
  auto replicas = comm_->split(rank() % g, rank());
  ASSERT_NE(shard_group, nullptr);
  ASSERT_NE(replicas, nullptr);
  const int64_t s = 1001;
  at::Tensor flat = seeded(rank(), g * s, c10::ScalarType::Float);
  at::Tensor shard = at::empty({s}, on_gpu(c10::ScalarType::Float));
  // wait() orders the current stream after the reduce-scatter, and the next collective (on another
  // communicator, with its own stream) after the current stream.
  shard_group->reduce_scatter_into(shard, flat, ReduceOp::kSum, "test.hybrid.rs")->wait();
  replicas->all_reduce(shard, ReduceOp::kAvg, "test.hybrid.avg")->wait();
  // Element i of this rank's shard: sum over the shard group's members of element (r_in_group*s+i),
  // averaged over the groups, i.e. the sum over all ranks divided by the number of groups.
  const int groups = size() / g;
  const int64_t offset = shard_group->rank() * s;
  EXPECT_TRUE(matches(
      shard, [&](int64_t i) { return sum_over_ranks(size(), offset + i) / groups; }, 1e-4));
}

// Collectives on the world and on a sub-group, issued alternately without waiting in between:
// each communicator keeps its own order, and every result is complete after its own wait.
TEST_F(Nccl, WorldAndSubGroupInterleaved) {
  const int color = rank() % 2;
  auto sub = comm_->split(color, rank());
  ASSERT_NE(sub, nullptr);
  std::vector<int> members;
  for (int r = 0; r < size(); ++r) {
    if (r % 2 == color) members.push_back(r);
  }
  constexpr int kRounds = 6;
  const int64_t n = 3001;
  std::vector<at::Tensor> on_world, on_sub;
  std::vector<std::shared_ptr<Work>> works;
  for (int k = 0; k < kRounds; ++k) {
    on_world.push_back(seeded(rank(), n, c10::ScalarType::Float, k));
    works.push_back(comm_->all_reduce(on_world.back(), ReduceOp::kSum, "test.interleaved.world"));
    on_sub.push_back(seeded(rank(), n, c10::ScalarType::Float, 100 + k));
    works.push_back(sub->all_reduce(on_sub.back(), ReduceOp::kSum, "test.interleaved.sub"));
  }
  for (auto& w : works) w->wait();
  for (int k = 0; k < kRounds; ++k) {
    SCOPED_TRACE("round " + std::to_string(k));
    EXPECT_TRUE(matches(on_world[k], [&](int64_t i) { return sum_over_ranks(size(), k + i); }));
    EXPECT_TRUE(matches(on_sub[k], [&](int64_t i) {
      double sum = 0;
      for (int r : members) sum += seed_value(r, 100 + k + i);
      return sum;
    }));
  }
}

// Fills the current stream with ~tens of milliseconds of kernels; returns at once on the host.
at::Tensor keep_current_stream_busy(const c10::TensorOptions& options) {
  at::Tensor busy = at::zeros({int64_t{32} << 20}, options);
  for (int k = 0; k < 200; ++k) busy.add_(1);
  return busy;
}

TEST_F(Nccl, CollectiveWaitsForTheCurrentStream) {
  // The input is produced by 200 kernels still queued on the current stream when the collective
  // is issued: the collective must see their result, and wait() must order the read-back after it.
  const int64_t n = int64_t{32} << 20;
  at::Tensor x = at::zeros({n}, on_gpu(c10::ScalarType::Float));
  for (int k = 0; k < 200; ++k) x.add_(1);
  comm_->all_reduce(x, ReduceOp::kSum, "test.ordering")->wait();
  const int64_t wrong = x.ne(200.0 * size()).sum().item<int64_t>();
  EXPECT_EQ(wrong, 0) << "elements not equal to 200 * size() after the all_reduce";
}

TEST_F(Nccl, DroppedHandleKeepsBuffersAlive) {
  const int64_t s = int64_t{4} << 20;
  at::Tensor out = at::empty({size() * s}, on_gpu(c10::ScalarType::Float));
  at::Tensor busy = keep_current_stream_busy(on_gpu(c10::ScalarType::Float));
  {
    at::Tensor in = seeded(rank(), s, c10::ScalarType::Float);
    comm_->all_gather_into(out, in, "test.dropped");  // handle and input dropped at once
  }
  // Were `in` freed, the caching allocator would hand its block to this tensor, and the fill
  // could land before NCCL reads it.
  at::Tensor reuse = at::empty({s}, on_gpu(c10::ScalarType::Float));
  reuse.fill_(-77.0);
  comm_->barrier("test.dropped.barrier")
      ->wait();  // ordered after the all-gather on the comm stream
  EXPECT_TRUE(matches(out, [&](int64_t j) { return seed_value(static_cast<int>(j / s), j % s); }));
}

TEST_F(Nccl, DestroyingTheCommunicatorDrainsInFlightWork) {
  at::Tensor x = seeded(rank(), 1 << 20, c10::ScalarType::Float);
  auto work = comm_->all_reduce(x, ReduceOp::kSum, "test.drain");
  comm_.reset();  // waits for the collective on the host; must not crash or free `x` early
  EXPECT_TRUE(work->is_completed());
  EXPECT_EQ(work->exception(), nullptr);
  work->wait();
  EXPECT_TRUE(matches(x, [&](int64_t i) { return sum_over_ranks(test::world_size(), i); }));
}

TEST_F(Nccl, BadInputsAreCommErrorsNamingTheTensor) {
  const auto f32 = on_gpu(c10::ScalarType::Float);
  at::Tensor shard = at::zeros({16}, f32);
  at::Tensor flat = at::zeros({size() * 16}, f32);
  at::Tensor cpu = at::zeros({16}, c10::TensorOptions().dtype(c10::ScalarType::Float));

  std::string msg = comm_error_of([&] { comm_->all_gather_into(flat, cpu, "bad"); });
  EXPECT_TRUE(contains(msg, "in_shard") && contains(msg, "cpu") && contains(msg, "CUDA")) << msg;

  msg = comm_error_of(
      [&] { comm_->all_gather_into(at::zeros({size() * 16 + 1}, f32), shard, "bad"); });
  EXPECT_TRUE(contains(msg, "out_flat") && contains(msg, std::to_string(size() * 16))) << msg;

  msg = comm_error_of([&] {
    comm_->reduce_scatter_into(shard, at::zeros({size() * 16}, on_gpu(c10::ScalarType::Half)),
                               ReduceOp::kSum, "bad");
  });
  EXPECT_TRUE(contains(msg, "in_flat") && contains(msg, "dtype")) << msg;

  msg = comm_error_of([&] {
    comm_->all_reduce(at::zeros({4}, on_gpu(c10::ScalarType::Int)), ReduceOp::kAvg, "bad");
  });
  EXPECT_TRUE(contains(msg, "avg")) << msg;

  msg = comm_error_of([&] {
    comm_->all_reduce(at::zeros({4, 4}, f32).t(), ReduceOp::kSum, "bad");
  });
  EXPECT_TRUE(contains(msg, "contiguous")) << msg;

  msg = comm_error_of([&] { comm_->broadcast(shard, size(), "bad"); });
  EXPECT_TRUE(contains(msg, "root")) << msg;

  // Overlapping, but not the in-place form (in_shard = out_flat's own rank slice, which is allowed).
  at::Tensor big = at::zeros({size() * 16 + 1}, f32);
  msg = comm_error_of([&] { comm_->all_gather_into(big.narrow(0, 0, size() * 16), big.narrow(0, 1, 16), "bad"); });
  EXPECT_TRUE(contains(msg, "overlap")) << msg;

  // Nothing was issued: the communicator still works and its first sequence number is 1.
  at::Tensor ok = seeded(rank(), 16, c10::ScalarType::Float);
  auto work = comm_->all_reduce(ok, ReduceOp::kSum, "good");
  work->wait();
  EXPECT_EQ(work->signature().seq, 1u);
  EXPECT_TRUE(matches(ok, [&](int64_t i) { return sum_over_ranks(size(), i); }));
}

TEST_F(Nccl, SignatureCheckPassesWhenRanksAgree) {
  CommOptions options = test::test_comm_options("nccl_checked");
  options.check_signatures = true;
  auto checked = make_nccl_communicator(test::world(), device_, options);
  at::Tensor t = seeded(rank(), 64, c10::ScalarType::BFloat16);
  checked->all_reduce(t, ReduceOp::kSum, "test.checked")->wait();
  EXPECT_TRUE(matches(t, [&](int64_t i) { return sum_over_ranks(size(), i); }));
}

TEST_F(Nccl, SignatureCheckNamesTheDivergence) {
  ZS_REQUIRE_RANKS(2);
  CommOptions options = test::test_comm_options("nccl_checked");
  options.check_signatures = true;
  auto checked = make_nccl_communicator(test::world(), device_, options);
  at::Tensor t = seeded(rank(), 64, c10::ScalarType::Float);
  const std::string tag = rank() == 0 ? "test.rank0" : "test.others";
  const std::string msg = comm_error_of([&] { checked->all_reduce(t, ReduceOp::kSum, tag); });
  EXPECT_TRUE(contains(msg, "test.rank0") && contains(msg, "test.others")) << msg;
}

}  // namespace
}  // namespace zeroshard
