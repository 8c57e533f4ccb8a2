// SPDX-License-Identifier: Apache-2.0
// Stream ordering on the GPU (label gpu). A sleep kernel holds the compute stream for 200 ms while
// data is written behind it; the collectives and the sharding engine, which order their side
// streams after the compute stream with events (never by blocking the host), must still see the
// written data, and the compute stream must see their results.
//
// Needs a CUDA device, a CUDA-enabled LibTorch, NCCL and nvcc (tests/CMakeLists.txt builds it
// only with the CUDA toolkit); runs with --set runtime.device=AUTO and skips visibly where the
// session's device is the CPU. Every rank takes the same skip decision (homogeneous machines).

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/ops/full.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cuda_stream.h"
#include "common/test_util.h"
#include "gpu/sleep_kernel.h"
#include "engine/models.h"
#include "zeroshard/comm/factory.h"
#include "zeroshard/base/error.h"
#include "zeroshard/comm/streams.h"
#include "zeroshard/engine/engine.h"

namespace zs = zeroshard;
using Strategy = zs::ShardingStrategy;

namespace {

constexpr uint64_t kSleepNs = 200'000'000;  // far longer than issuing a collective takes

std::string why_no_gpu() {
  if (!zs::nccl_compiled()) return "zeroshard was built without NCCL";
  if (!at::hasCUDA() || at::getNumGPUs() == 0) return "LibTorch sees no CUDA device (or has no CUDA)";
  if (!zs::test::session().device().is_cuda()) {
    return "the session's device is the CPU (run with --set runtime.device=AUTO or CUDA)";
  }
  return {};
}

class GpuStreams : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = why_no_gpu();
    if (!why.empty()) GTEST_SKIP() << "no CUDA device: GPU stream test skipped (" << why << ")";
    device_ = zs::test::session().device();
    comm_ = zs::test::session().device_world();
  }

  c10::TensorOptions f32() const { return c10::TensorOptions().dtype(at::kFloat).device(device_); }
  cudaStream_t compute() const { return zs::comm::current_cuda_stream(device_.index()); }

  // Writes `value` into the fp32 tensor `t` after the compute stream has slept; returns at once.
  void fill_after_sleep(const at::Tensor& t, float value) const {
    ASSERT_TRUE(t.is_cuda() && t.scalar_type() == at::kFloat && t.is_contiguous());
    ASSERT_EQ(zs_gpu_test::sleep_then_fill(compute(), t.data_ptr<float>(), t.numel(), value, kSleepNs), cudaSuccess);
  }

  // Elements of `t` (read back on the current stream) that differ from `expected(i)`.
  static int64_t mismatches(const at::Tensor& t, const std::function<double(int64_t)>& expected) {
    at::Tensor host = t.to(at::kCPU).to(at::kDouble).contiguous();
    const double* p = host.data_ptr<double>();
    int64_t wrong = 0;
    for (int64_t i = 0; i < host.numel(); ++i) wrong += p[i] != expected(i);
    return wrong;
  }

  c10::Device device_{c10::kCPU};
  std::shared_ptr<zs::Communicator> comm_;
};

// ---------------------------------------------------------------------------------------------
// Communicator: the collective reads what the compute stream writes after the sleep.

TEST_F(GpuStreams, AllGatherReadsInputWrittenBehindASleep) {
  const int n = comm_->size(), r = comm_->rank();
  const int64_t s = int64_t{1} << 20;
  at::Tensor in = at::full({s}, -1.0, f32());
  at::Tensor out = at::full({n * s}, -2.0, f32());
  fill_after_sleep(in, static_cast<float>(r + 1));
  comm_->all_gather_into(out, in, "test.sleep.all_gather")->wait();
  EXPECT_EQ(mismatches(out, [&](int64_t i) { return static_cast<double>(i / s + 1); }), 0)
      << "the all-gather ran before the input was written (or the read-back before the all-gather)";
}

