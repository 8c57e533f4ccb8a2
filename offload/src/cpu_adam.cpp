// FusedCpuAdam: shard bookkeeping and checks (the patterns of sharding/src/optimizer.cpp), the
// step constants in double as torch::optim::Adam/AdamW 1.13 computes them, runtime choice of the
// SIMD kernel, and the split of each shard into tiles over OpenMP threads.

#include "zeroshard/offload/cpu_adam.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/zeros_like.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#ifdef ZS_OFFLOAD_OPENMP
#include <omp.h>
#endif

#include "adam_update.h"
#include "cpu_adam_kernels.h"
#include "zeroshard/core/error.h"

namespace zeroshard {

// ---- CPU features ----

namespace {

bool cpu_has_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
}

bool cpu_has_avx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && cpu_has_avx2();
}

// The cap set by ZS_CPU_SIMD_MAX (kAvx512: no cap).
SimdPath simd_cap() {
  const char* env = std::getenv("ZS_CPU_SIMD_MAX");
  if (env == nullptr || *env == '\0') return SimdPath::kAvx512;
  for (SimdPath p : {SimdPath::kScalar, SimdPath::kAvx2, SimdPath::kAvx512}) {
    if (std::strcmp(env, to_string(p)) == 0) return p;
  }
  ZS_THROW(UsageError, "ZS_CPU_SIMD_MAX = '", env, "' is not valid; allowed: scalar, avx2, avx512");
}

const char* required_flags(SimdPath path) {
  switch (path) {
    case SimdPath::kAvx2: return "avx2, fma, f16c";
    case SimdPath::kAvx512: return "avx512f, avx512bw, avx512vl, avx512dq (and avx2, fma, f16c)";
    default: return "nothing";
  }
}

std::string format_double(double v) {
  char buf[64];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

}  // namespace

const char* to_string(SimdPath path) {
  switch (path) {
    case SimdPath::kAuto: return "auto";
    case SimdPath::kScalar: return "scalar";
    case SimdPath::kAvx2: return "avx2";
    case SimdPath::kAvx512: return "avx512";
  }
  return "?";
}

std::string cpu_simd_flags() {
  const std::pair<const char*, bool> flags[] = {
      {"avx2", __builtin_cpu_supports("avx2")},         {"fma", __builtin_cpu_supports("fma")},
      {"f16c", __builtin_cpu_supports("f16c")},         {"avx512f", __builtin_cpu_supports("avx512f")},
      {"avx512bw", __builtin_cpu_supports("avx512bw")}, {"avx512vl", __builtin_cpu_supports("avx512vl")},
      {"avx512dq", __builtin_cpu_supports("avx512dq")}};
  std::string s;
  for (const auto& [name, has] : flags) {
    if (has) s += std::string(s.empty() ? "" : " ") + name;
  }
  return s.empty() ? "none of avx2, fma, f16c, avx512f/bw/vl/dq" : s;
}

bool simd_supported(SimdPath path) {
  const SimdPath cap = simd_cap();
  switch (path) {
    case SimdPath::kAuto:
    case SimdPath::kScalar: return true;
    case SimdPath::kAvx2: return cap != SimdPath::kScalar && cpu_has_avx2();
    case SimdPath::kAvx512: return cap == SimdPath::kAvx512 && cpu_has_avx512();
  }
  return false;
}

SimdPath detect_simd() {
  if (simd_supported(SimdPath::kAvx512)) return SimdPath::kAvx512;
  if (simd_supported(SimdPath::kAvx2)) return SimdPath::kAvx2;
  return SimdPath::kScalar;
}

