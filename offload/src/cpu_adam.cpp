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
  const cpu_adam::KernelFn kernel = kernel_for(path_);
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
    // As torch::optim::Adam/AdamW 1.13: constants in double, cast to float by the tensor ops.
    const double t = static_cast<double>(slot.updates);
    const double bias_correction1 = 1 - std::pow(o_.beta1, t);
    const double bias_correction2 = 1 - std::pow(o_.beta2, t);
    cpu_adam::KernelArgs a{};
    a.p = s.param.data_ptr<float>();
    a.g = s.grad.data_ptr<float>();
    a.m = slot.exp_avg.data_ptr<float>();
    a.v = slot.exp_avg_sq.data_ptr<float>();
    a.lp = lp.defined() ? static_cast<uint16_t*>(lp.data_ptr()) : nullptr;
    a.lp_type = !lp.defined()                        ? cpu_adam::LowPrecision::kNone
                : lp.scalar_type() == at::kBFloat16 ? cpu_adam::LowPrecision::kBf16
                                                     : cpu_adam::LowPrecision::kFp16;
    a.beta1 = static_cast<float>(o_.beta1);
    a.one_minus_beta1 = static_cast<float>(1 - o_.beta1);
    a.beta2 = static_cast<float>(o_.beta2);
    a.one_minus_beta2 = static_cast<float>(1 - o_.beta2);
    a.sqrt_bc2 = static_cast<float>(std::sqrt(bias_correction2));
    a.eps = static_cast<float>(o_.eps);
    a.neg_step_size = static_cast<float>(-(lr_ / bias_correction1));
    a.decoupled = o_.adamw && o_.weight_decay != 0;
    a.decay = static_cast<float>(1 - lr_ * o_.weight_decay);
    a.l2 = !o_.adamw && o_.weight_decay != 0;
    a.weight_decay = static_cast<float>(o_.weight_decay);
    run_tiles(kernel, a, s.param.numel());
  }
  ++steps_;
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
