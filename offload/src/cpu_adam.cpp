// SPDX-License-Identifier: Apache-2.0
// FusedCpuAdam: option checks, the step constants in double as torch::optim::Adam/AdamW 1.13
// computes them, and the choice of kernel (shard checks and tiling: cpu_optimizer.cpp, cpu_simd.cpp).

#include "zeroshard/offload/cpu_adam.h"

#include <ATen/ops/zeros_like.h>

#include <algorithm>
#include <cmath>

#include "adam_update.h"
#include "cpu_common.h"
#include "zeroshard/base/error.h"
#include "zeroshard/base/format.h"

namespace zeroshard {


namespace {

void check_options(const CpuAdamOptions& o) {
  auto range = [](const char* field, double v, double lo, bool lo_open, double hi, bool hi_open) {
    cpu_optim::check_range("CpuAdamOptions", field, v, lo, lo_open, hi, hi_open);
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

cpu_optim::AdamFn kernel_for(SimdPath path) {
  switch (path) {
    case SimdPath::kAvx512: return cpu_optim::adam_avx512;
    case SimdPath::kAvx2: return cpu_optim::adam_avx2;
    default: return cpu_optim::adam_scalar;
  }
}

}  // namespace

// Per position in the shard list: updates received (a skipped shard does not advance, as in
// torch::optim), and the moments (created at the first update).
struct FusedCpuAdam::Slot {
  int64_t updates = 0;
  at::Tensor exp_avg;
  at::Tensor exp_avg_sq;
};

namespace detail {


void adam_update(SimdPath path, const CpuAdamOptions& o, double lr, int64_t update, float* p, const float* g,
                 float* m, float* v, uint16_t* lp, cpu_optim::LowPrecision lp_type, int64_t n, float* p_out,
                 float* m_out, float* v_out) {
  // As torch::optim::Adam/AdamW 1.13: constants in double, cast to float by the tensor ops.
  const double t = static_cast<double>(update);
  const double bias_correction1 = 1 - std::pow(o.beta1, t);
  const double bias_correction2 = 1 - std::pow(o.beta2, t);
  cpu_optim::AdamArgs a{};
  a.p = p;
  a.g = g;
  a.m = m;
  a.v = v;
  a.p_out = p_out != nullptr ? p_out : p;
  a.m_out = m_out != nullptr ? m_out : m;
  a.v_out = v_out != nullptr ? v_out : v;
  a.lp = lp;
  a.lp_type = lp == nullptr ? cpu_optim::LowPrecision::kNone : lp_type;
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
  const cpu_optim::AdamFn kernel = kernel_for(path);
  cpu_optim::run_tiles(n, [&](int64_t begin, int64_t end) { kernel(a, begin, end); });
}

void adam_update_runs(SimdPath path, const CpuAdamOptions& o, const std::vector<ShardGroupRange>& runs,
                      double lr, int64_t update, int64_t offset, float* p, const float* g, float* m, float* v,
                      uint16_t* lp, cpu_optim::LowPrecision lp_type, int64_t n, float* p_out, float* m_out,
                      float* v_out) {
  for (const ShardGroupRange& r : runs) {
    const int64_t lo = std::max(r.begin, offset);
    const int64_t hi = std::min(r.end, offset + n);
    if (lo >= hi) continue;
    const int64_t at = lo - offset;
    CpuAdamOptions run_options = o;
    run_options.weight_decay = r.weight_decay;
    auto out = [at](float* q) { return q == nullptr ? nullptr : q + at; };
    adam_update(path, run_options, lr * r.lr_scale, update, p + at, g + at, m + at, v + at,
                lp == nullptr ? nullptr : lp + at, lp_type, hi - lo, out(p_out), out(m_out), out(v_out));
  }
}

}  // namespace detail

FusedCpuAdam::FusedCpuAdam(const CpuAdamOptions& options)
    : FusedCpuOptimizer("FusedCpuAdam", options.lr), o_(options) {
  check_options(options);
}

FusedCpuAdam::~FusedCpuAdam() = default;

void FusedCpuAdam::update(size_t index, const ParamShard& s, const at::Tensor& lp) {
  if (slots_.size() <= index) slots_.resize(index + 1);
  Slot& slot = slots_[index];
  ++slot.updates;
  if (!slot.exp_avg.defined()) {
    slot.exp_avg = at::zeros_like(s.param, at::MemoryFormat::Contiguous);
    slot.exp_avg_sq = at::zeros_like(s.param, at::MemoryFormat::Contiguous);
  }
  detail::adam_update_runs(path(), o_, shard_runs(s, o_.weight_decay), lr_, slot.updates, 0, s.param.data_ptr<float>(),
                           s.grad.data_ptr<float>(), slot.exp_avg.data_ptr<float>(), slot.exp_avg_sq.data_ptr<float>(),
                           cpu_optim::low_precision_data(lp), cpu_optim::low_precision_of(lp), s.param.numel());
}

ShardOptimizerState FusedCpuAdam::get_state(size_t index) const {
  ShardOptimizerState st;
  if (index >= slots_.size()) return st;
  st.updates = slots_[index].updates;
  if (slots_[index].exp_avg.defined()) st.tensors = {slots_[index].exp_avg, slots_[index].exp_avg_sq};
  return st;
}

void FusedCpuAdam::set_state(size_t index, const ShardOptimizerState& st) {
  if (slots_.size() <= index) slots_.resize(index + 1);
  slots_[index].updates = st.updates;
  slots_[index].exp_avg = st.tensors.empty() ? at::Tensor() : st.tensors[0];
  slots_[index].exp_avg_sq = st.tensors.empty() ? at::Tensor() : st.tensors[1];
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
         ", simd=" + to_string(path()) + ")";
}

}  // namespace zeroshard
