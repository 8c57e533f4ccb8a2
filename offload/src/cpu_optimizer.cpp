// SPDX-License-Identifier: Apache-2.0
// FusedCpuOptimizer: the shard bookkeeping and checks shared by the fused CPU optimizers (the
// patterns of optim/src/optimizer.cpp, plus the low-precision outputs), the forced SIMD path,
// and make_cpu_optimizer.

#include "zeroshard/offload/cpu_optimizer.h"

#include <ATen/core/grad_mode.h>

#include <cstdlib>
#include <utility>

#include "zeroshard/base/error.h"
#include "zeroshard/offload/cpu_adam.h"
#include "zeroshard/offload/cpu_sgd.h"

namespace zeroshard {

namespace {

const char* required_flags(SimdPath path) {
  switch (path) {
    case SimdPath::kAvx2: return "avx2, fma, f16c";
    case SimdPath::kAvx512: return "avx512f, avx512bw, avx512vl, avx512dq (and avx2, fma, f16c)";
    default: return "nothing";
  }
}

}  // namespace

FusedCpuOptimizer::FusedCpuOptimizer(std::string name, double lr)
    : ShardedOptimizer(lr), name_(std::move(name)), path_(detect_simd()) {}

void FusedCpuOptimizer::set_path(SimdPath path) {
  ZS_REQUIRE(simd_supported(path), UsageError, name_, "::set_path(", to_string(path),
             "): this CPU cannot run it (needs ", required_flags(path), "; CPU has: ",
             cpu_simd_flags(), "; ZS_CPU_SIMD_MAX = ",
             std::getenv("ZS_CPU_SIMD_MAX") ? std::getenv("ZS_CPU_SIMD_MAX") : "(unset)",
             "); use SimdPath::kAuto or a path detect_simd() allows (here: ",
             to_string(detect_simd()), ")");
  path_ = path == SimdPath::kAuto ? detect_simd() : path;
}

void FusedCpuOptimizer::check_inputs(const std::vector<ParamShard>& shards,
                                     const std::vector<at::Tensor>& lp_out) {
  for (size_t i = 0; i < shards.size(); ++i) {
    const ParamShard& s = shards[i];
    ZS_REQUIRE(s.param.defined() && s.param.scalar_type() == at::kFloat &&
                   s.param.is_contiguous() && s.param.device().is_cpu(),
               UsageError, name_, " step: shard ", i, " ('", s.name,
               "') must be a defined, contiguous fp32 CPU tensor, got ",
               s.param.defined() ? std::string(c10::toString(s.param.scalar_type())) + " on " +
                                       s.param.device().str()
                                 : "undefined",
               s.param.defined() && !s.param.is_contiguous() ? " (non-contiguous)" : "");
    if (s.grad.defined()) {
      ZS_REQUIRE(s.grad.scalar_type() == at::kFloat && s.grad.sizes() == s.param.sizes() &&
                     s.grad.device() == s.param.device() && s.grad.is_contiguous(),
                 UsageError, name_, " step: the grad of shard ", i, " ('", s.name, "') is ",
                 c10::toString(s.grad.scalar_type()), s.grad.sizes(), " on ", s.grad.device(),
                 s.grad.is_contiguous() ? "" : " (non-contiguous)", ", its param is ",
                 c10::toString(s.param.scalar_type()), s.param.sizes(), " on ", s.param.device(),
                 "; they must match and be contiguous");
    }
  }
  for (const ParamShard& s : shards) (void)shard_runs(s, 0.0);  // throws on malformed groups
  ZS_REQUIRE(lp_out.empty() || lp_out.size() == shards.size(), UsageError, name_,
             " step_with_copy: got ", lp_out.size(), " low-precision outputs for ", shards.size(),
             " shards; pass one per shard (undefined for none) or none");
  for (size_t i = 0; i < lp_out.size(); ++i) {
    const at::Tensor& t = lp_out[i];
    if (!t.defined()) continue;
    ZS_REQUIRE((t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf) &&
                   t.is_contiguous() && t.device().is_cpu() && t.numel() == shards[i].param.numel(),
               UsageError, name_, " step_with_copy: output ", i, " (shard '", shards[i].name,
               "') is ", c10::toString(t.scalar_type()), t.sizes(), " on ", t.device(),
               t.is_contiguous() ? "" : " (non-contiguous)",
               "; it must be a contiguous CPU BFloat16 or Half tensor of ", shards[i].param.numel(),
               " elements");
  }
  if (!layout_recorded_) {
    layout_.clear();
    for (const ParamShard& s : shards) layout_.push_back(s.param.numel());
    layout_recorded_ = true;
    return;
  }
  ZS_REQUIRE(shards.size() == layout_.size(), UsageError, name_, " step ", steps_ + 1, " got ",
             shards.size(), " shards, the first step had ", layout_.size(),
             "; pass the same shard list, in the same order, every step");
  for (size_t i = 0; i < shards.size(); ++i) {
    ZS_REQUIRE(shards[i].param.numel() == layout_[i], UsageError, name_, " step ", steps_ + 1,
               ": shard ", i, " ('", shards[i].name, "') changed: expected ", layout_[i],
               " elements (as at the first step), got ", shards[i].param.numel());
  }
}

void FusedCpuOptimizer::step_with_copy(const std::vector<ParamShard>& shards,
                                       const std::vector<at::Tensor>& lp_out) {
  check_inputs(shards, lp_out);
  at::NoGradGuard no_grad;  // params may be autograd leaves; updates are not differentiated
  if (pending_) {
    ZS_REQUIRE(pending_->size() == shards.size(), UsageError, name_, ": the imported state has ", pending_->size(),
               " shard positions, the step got ", shards.size(), " shards");
    for (size_t i = 0; i < shards.size(); ++i) {
      const ShardOptimizerState& st = (*pending_)[i];
      ZS_REQUIRE(!st.has_tensors() || st.numel() == shards[i].param.numel(), UsageError, name_,
                 ": imported state of shard ", i, " ('", shards[i].name, "') has ", st.numel(),
                 " elements, the shard has ", shards[i].param.numel());
    }
    for (size_t i = 0; i < shards.size(); ++i) {
      ShardOptimizerState& st = (*pending_)[i];
      if (st.read) {  // a checkpoint's state, read one position at a time
        st.tensors = st.materialize();
        st.read = nullptr;
      }
      set_state(i, st);
      st = ShardOptimizerState();
    }
    pending_.reset();
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    const ParamShard& s = shards[i];
    const at::Tensor lp = lp_out.empty() ? at::Tensor() : lp_out[i];
    if (s.grad.defined()) {
      update(i, s, lp);
    } else if (lp.defined()) {
      lp.view({-1}).copy_(s.param.view({-1}));
    }
  }
  ++steps_;
}

std::vector<ShardOptimizerState> FusedCpuOptimizer::export_state() const {
  if (pending_) return *pending_;
  std::vector<ShardOptimizerState> out;
  for (size_t i = 0; i < layout_.size(); ++i) out.push_back(get_state(i));
  return out;
}

void FusedCpuOptimizer::import_state(std::vector<ShardOptimizerState> state, int64_t steps) {
  const size_t want = state_names().size();
  for (size_t i = 0; i < state.size(); ++i) {
    ZS_REQUIRE(state[i].read || state[i].tensors.empty() || state[i].tensors.size() == want, UsageError, name_,
               " import_state: position ", i, " has ", state[i].tensors.size(), " state tensors, expected ", want);
    for (at::Tensor& t : state[i].tensors) t = t.to(at::kCPU, at::kFloat).contiguous().clone();
  }
  pending_ = std::make_unique<std::vector<ShardOptimizerState>>(std::move(state));
  steps_ = steps;
}

// Validation is make_optimizer's (one set of rules and messages for both); the optimizer it
// builds is dropped (it holds no state before its first step).
std::unique_ptr<FusedCpuOptimizer> make_cpu_optimizer(const OptimizerOptions& options) {
  (void)make_optimizer(options);
  if (options.type == OptimizerOptions::Type::kSgd) return std::make_unique<FusedCpuSgd>(sgd_options(options));
  return std::make_unique<FusedCpuAdam>(cpu_adam_options(options));
}

CpuAdamOptions cpu_adam_options(const OptimizerOptions& options) {
  CpuAdamOptions o;
  static_cast<AdamOptions&>(o) = adam_options(options);  // UsageError for SGD
  o.adamw = options.type == OptimizerOptions::Type::kAdamW;
  return o;
}

}  // namespace zeroshard
