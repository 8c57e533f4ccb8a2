// SPDX-License-Identifier: Apache-2.0
// Parameter and gradient offload on CUDA (label gpu): the GPU side of test_offload_params.cpp and
// test_offload_grads.cpp. On a GPU run the stores sit between the device and the host: a unit's
// parameter shard is read from host memory or NVMe and copied to the device for its gather, a
// gradient shard is copied off the device as its reduction completes and back for the clip and the
// step. Checked:
// - parameters and gradients on the host or on NVMe (each combination, with the optimizer state on
//   the host or on NVMe) train bit for bit as resident ones under the same offloaded optimizer;
// - that offloaded optimizer itself, on a GPU run, tracks the optimizer on the device (fused AdamW)
//   within 1e-4 (the CPU kernel and the CUDA one round differently);
// - the bf16 copy of offloaded shards (offload.keep_param_dtype_shard) on the device: bit for bit as
//   resident shards with bf16 compute;
// - the host optimizer stepping shards during backward (offload.overlap_step): bit for bit as its
//   step after backward, through a skipped, kept and redone step;
// - what the device's allocator holds after a backward: with parameters and gradients off the
//   device, at least 8 bytes per trainable parameter of the shard less than with them resident.
// Runs with --set runtime.device=AUTO (tests/CMakeLists.txt) and skips visibly where the session's
// device is the CPU.

#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "gpu/gpu_session.h"
#include "offload/offload_test_options.h"
#include "engine/gpt_trainer.h"
#include "zeroshard/core/memory_report.h"
#include "zeroshard/offload/offload_optimizer.h"
#include "zeroshard/engine/engine.h"
#include "flat_param.h"  // the engine's private FlatParam (engine/src)
#include "zeroshard/optim/optimizer.h"
#include "zeroshard/store/shard_store.h"

namespace zs = zeroshard;
using Target = zs::OffloadTarget;
using Trainer = zs_test::GptTrainer;
using zs_test::max_diff;
using zs_test::offload_optimizer_options;
using zs_test::offload_placement;

namespace {

// Under the build tree, one per rank.
struct TempDir : zs::test::RankDir {
  explicit TempDir(const std::string& name) : RankDir("gpu_offload_" + name) {}
};

std::string describe(Target opt, Target params, Target grads) {
  return std::string("optimizer state on ") + zs::to_string(opt) + ", parameters on " + zs::to_string(params) +
         ", gradients on " + zs::to_string(grads);
}

int64_t trainable_shard_numel(zs::ShardingEngine& e) {
  int64_t n = 0;
  for (zs::FlatParam* f : zs::detail::flat_params(e)) {
    if (f->trainable()) n += f->shard_numel();
  }
  return n;
}

}  // namespace

TEST(GpuOffload, ParamsAndGradsOffTheGpuTrainBitwiseAsResident) {
  ZS_REQUIRE_GPU_SESSION();
  const auto cfg = zs_test::trainer_adamw_options();
  const std::vector<std::pair<Target, Target>> placements = {
      {Target::kCpu, Target::kCpu},   {Target::kNvme, Target::kNvme}, {Target::kDevice, Target::kNvme},
      {Target::kNvme, Target::kDevice}, {Target::kCpu, Target::kNvme}, {Target::kDevice, Target::kCpu}};
  for (Target opt_where : {Target::kCpu, Target::kNvme}) {
    TempDir ref_dir("ref");
    Trainer ref(offload_placement(Target::kDevice, Target::kDevice, ref_dir.path));
    zs::OffloadedOptimizer ref_opt(cfg, offload_optimizer_options(opt_where, Target::kDevice, ref_dir.path),
                                   zs::test::rank());
    ref.train(ref_opt, 0, 4);
    const auto want = ref.params();
    ASSERT_EQ(want.begin()->second.device(), zs::test::session().device());
    for (const auto& [params, grads] : placements) {
      const std::string what = describe(opt_where, params, grads);
      TempDir dir("equal");
      Trainer t(offload_placement(params, grads, dir.path));
      zs::OffloadedOptimizer opt(cfg, offload_optimizer_options(opt_where, params, dir.path), zs::test::rank());
      t.train(opt, 0, 4);
      const double d = max_diff(t.params(), want);
      if (zs::test::rank() == 0) std::printf("  %-70s max|diff| = %.3g\n", what.c_str(), d);
      EXPECT_EQ(d, 0.0) << what;
      if (grads != Target::kDevice) {
        const zs::ShardStore::IoStats io = t.engine->grad_store()->io_stats();
        if (grads == Target::kNvme) EXPECT_GT(io.bytes_written, 0) << what;
        EXPECT_EQ(t.engine->memory().current(zs::MemCategory::kGradShards), 0) << what;
      }
    }
  }
}

