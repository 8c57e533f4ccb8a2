// SPDX-License-Identifier: Apache-2.0
// FusedCpuSgd: option checks (make_sgd's ranges), the constants as torch::optim::SGD 1.13 casts
// them, and the choice of kernel (shard checks and tiling: cpu_optimizer.cpp, cpu_simd.cpp).

#include "zeroshard/offload/cpu_sgd.h"

#include <ATen/ops/empty_like.h>

#include <algorithm>
#include <cmath>

#include "cpu_common.h"
#include "sgd_update.h"
#include "zeroshard/base/error.h"
#include "zeroshard/base/format.h"

namespace zeroshard {


namespace {

void check_options(const SgdOptions& o) {
  auto range = [](const char* field, double v, double lo, bool lo_open, double hi, bool hi_open) {
    cpu_optim::check_range("SgdOptions", field, v, lo, lo_open, hi, hi_open);
  };
  const double inf = HUGE_VAL;
  range("lr", o.lr, 0, false, inf, false);
  range("momentum", o.momentum, 0, false, inf, false);
  range("dampening", o.dampening, 0, false, 1, false);
  range("weight_decay", o.weight_decay, 0, false, inf, false);
  ZS_REQUIRE(!o.nesterov || (o.momentum > 0 && o.dampening == 0), UsageError,
             "SgdOptions.nesterov = true needs momentum > 0 and dampening = 0; got momentum = ",
             format_double(o.momentum), ", dampening = ", format_double(o.dampening));
}

cpu_optim::SgdFn kernel_for(SimdPath path) {
  switch (path) {
    case SimdPath::kAvx512: return cpu_optim::sgd_avx512;
    case SimdPath::kAvx2: return cpu_optim::sgd_avx2;
    default: return cpu_optim::sgd_scalar;
  }
}

}  // namespace

namespace detail {

void sgd_update_runs(SimdPath path, const SgdOptions& o, const std::vector<ShardGroupRange>& runs, double lr,
                     bool first, int64_t offset, float* p, const float* g, float* buf, uint16_t* lp,
                     cpu_optim::LowPrecision lp_type, int64_t n, float* p_out, float* buf_out) {
  const cpu_optim::SgdFn kernel = kernel_for(path);
  for (const ShardGroupRange& r : runs) {
    const int64_t lo = std::max(r.begin, offset);
    const int64_t hi = std::min(r.end, offset + n);
    if (lo >= hi) continue;
    const int64_t at = lo - offset;
    cpu_optim::SgdArgs a{};
    a.p = p + at;
    a.p_out = (p_out != nullptr ? p_out : p) + at;
    a.g = g + at;
    a.lp = lp == nullptr ? nullptr : lp + at;
    a.lp_type = lp_type;
    // As torch::optim::SGD 1.13: the Scalar arguments (double) cast to float by the tensor ops.
    a.l2 = r.weight_decay != 0;
    a.weight_decay = static_cast<float>(r.weight_decay);
    a.neg_lr = static_cast<float>(-1 * (lr * r.lr_scale));
    if (buf != nullptr) {
      a.first = first;
      a.buf = buf + at;
      a.buf_out = (buf_out != nullptr ? buf_out : buf) + at;
      a.momentum = static_cast<float>(o.momentum);
      a.one_minus_dampening = static_cast<float>(1 - o.dampening);
      a.nesterov = o.nesterov;
    }
    cpu_optim::run_tiles(hi - lo, [&](int64_t begin, int64_t end) { kernel(a, begin, end); });
  }
}

}  // namespace detail

FusedCpuSgd::FusedCpuSgd(const SgdOptions& options)
    : FusedCpuOptimizer("FusedCpuSgd", options.lr), o_(options) {
  check_options(options);
}

FusedCpuSgd::~FusedCpuSgd() = default;

void FusedCpuSgd::update(size_t index, const ParamShard& s, const at::Tensor& lp) {
  at::Tensor* buf = nullptr;
  bool first = false;
  if (o_.momentum != 0) {
    if (momentum_.size() <= index) momentum_.resize(index + 1);
    buf = &momentum_[index];
    // torch clones d_p at the first update; the kernel writes every element of it (first = true).
    first = !buf->defined();
    if (first) *buf = at::empty_like(s.param, at::MemoryFormat::Contiguous);
  }
  detail::sgd_update_runs(path(), o_, shard_runs(s, o_.weight_decay), lr_, first, 0, s.param.data_ptr<float>(),
                          s.grad.data_ptr<float>(), buf == nullptr ? nullptr : buf->data_ptr<float>(),
                          cpu_optim::low_precision_data(lp), cpu_optim::low_precision_of(lp), s.param.numel());
}

// SGD counts no updates: a position's first update is the one that finds no momentum buffer.
ShardOptimizerState FusedCpuSgd::get_state(size_t index) const {
  ShardOptimizerState st;
  if (index < momentum_.size() && momentum_[index].defined()) st.tensors = {momentum_[index]};
  return st;
}

void FusedCpuSgd::set_state(size_t index, const ShardOptimizerState& st) {
  if (momentum_.size() <= index) momentum_.resize(index + 1);
  momentum_[index] = st.tensors.empty() ? at::Tensor() : st.tensors[0];
}

int64_t FusedCpuSgd::state_bytes() const {
  int64_t bytes = 0;
  for (const at::Tensor& b : momentum_) {
    if (b.defined()) bytes += static_cast<int64_t>(b.nbytes());
  }
  return bytes;
}

std::string FusedCpuSgd::describe() const {
  return "FusedCpuSgd(lr=" + format_double(lr_) + ", momentum=" + format_double(o_.momentum) +
         ", dampening=" + format_double(o_.dampening) +
         ", weight_decay=" + format_double(o_.weight_decay) +
         ", nesterov=" + (o_.nesterov ? "true" : "false") + ", simd=" + to_string(path()) + ")";
}

}  // namespace zeroshard