int cpu_adam_threads() {
#ifdef ZS_OFFLOAD_OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

// ---- the optimizer ----

namespace {

void check_options(const CpuAdamOptions& o) {
  auto range = [](const char* field, double v, double lo, bool lo_open, double hi, bool hi_open) {
    const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
    ZS_REQUIRE(ok, UsageError, "CpuAdamOptions.", field, " = ", format_double(v),
               " is out of range; allowed: ", lo_open ? "(" : "[", format_double(lo), ", ",
               std::isinf(hi) ? "inf)" : format_double(hi) + (hi_open ? ")" : "]"));
  };
  const double inf = HUGE_VAL;
  range("lr", o.lr, 0, false, inf, false);
  range("beta1", o.beta1, 0, false, 1, true);
  range("beta2", o.beta2, 0, false, 1, true);
  // > 0, as make_adam: zero-padding elements would otherwise become 0/0 = NaN.
  range("eps", o.eps, 0, true, inf, false);
  range("weight_decay", o.weight_decay, 0, false, inf, false);
  ZS_REQUIRE(!o.amsgrad, UsageError,
             "CpuAdamOptions.amsgrad = true is not supported by FusedCpuAdam; "
             "use make_adam/make_adamw for amsgrad");
}

// Elements per tile: large enough to amortize the OpenMP schedule, small enough to balance.
constexpr int64_t kTile = 1 << 16;

cpu_adam::KernelFn kernel_for(SimdPath path) {
  switch (path) {
    case SimdPath::kAvx512: return cpu_adam::adam_avx512;
    case SimdPath::kAvx2: return cpu_adam::adam_avx2;
    default: return cpu_adam::adam_scalar;
  }
}

void run_tiles(cpu_adam::KernelFn kernel, const cpu_adam::KernelArgs& args, int64_t n) {
  const int64_t tiles = (n + kTile - 1) / kTile;
#ifdef ZS_OFFLOAD_OPENMP
#pragma omp parallel for schedule(static) if (tiles > 1)
#endif
  for (int64_t t = 0; t < tiles; ++t) {
    kernel(args, t * kTile, std::min(n, (t + 1) * kTile));
  }
}

}  // namespace

namespace detail {

void check_cpu_adam_options(const CpuAdamOptions& o) { check_options(o); }

void adam_update(SimdPath path, const CpuAdamOptions& o, double lr, int64_t update, float* p,
                 const float* g, float* m, float* v, uint16_t* lp, cpu_adam::LowPrecision lp_type,
                 int64_t n) {
  // As torch::optim::Adam/AdamW 1.13: constants in double, cast to float by the tensor ops.
  const double t = static_cast<double>(update);
  const double bias_correction1 = 1 - std::pow(o.beta1, t);
  const double bias_correction2 = 1 - std::pow(o.beta2, t);
  cpu_adam::KernelArgs a{};
  a.p = p;
  a.g = g;
  a.m = m;
  a.v = v;
  a.lp = lp;
  a.lp_type = lp == nullptr ? cpu_adam::LowPrecision::kNone : lp_type;
  a.beta1 = static_cast<float>(o.beta1);
  a.one_minus_beta1 = static_cast<float>(1 - o.beta1);
  a.beta2 = static_cast<float>(o.beta2);
  a.one_minus_beta2 = static_cast<float>(1 - o.beta2);
  a.sqrt_bc2 = static_cast<float>(std::sqrt(bias_correction2));
  a.eps = static_cast<float>(o.eps);
  a.neg_step_size = static_cast<float>(-(lr / bias_correction1));
  a.decoupled = o.adamw && o.weight_decay != 0;
  a.decay = static_cast<float>(1 - lr * o.weight_decay);
  a.l2 = !o.adamw && o.weight_decay != 0;
  a.weight_decay = static_cast<float>(o.weight_decay);
  run_tiles(kernel_for(path), a, n);
}

}  // namespace detail

// Per position in the shard list: layout at the first step, updates received (a skipped shard
// does not advance, as in torch::optim), and the moments (created at the first update).
struct FusedCpuAdam::Slot {
  int64_t numel = 0;
  int64_t updates = 0;
  at::Tensor exp_avg;
  at::Tensor exp_avg_sq;
};

FusedCpuAdam::FusedCpuAdam(const CpuAdamOptions& options)
    : ShardedOptimizer(options.lr), o_(options), path_(SimdPath::kScalar) {
  check_options(options);
  path_ = detect_simd();
}

FusedCpuAdam::~FusedCpuAdam() = default;

void FusedCpuAdam::set_path(SimdPath path) {
  ZS_REQUIRE(simd_supported(path), UsageError, "FusedCpuAdam::set_path(", to_string(path),
             "): this CPU cannot run it (needs ", required_flags(path), "; CPU has: ",
             cpu_simd_flags(), "; ZS_CPU_SIMD_MAX = ",
             std::getenv("ZS_CPU_SIMD_MAX") ? std::getenv("ZS_CPU_SIMD_MAX") : "(unset)",
             "); use SimdPath::kAuto or a path detect_simd() allows (here: ",
             to_string(detect_simd()), ")");
  path_ = path == SimdPath::kAuto ? detect_simd() : path;
}

void FusedCpuAdam::check_shards(const std::vector<ParamShard>& shards,
                                const std::vector<at::Tensor>& lp_out) {
  for (size_t i = 0; i < shards.size(); ++i) {
    const ParamShard& s = shards[i];
    ZS_REQUIRE(s.param.defined() && s.param.scalar_type() == at::kFloat &&
                   s.param.is_contiguous() && s.param.device().is_cpu(),
               UsageError, "FusedCpuAdam step: shard ", i, " ('", s.name,
               "') must be a defined, contiguous fp32 CPU tensor, got ",
               s.param.defined() ? std::string(c10::toString(s.param.scalar_type())) + " on " +
                                       s.param.device().str()
                                 : "undefined",
               s.param.defined() && !s.param.is_contiguous() ? " (non-contiguous)" : "");
    if (s.grad.defined()) {
      ZS_REQUIRE(s.grad.scalar_type() == at::kFloat && s.grad.sizes() == s.param.sizes() &&
                     s.grad.device() == s.param.device() && s.grad.is_contiguous(),
                 UsageError, "FusedCpuAdam step: the grad of shard ", i, " ('", s.name, "') is ",
                 c10::toString(s.grad.scalar_type()), s.grad.sizes(), " on ", s.grad.device(),
                 s.grad.is_contiguous() ? "" : " (non-contiguous)", ", its param is ",
                 c10::toString(s.param.scalar_type()), s.param.sizes(), " on ", s.param.device(),
                 "; they must match and be contiguous");
    }
  }
  ZS_REQUIRE(lp_out.empty() || lp_out.size() == shards.size(), UsageError,
             "FusedCpuAdam step_with_copy: got ", lp_out.size(), " low-precision outputs for ",
             shards.size(), " shards; pass one per shard (undefined for none) or none");
  for (size_t i = 0; i < lp_out.size(); ++i) {
    const at::Tensor& t = lp_out[i];
    if (!t.defined()) continue;
    ZS_REQUIRE((t.scalar_type() == at::kBFloat16 || t.scalar_type() == at::kHalf) &&
                   t.is_contiguous() && t.device().is_cpu() && t.numel() == shards[i].param.numel(),
               UsageError, "FusedCpuAdam step_with_copy: output ", i, " (shard '", shards[i].name,
               "') is ", c10::toString(t.scalar_type()), t.sizes(), " on ", t.device(),
               t.is_contiguous() ? "" : " (non-contiguous)",
               "; it must be a contiguous CPU BFloat16 or Half tensor of ", shards[i].param.numel(),
               " elements");
  }
  if (!layout_recorded_) {
    slots_.resize(shards.size());
    for (size_t i = 0; i < shards.size(); ++i) slots_[i].numel = shards[i].param.numel();
    layout_recorded_ = true;
    return;
  }
  ZS_REQUIRE(shards.size() == slots_.size(), UsageError, "FusedCpuAdam step ", steps_ + 1, " got ",
             shards.size(), " shards, the first step had ", slots_.size(),
             "; pass the same shard list, in the same order, every step");
  for (size_t i = 0; i < shards.size(); ++i) {
    ZS_REQUIRE(shards[i].param.numel() == slots_[i].numel, UsageError, "FusedCpuAdam step ",
               steps_ + 1, ": shard ", i, " ('", shards[i].name, "') changed: expected ",
               slots_[i].numel, " elements (as at the first step), got ", shards[i].param.numel());
  }
}

void FusedCpuAdam::step(const std::vector<ParamShard>& shards) { step_with_copy(shards, {}); }

void FusedCpuAdam::step_with_copy(const std::vector<ParamShard>& shards,
                                  const std::vector<at::Tensor>& lp_out) {
  check_shards(shards, lp_out);
  at::NoGradGuard no_grad;
  if (pending_) {
    ZS_REQUIRE(pending_->size() == shards.size(), UsageError, "FusedCpuAdam: the imported state has ",
               pending_->size(), " shard positions, the step got ", shards.size(), " shards");
    for (size_t i = 0; i < shards.size(); ++i) {
      for (const at::Tensor& t : (*pending_)[i].tensors) {
        ZS_REQUIRE(t.numel() == shards[i].param.numel(), UsageError, "FusedCpuAdam: imported state of shard ", i,
                   " ('", shards[i].name, "') has ", t.numel(), " elements, the shard has ", shards[i].param.numel());
      }
    }
    for (size_t i = 0; i < shards.size(); ++i) {
      const ShardOptimizerState& st = (*pending_)[i];
      slots_[i].updates = st.updates;
      slots_[i].exp_avg = st.tensors.empty() ? at::Tensor() : st.tensors[0].to(at::kFloat).contiguous().clone();
      slots_[i].exp_avg_sq = st.tensors.empty() ? at::Tensor() : st.tensors[1].to(at::kFloat).contiguous().clone();
    }
    pending_.reset();
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    const ParamShard& s = shards[i];
    const at::Tensor lp = lp_out.empty() ? at::Tensor() : lp_out[i];
    if (!s.grad.defined()) {
      if (lp.defined()) lp.view({-1}).copy_(s.param.view({-1}));
      continue;
    }
    Slot& slot = slots_[i];
    ++slot.updates;
    if (!slot.exp_avg.defined()) {
      slot.exp_avg = at::zeros_like(s.param, at::MemoryFormat::Contiguous);
      slot.exp_avg_sq = at::zeros_like(s.param, at::MemoryFormat::Contiguous);
    }
    const cpu_adam::LowPrecision lp_type = !lp.defined()                        ? cpu_adam::LowPrecision::kNone
                                           : lp.scalar_type() == at::kBFloat16 ? cpu_adam::LowPrecision::kBf16
                                                                                : cpu_adam::LowPrecision::kFp16;
    detail::adam_update(path_, o_, lr_, slot.updates, s.param.data_ptr<float>(), s.grad.data_ptr<float>(),
                        slot.exp_avg.data_ptr<float>(), slot.exp_avg_sq.data_ptr<float>(),
                        lp.defined() ? static_cast<uint16_t*>(lp.data_ptr()) : nullptr, lp_type,
                        s.param.numel());
  }
  ++steps_;
}

std::vector<ShardOptimizerState> FusedCpuAdam::export_state() const {
  if (pending_) return *pending_;
  std::vector<ShardOptimizerState> out;
  for (const Slot& s : slots_) {
    ShardOptimizerState st;
    st.updates = s.updates;
    if (s.exp_avg.defined()) st.tensors = {s.exp_avg, s.exp_avg_sq};
    out.push_back(std::move(st));
  }
  return out;
}

void FusedCpuAdam::import_state(std::vector<ShardOptimizerState> state, int64_t steps) {
  for (size_t i = 0; i < state.size(); ++i) {
    ZS_REQUIRE(state[i].tensors.empty() || state[i].tensors.size() == 2, UsageError, "FusedCpuAdam import_state: position ",
               i, " has ", state[i].tensors.size(), " state tensors; expected exp_avg and exp_avg_sq");
  }
  pending_ = std::make_unique<std::vector<ShardOptimizerState>>(std::move(state));
  steps_ = steps;
}

int64_t FusedCpuAdam::state_bytes() const {
  int64_t bytes = 0;
  for (const Slot& s : slots_) {
    if (s.exp_avg.defined()) bytes += static_cast<int64_t>(s.exp_avg.nbytes() + s.exp_avg_sq.nbytes());
  }
  return bytes;
}

std::string FusedCpuAdam::describe() const {
  return std::string(o_.adamw ? "FusedCpuAdamW" : "FusedCpuAdam") + "(lr=" + format_double(lr_) +
         ", betas=(" + format_double(o_.beta1) + ", " + format_double(o_.beta2) +
         "), eps=" + format_double(o_.eps) + ", weight_decay=" + format_double(o_.weight_decay) +
         ", simd=" + to_string(path_) + ")";
}

}  // namespace zeroshard