// offload.keep_param_dtype_shard on a GPU (ZeRO-Offload's layout): the bf16 copies live on the
// device, the fp32 masters in host memory or on NVMe; training equals resident shards with bf16
// compute bit for bit.
TEST(GpuOffload, Bf16CopyOnTheDeviceTrainsBitwiseAsResident) {
  ZS_REQUIRE_GPU_SESSION();
  const auto cfg = zs_test::trainer_adamw_options();
  TempDir ref_dir("bf16_ref");
  zs::ShardingOptions ro = offload_placement(Target::kDevice, Target::kDevice, ref_dir.path);
  ro.param_dtype = c10::kBFloat16;
  Trainer ref(ro);
  zs::OffloadedOptimizer ref_opt(cfg, offload_optimizer_options(Target::kCpu, Target::kDevice, ref_dir.path),
                                 zs::test::rank());
  ref.train(ref_opt, 0, 4);
  for (Target params : {Target::kCpu, Target::kNvme}) {
    TempDir dir("bf16_copy");
    zs::ShardingOptions o = offload_placement(params, Target::kDevice, dir.path);
    o.param_dtype = c10::kBFloat16;
    o.keep_param_dtype_shard = true;
    Trainer t(o);
    zs::OffloadedOptimizer opt(cfg, offload_optimizer_options(Target::kCpu, params, dir.path), zs::test::rank());
    t.train(opt, 0, 4);
    EXPECT_EQ(max_diff(t.params(), ref.params()), 0.0) << "parameters on " << zs::to_string(params);
    int64_t copies = 0;
    for (zs::FlatParam* f : zs::detail::flat_params(*t.engine)) {
      EXPECT_TRUE(f->has_param_dtype_copy()) << f->name();
      copies += 2 * f->shard_numel();
    }
    EXPECT_EQ(t.engine->memory().current(zs::MemCategory::kShardedParams), copies);
  }
}

// The offloaded optimizer's CPU kernel against the fused AdamW on the device, on a GPU run.
TEST(GpuOffload, OffloadedOptimizerTracksTheDeviceOptimizer) {
  ZS_REQUIRE_GPU_SESSION();
  const auto cfg = zs_test::trainer_adamw_options();
  Trainer on_device(offload_placement(Target::kDevice, Target::kDevice, ""));
  auto device_opt = zs::make_optimizer(cfg);
  on_device.train(*device_opt, 0, 6);
  // State on NVMe with everything there; state in host memory over shards on the device (the
  // pipelined chunk copies of update_device_shard).
  for (const auto& [opt_where, params] : {std::pair{Target::kNvme, Target::kNvme}, std::pair{Target::kCpu, Target::kDevice}}) {
    TempDir dir("vs_device");
    Trainer t(offload_placement(params, params, dir.path));
    zs::OffloadedOptimizer opt(cfg, offload_optimizer_options(opt_where, params, dir.path), zs::test::rank());
    t.train(opt, 0, 6);
    const double d = max_diff(t.params(), on_device.params());
    if (zs::test::rank() == 0) {
      std::printf("  offloaded (state on %s, parameters on %s) vs device AdamW after 6 steps: max|diff| = %.3g\n",
                  zs::to_string(opt_where), zs::to_string(params), d);
    }
    EXPECT_LE(d, 1e-4) << zs::to_string(opt_where);
  }
}