TEST_F(GpuStreams, ReduceScatterAllReduceAndBroadcastReadInputWrittenBehindASleep) {
  const int n = comm_->size(), r = comm_->rank();
  const int64_t s = int64_t{1} << 20;
  const double sum_of_values = n * (n + 1) / 2.0;  // ranks write r + 1
  at::Tensor flat = at::full({n * s}, -1.0, f32());
  at::Tensor shard = at::full({s}, -2.0, f32());
  fill_after_sleep(flat, static_cast<float>(r + 1));
  comm_->reduce_scatter_into(shard, flat, zs::ReduceOp::kSum, "test.sleep.reduce_scatter")->wait();
  EXPECT_EQ(mismatches(shard, [&](int64_t) { return sum_of_values; }), 0) << "reduce_scatter";

  at::Tensor all = at::full({s}, -1.0, f32());
  fill_after_sleep(all, static_cast<float>(r + 1));
  comm_->all_reduce(all, zs::ReduceOp::kSum, "test.sleep.all_reduce")->wait();
  EXPECT_EQ(mismatches(all, [&](int64_t) { return sum_of_values; }), 0) << "all_reduce";

  at::Tensor root = at::full({s}, -1.0, f32());
  fill_after_sleep(root, static_cast<float>(r + 1));
  comm_->broadcast(root, n - 1, "test.sleep.broadcast")->wait();
  EXPECT_EQ(mismatches(root, [&](int64_t) { return static_cast<double>(n); }), 0) << "broadcast from the last rank";
}

// ---------------------------------------------------------------------------------------------
// DeviceStreams::copy_async: the copy stream follows the compute stream; a reader follows the copy.

TEST_F(GpuStreams, CopyStreamRoundTripFollowsTheComputeStream) {
  zs::DeviceStreams streams(device_);
  ASSERT_TRUE(streams.enabled());
  const int64_t n = int64_t{1} << 20;
  at::Tensor on_device = at::full({n}, -1.0, f32());
  fill_after_sleep(on_device, 3.0f);
  at::Tensor pinned = at::empty({n}, c10::TensorOptions().dtype(at::kFloat).pinned_memory(true));
  auto to_host = streams.copy_async(pinned, on_device);
  while (!to_host->done()) std::this_thread::yield();
  EXPECT_EQ(pinned.ne(3.0).sum().item<int64_t>(), 0) << "the copy to the host ran before the compute stream's write";
  pinned.fill_(5.0);
  at::Tensor back = at::full({n}, -1.0, f32());
  auto to_device = streams.copy_async(back, pinned);
  to_device->block(streams.current());
  EXPECT_EQ(mismatches(back, [](int64_t) { return 5.0; }), 0) << "the reader ran before the copy to the device";
  EXPECT_THROW(streams.copy_async(at::empty({n}), on_device), zs::UsageError) << "pageable host memory must be refused";
}

// ---------------------------------------------------------------------------------------------
// Engine: the all-gather stream waits for the compute stream before it reads the master shards.

TEST_F(GpuStreams, GatherReadsShardWrittenBehindASleep) {
  for (c10::ScalarType dtype : {at::kBFloat16, at::kFloat}) {
    SCOPED_TRACE(c10::toString(dtype));
    torch::manual_seed(11);
    zs_test::Mlp model;
    model->to(device_);
    zs::ShardingOptions o;
    o.strategy = Strategy::kShardGradOp;  // stays gathered after forward, so it can be read
    o.param_dtype = dtype;
    zs::ShardingEngine engine(zs::test::session(), model.ptr(), o);
    at::Tensor master;
    for (const auto& sh : engine.param_shards()) {
      if (sh.name == "b0") master = sh.param;
    }
    ASSERT_TRUE(master.defined()) << "no shard for unit b0";
    fill_after_sleep(master, 0.5f);
    at::Tensor x = at::full({4, 7}, 1.0, f32());
    // The root's inputs are the caller's to cast (ShardingEngine::compute_dtype).
    at::Tensor out = engine.forward([&] { return model->forward(x.to(engine.compute_dtype())); });
    const at::Tensor& weight = model->layers[0]->fc->weight;  // a view of the gathered buffer
    EXPECT_EQ(weight.scalar_type(), dtype);
    EXPECT_EQ(mismatches(weight, [](int64_t) { return 0.5; }), 0)
        << "the gather read the master shard before the compute stream wrote it";
    out.sum().backward();
    engine.zero_grad();
  }
}

