// SPDX-License-Identifier: Apache-2.0
#pragma once
// bench_step's command line, shared by its CPU part (bench_step.cpp) and its CUDA part
// (bench_step_gpu.cpp).

#include <optional>
#include <string>
#include <vector>

#include "gpt_bench_args.h"
#include "zeroshard/base/error.h"
#include "zeroshard/config/run_options.h"
#include "zeroshard/core/session.h"

namespace zs_bench {

struct StepArgs : GptBenchArgs {
  std::string strategy = "FULL_SHARD";
  std::string device = "auto";  // auto: the session's device (runtime.device)
  std::string preset;           // CUDA: gpt-1.3b, gpt-offload
  std::string dtype = "fp32";   // CUDA: fp32, or bf16 (zeroshard: param/reduce dtype; plain: autocast)
  bool checkpoint = false;      // CUDA: activation checkpointing of every block (both variants)
  double peak_tflops = 0;       // CUDA: 0 = the H100/H200 datasheet peak for the dtype
  bool plain = true;            // CUDA: also train plain LibTorch (the reference)
  int warmup = 2;               // steps not timed
  bool cuda = false;            // the CUDA benchmark runs (--device cuda, or auto on a CUDA session)
};

// Parses bench_step's arguments (argv[0] first); `session_cuda`: the session's device is CUDA.
// nullopt after --help/--version (printed when `print`). Throws UsageError naming the bad argument.
std::optional<StepArgs> parse_step_args(const std::vector<std::string>& args, bool session_cuda, bool print);

// --strategy's value: a ShardingStrategy by its config name (FULL_SHARD, ...); UsageError otherwise.
inline zeroshard::ShardingStrategy parse_strategy(const std::string& name) {
  using S = zeroshard::ShardingStrategy;
  for (S st : {S::kFullShard, S::kShardGradOp, S::kNoShard, S::kHybridShard}) {
    if (name == zeroshard::to_string(st)) return st;
  }
  ZS_THROW(zeroshard::UsageError, "--strategy '", name, "' is not one of FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD");
}

// The CUDA benchmark (bench_step_gpu.cpp), with the run's optimizer, offload and sharding options.
// Returns the exit code.
int run_gpu_step_bench(zeroshard::Session& s, const zeroshard::RunOptions& run, const StepArgs& a);

}  // namespace zs_bench