// The host optimizer stepping each unit's shards during backward (step_during_backward) on a GPU
// run: the worker waits for each reduction's event, copies the gradient down, writes the new master
// into the next host arrays and uploads it; a redone step uploads the old master back first. Bit
// for bit the same training as step() after backward: a skipped step, kept ones (a clip factor of
// exactly 1) and a redone one (a clip that scales).
TEST(GpuOffload, StepDuringBackwardTrainsBitwiseAsStepAlone) {
  ZS_REQUIRE_GPU_SESSION();
  const auto cfg = zs_test::trainer_adamw_options();
  zs::OffloadOptions host;
  host.target = Target::kCpu;
  Trainer ref, ovl;
  zs::OffloadedOptimizer ref_opt(cfg, host, zs::test::rank()), opt(cfg, host, zs::test::rank());
  const double clip[] = {std::numeric_limits<double>::infinity(), 1e9, 0.05, 1e9};
  for (int s = 0; s < 4; ++s) {
    for (Trainer* t : {&ref, &ovl}) {
      torch::manual_seed(5000 + s + zs::test::rank());
      const c10::Device device = zs::test::session().device();
      torch::Tensor x = torch::randint(t->config.vocab, {2, t->config.seq}, torch::kLong).to(device);
      torch::Tensor loss = t->engine->forward(
          [&] { return torch::cross_entropy_loss(t->model->forward(x).view({-1, t->config.vocab}), x.view({-1})); });
      if (t == &ovl) t->engine->step_during_backward(opt);
      loss.backward();
      t->engine->clip_grad_norm(clip[s]);
      if (s > 0) t->engine->step(t == &ovl ? static_cast<zs::ShardedOptimizer&>(opt) : ref_opt);
      t->engine->zero_grad();
    }
  }
  EXPECT_EQ(max_diff(ref.params(), ovl.params()), 0.0);
  const zs::ShardingEngine::OverlapStats st = ovl.engine->overlap_stats();
  EXPECT_EQ(st.abandoned, 1);
  EXPECT_EQ(st.redone, 1);
  EXPECT_GT(st.shards, 0);
}

// The device's allocator after a backward pass: resident, each rank holds its fp32 parameter
// shard and gradient shard on the device; offloaded, neither.
TEST(GpuOffload, ShardsLeaveTheDevice) {
  ZS_REQUIRE_GPU_SESSION();
  zs_test::GptConfig c = zs_test::trainer_gpt_config();
  c.dim = 256, c.heads = 4, c.layers = 4, c.vocab = 512, c.seq = 16;  // ~3.3M parameters: 26 MB of shards
  const auto cfg = zs_test::trainer_adamw_options();
  int64_t held[2] = {0, 0};
  int64_t shard_numel = 0;
  for (int offloaded = 0; offloaded < 2; ++offloaded) {
    TempDir dir("memory");
    const Target where = offloaded ? Target::kNvme : Target::kDevice;
    Trainer t(offload_placement(where, where, dir.path), 11, c);
    zs::OffloadedOptimizer opt(cfg, offload_optimizer_options(Target::kCpu, where, dir.path), zs::test::rank());
    t.train(opt, 0, 2);
    t.forward_backward(2);
    const zs::DeviceMemoryUse use = zs::device_memory_use();
    ASSERT_TRUE(use.known);
    held[offloaded] = use.current;
    shard_numel = trainable_shard_numel(*t.engine);
    t.engine->step(opt);
    t.engine->zero_grad();
  }
  if (zs::test::rank() == 0) {
    std::printf("  device allocator after backward: resident %lld bytes, offloaded %lld bytes (shard: %lld params)\n",
                static_cast<long long>(held[0]), static_cast<long long>(held[1]),
                static_cast<long long>(shard_numel));
  }
  // The allocator rounds blocks up (512 bytes on CUDA): resident shards count at least their size.
  EXPECT_GE(held[0] - held[1], 8 * shard_numel * 99 / 100);
}