// ---------------------------------------------------------------------------------------------
// Engine: the reduce-scatter stream waits for gradients that the compute stream produces late.

// Identity in forward; in backward, holds the current stream in a sleep before passing the
// gradient on, so every gradient computed after it is produced late.
struct SleepInBackward : torch::autograd::Function<SleepInBackward> {
  static at::Tensor forward(torch::autograd::AutogradContext*, at::Tensor x) { return x.clone(); }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor& g = grads[0];
    const cudaError_t rc = zs_gpu_test::sleep(zs::comm::current_cuda_stream(g.device().index()), kSleepNs / 4);
    if (rc != cudaSuccess) throw std::runtime_error(std::string("sleep kernel: ") + cudaGetErrorString(rc));
    return {g};
  }
};

at::Tensor sleepy_forward(zs_test::MlpImpl& m, const at::Tensor& x) {
  at::Tensor h = m.input(x);
  for (auto& b : m.layers) h = SleepInBackward::apply(b(h));
  return m.output(h);
}

TEST_F(GpuStreams, ReductionWaitsForGradientsProducedBehindSleeps) {
  const int n = comm_->size(), r = comm_->rank();
  constexpr int kSteps = 3;
  constexpr double kLr = 0.1;
  auto batch = [&](int step, int64_t rows) {
    auto g = torch::make_generator<at::CPUGeneratorImpl>(40 + step);
    return std::make_pair(torch::randn({rows, 7}, g).to(device_), torch::randn({rows, 5}, g).to(device_));
  };
  // Plain LibTorch on the whole global batch, each rank's slice forwarded on its own.
  torch::manual_seed(13);
  zs_test::Mlp plain;
  plain->to(device_);
  std::vector<at::Tensor> trainable;
  for (auto& p : plain->parameters()) {
    if (p.requires_grad()) trainable.push_back(p);
  }
  torch::optim::SGD plain_opt(trainable, torch::optim::SGDOptions(kLr));
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = batch(step, 4 * n);
    plain_opt.zero_grad();
    for (int k = 0; k < n; ++k) {
      (torch::mse_loss(sleepy_forward(*plain, x.narrow(0, 4 * k, 4)), y.narrow(0, 4 * k, 4)) / n).backward();
    }
    plain_opt.step();
  }
  // Sharded: FULL_SHARD and HYBRID_SHARD reduce-scatter, NO_SHARD all-reduces (at one rank the
  // reduction is local, and still runs on the reduce-scatter stream).
  for (auto strategy : {Strategy::kFullShard, Strategy::kNoShard, Strategy::kHybridShard}) {
    SCOPED_TRACE(zs::to_string(strategy));
    torch::manual_seed(13);
    zs_test::Mlp model;
    model->to(device_);
    zs::ShardingOptions o;
    o.strategy = strategy;
    zs::ShardingEngine engine(zs::test::session(), model.ptr(), o);
    auto opt = zs::make_sgd(zs::SgdOptions{kLr});
    for (int step = 0; step < kSteps; ++step) {
      auto [x, y] = batch(step, 4 * n);
      engine.forward([&] { return torch::mse_loss(sleepy_forward(*model, x.narrow(0, 4 * r, 4)), y.narrow(0, 4 * r, 4)); })
          .backward();
      engine.step(*opt);
      engine.zero_grad();
    }
    double worst = 0;
    const auto sharded = engine.full_state_dict();
    for (const auto& item : plain->named_parameters()) {
      const at::Tensor& mine = sharded.at(item.key());
      worst = std::max(worst, zs::test::max_abs_diff(mine, item.value()));
    }
    EXPECT_LE(worst, 1e-5) << "sharded training with delayed gradients differs from plain LibTorch";
    if (zs::test::rank() == 0) std::printf("  %-13s max|diff| = %.3g\n", zs::to_string(strategy), worst);
  }
}

}  // namespace
