// SGD, Adam and AdamW over flat shards, with the ATen op sequence of LibTorch 1.13's
// torch::optim::SGD/Adam/AdamW (torch/csrc/api/src/optim/{sgd,adam,adamw}.cpp), so that a sharded
// run matches an unsharded torch::optim run element by element (bitwise on CPU in our tests):
// every op is element-wise, so splitting a parameter across shards changes nothing.
//
// Layout of this file: shared shard bookkeeping (ShardedOptimizerBase), option checks, the three
// algorithms, the factories. CUDA shards under LibTorch 2.x take LibTorch's fused Adam/AdamW
// (Adam::update_all); SGD runs its element-wise ops on whatever device the shards are.

#include "zeroshard/sharding/optimizer.h"
#include "zeroshard/core/config.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/max.h>
#include <ATen/ops/zeros_like.h>

// LibTorch 2.x has fused multi-tensor Adam/AdamW kernels (used for CUDA shards); 1.13 has not.
#if __has_include(<ATen/ops/_fused_adamw.h>)
#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_fused_adam.h>
#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/full.h>
#define ZS_HAVE_FUSED_ADAM 1
#else
#define ZS_HAVE_FUSED_ADAM 0
#endif

#include <cmath>
#include <memory>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <utility>

#include "zeroshard/base/format.h"
#include "zeroshard/base/error.h"

namespace zeroshard {
namespace {


// ---- shard bookkeeping shared by all optimizers ----

// Per position in the shard list: the layout seen at the first step, the number of updates this
// position received (torch::optim counts steps per parameter: a skipped shard does not advance),
// and the optimizer's state tensors (created lazily at the first update, as torch does).
struct ShardSlot {
  int64_t numel = 0;
  at::ScalarType dtype = at::kFloat;
  int64_t updates = 0;
  std::vector<at::Tensor> state;
  at::Tensor device_step;  // fused CUDA Adam only: `updates` as a float on the device
};

// Validates the whole shard list before touching anything (a throwing step() changes nothing),
// then calls update() for every shard that has a gradient.
class ShardedOptimizerBase : public ShardedOptimizer {
 public:
  void step(const std::vector<ParamShard>& shards) final {
    check_shards(shards);
    apply_pending(shards);
    at::NoGradGuard no_grad;  // params may be autograd leaves; updates are not differentiated
    std::vector<size_t> with_grad;
    for (size_t i = 0; i < shards.size(); ++i) {
      if (!shards[i].grad.defined()) continue;
      ++slots_[i].updates;
      with_grad.push_back(i);
    }
    update_all(with_grad, shards);
    ++steps_;
  }

  int64_t state_bytes() const final {
    int64_t bytes = 0;
    for (const ShardSlot& slot : slots_) {
      for (const at::Tensor& t : slot.state) {
        if (t.defined()) bytes += static_cast<int64_t>(t.nbytes());
      }
    }
    return bytes;
  }

  int64_t steps() const final { return steps_; }

  std::vector<ShardOptimizerState> export_state() const final {
    if (pending_) return *pending_;
    std::vector<ShardOptimizerState> out;
    for (const ShardSlot& slot : slots_) {
      ShardOptimizerState st;
      st.updates = slot.updates;
      for (const at::Tensor& t : slot.state) st.tensors.push_back(t.to(at::kCPU).contiguous());
      out.push_back(std::move(st));
    }
    return out;
  }

  void import_state(std::vector<ShardOptimizerState> state, int64_t steps) final {
    const size_t want = state_names().size();
    for (size_t i = 0; i < state.size(); ++i) {
      ZS_REQUIRE(state[i].tensors.empty() || state[i].tensors.size() == want, UsageError,
                 "optimizer import_state: position ", i, " has ", state[i].tensors.size(),
                 " state tensors, ", describe(), " keeps ", want);
    }
    pending_ = std::make_unique<std::vector<ShardOptimizerState>>(std::move(state));
    steps_ = steps;
  }

 protected:
  using ShardedOptimizer::ShardedOptimizer;

  // Updates one shard in place. `slot.updates` already counts this update (1 on the first).
  virtual void update(ShardSlot& slot, const at::Tensor& param, const at::Tensor& grad) = 0;
  // Updates the shards at `indices` (in order; their slots already count this update). The
  // default calls update() for each; an optimizer with a multi-tensor kernel overrides it.
  virtual void update_all(const std::vector<size_t>& indices, const std::vector<ParamShard>& shards) {
    for (size_t i : indices) update(slots_[i], shards[i].param, shards[i].grad);
  }
  ShardSlot& slot(size_t index) { return slots_[index]; }

 private:
  static void check_shard(const ParamShard& s, size_t index) {
    ZS_REQUIRE(s.param.defined() && s.param.scalar_type() == at::kFloat && s.param.is_contiguous(),
               UsageError, "optimizer step: shard ", index, " ('", s.name,
               "') must be a defined, contiguous fp32 tensor, got ",
               s.param.defined() ? std::string(c10::toString(s.param.scalar_type())) : "undefined",
               s.param.defined() && !s.param.is_contiguous() ? " (non-contiguous)" : "");
    if (!s.grad.defined()) return;
    ZS_REQUIRE(s.grad.scalar_type() == s.param.scalar_type() && s.grad.sizes() == s.param.sizes() &&
                   s.grad.device() == s.param.device(),
               UsageError, "optimizer step: the grad of shard ", index, " ('", s.name, "') is ",
               c10::toString(s.grad.scalar_type()), s.grad.sizes(), " on ", s.grad.device(),
               ", its param is ", c10::toString(s.param.scalar_type()), s.param.sizes(), " on ",
               s.param.device(), "; they must match");
  }

  void check_shards(const std::vector<ParamShard>& shards) {
    for (size_t i = 0; i < shards.size(); ++i) check_shard(shards[i], i);
    if (!layout_recorded_) {
      slots_.resize(shards.size());
      for (size_t i = 0; i < shards.size(); ++i) {
        slots_[i].numel = shards[i].param.numel();
        slots_[i].dtype = shards[i].param.scalar_type();
      }
      layout_recorded_ = true;
      return;
    }
    ZS_REQUIRE(shards.size() == slots_.size(), UsageError, "optimizer step ", steps_ + 1, " got ",
               shards.size(), " shards, the first step had ", slots_.size(),
               "; pass the same shard list, in the same order, every step");
    for (size_t i = 0; i < shards.size(); ++i) {
      const at::Tensor& p = shards[i].param;
      ZS_REQUIRE(p.numel() == slots_[i].numel && p.scalar_type() == slots_[i].dtype, UsageError,
                 "optimizer step ", steps_ + 1, ": shard ", i, " ('", shards[i].name,
                 "') changed: expected ", slots_[i].numel, " elements of ",
                 c10::toString(slots_[i].dtype), " (as at the first step), got ", p.numel(),
                 " elements of ", c10::toString(p.scalar_type()));
    }
  }

  // Imported state replaces the slots once the shards are known (sizes checked, device matched).
  void apply_pending(const std::vector<ParamShard>& shards) {
    if (!pending_) return;
    ZS_REQUIRE(pending_->size() == shards.size(), UsageError, "optimizer: the imported state has ",
               pending_->size(), " shard positions, the step got ", shards.size(), " shards");
    for (size_t i = 0; i < shards.size(); ++i) {
      const ShardOptimizerState& st = (*pending_)[i];
      for (const at::Tensor& t : st.tensors) {
        ZS_REQUIRE(t.numel() == shards[i].param.numel(), UsageError, "optimizer: imported state of shard ", i,
                   " ('", shards[i].name, "') has ", t.numel(), " elements, the shard has ",
                   shards[i].param.numel());
      }
    }
    for (size_t i = 0; i < shards.size(); ++i) {
      ShardOptimizerState& st = (*pending_)[i];
      slots_[i].updates = st.updates;
      // The fused kernel's step count on the device would still count this optimizer's own
      // updates (an optimizer that stepped before the load): the next fused step derives it
      // again from the restored `updates`.
      slots_[i].device_step = at::Tensor();
      slots_[i].state.clear();
      for (at::Tensor& t : st.tensors) {
        slots_[i].state.push_back(t.to(shards[i].param.device(), at::kFloat).contiguous().clone());
      }
    }
    pending_.reset();
  }

  std::vector<ShardSlot> slots_;
  bool layout_recorded_ = false;
  int64_t steps_ = 0;
  std::unique_ptr<std::vector<ShardOptimizerState>> pending_;
};

// ---- option checks ----

// Throws a UsageError (factory options) or ConfigError (config section) naming
// `prefix + field`, the value and the allowed range.
class OptionChecker {
 public:
  OptionChecker(std::string prefix, bool config_error)
      : prefix_(std::move(prefix)), config_error_(config_error) {}

  // Requires `v` finite and within [lo, hi] (an open end excludes the bound; hi = inf: no bound).
  void range(const char* field, double v, double lo, bool lo_open, double hi, bool hi_open) const {
    bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
    if (ok) return;
    std::string allowed = std::string(lo_open ? "(" : "[") + format_double(lo) + ", " +
                          (std::isinf(hi) ? "inf)" : format_double(hi) + (hi_open ? ")" : "]"));
    fail(prefix_ + field + " = " + format_double(v) + " is out of range; allowed: " + allowed);
  }

  // Requires `cond`; `message` is appended to the prefix (so it should start with a field name).
  void require(bool cond, const std::string& message) const {
    if (!cond) fail(prefix_ + message);
  }

  const std::string& prefix() const { return prefix_; }

 private:
  [[noreturn]] void fail(const std::string& message) const {
    if (config_error_) ZS_THROW(ConfigError, message);
    ZS_THROW(UsageError, message);
  }

  std::string prefix_;
  bool config_error_;
};

constexpr double kInf = HUGE_VAL;

void check_sgd(const SgdOptions& o, const OptionChecker& c) {
  c.range("lr", o.lr, 0, false, kInf, false);
  c.range("momentum", o.momentum, 0, false, kInf, false);
  c.range("dampening", o.dampening, 0, false, 1, false);
  c.range("weight_decay", o.weight_decay, 0, false, kInf, false);
  c.require(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
            "nesterov = true needs momentum > 0 and dampening = 0; got momentum = " +
                format_double(o.momentum) + ", dampening = " + format_double(o.dampening));
}

// eps must be > 0 (torch allows 0): zero-padding elements have zero moments, and with eps = 0
// their update would be 0/0 = NaN instead of keeping them at exactly 0.
void check_adam(const AdamOptions& o, const OptionChecker& c) {
  c.range("lr", o.lr, 0, false, kInf, false);
  c.range("beta1", o.beta1, 0, false, 1, true);
  c.range("beta2", o.beta2, 0, false, 1, true);
  c.range("eps", o.eps, 0, true, kInf, false);
  c.range("weight_decay", o.weight_decay, 0, false, kInf, false);
}

// ---- SGD ----

// torch::optim::SGD 1.13: d_p = grad (+ wd * p); with momentum, buf = clone(d_p) at the first
// update, else buf = buf * momentum + (1 - dampening) * d_p; d_p = nesterov ? d_p + momentum * buf
// : buf; p -= lr * d_p.
class Sgd final : public ShardedOptimizerBase {
 public:
  explicit Sgd(const SgdOptions& o) : ShardedOptimizerBase(o.lr), o_(o) {}

  std::vector<std::string> state_names() const override {
    if (o_.momentum == 0) return {};
    return {"momentum_buffer"};
  }

  std::string describe() const override {
    return "SGD(lr=" + format_double(lr_) + ", momentum=" + format_double(o_.momentum) +
           ", dampening=" + format_double(o_.dampening) +
           ", weight_decay=" + format_double(o_.weight_decay) +
           ", nesterov=" + (o_.nesterov ? "true" : "false") + ")";
  }

 private:
  void update(ShardSlot& slot, const at::Tensor& p, const at::Tensor& grad) override {
    at::Tensor d_p = grad;
    if (o_.weight_decay != 0) d_p = d_p.add(p, o_.weight_decay);
    if (o_.momentum != 0) {
      if (slot.state.empty()) {
        slot.state.push_back(d_p.clone());
      } else {
        slot.state[0].mul_(o_.momentum).add_(d_p, 1 - o_.dampening);
      }
      const at::Tensor& buf = slot.state[0];
      d_p = o_.nesterov ? d_p.add(buf, o_.momentum) : buf;
    }
    p.add_(d_p, -1 * lr_);
  }

  SgdOptions o_;
};

// ---- Adam / AdamW ----

// torch::optim::Adam / AdamW 1.13. AdamW first scales p by (1 - lr * wd); Adam adds wd * p to
// the gradient. Then, with t = this shard's update count:
//   m = m * beta1 + (1 - beta1) * g;  v = v * beta2 + (1 - beta2) * g * g;  (amsgrad: vmax =
//   max(vmax, v), used for v);  denom = sqrt(v) / sqrt(1 - beta2^t) + eps;
//   p -= lr / (1 - beta1^t) * m / denom.
class Adam final : public ShardedOptimizerBase {
 public:
  Adam(const AdamOptions& o, bool decoupled)
      : ShardedOptimizerBase(o.lr), o_(o), decoupled_(decoupled) {}

  std::vector<std::string> state_names() const override {
    if (o_.amsgrad) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
    return {"exp_avg", "exp_avg_sq"};
  }

  std::string describe() const override {
    std::string s = std::string(decoupled_ ? "AdamW" : "Adam") + "(lr=" + format_double(lr_) +
                    ", betas=(" + format_double(o_.beta1) + ", " + format_double(o_.beta2) +
                    "), eps=" + format_double(o_.eps) +
                    ", weight_decay=" + format_double(o_.weight_decay);
    if (o_.amsgrad) s += ", amsgrad=true";
    return s + ")";
  }

 private:
  enum { kExpAvg = 0, kExpAvgSq = 1, kMaxExpAvgSq = 2 };

  void init_state(ShardSlot& slot, const at::Tensor& p) const {
    if (!slot.state.empty()) return;
    for (int i = 0; i < (o_.amsgrad ? 3 : 2); ++i) {
      slot.state.push_back(at::zeros_like(p, at::MemoryFormat::Preserve));
    }
  }

  void update(ShardSlot& slot, const at::Tensor& p, const at::Tensor& g) override {
    if (decoupled_ && o_.weight_decay != 0) p.mul_(1 - lr_ * o_.weight_decay);
    init_state(slot, p);
    at::Tensor& exp_avg = slot.state[kExpAvg];
    at::Tensor& exp_avg_sq = slot.state[kExpAvgSq];
    const double t = static_cast<double>(slot.updates);
    const double bias_correction1 = 1 - std::pow(o_.beta1, t);
    const double bias_correction2 = 1 - std::pow(o_.beta2, t);

    at::Tensor grad = g;
    if (!decoupled_ && o_.weight_decay != 0) grad = grad.add(p, o_.weight_decay);
    exp_avg.mul_(o_.beta1).add_(grad, 1 - o_.beta1);
    exp_avg_sq.mul_(o_.beta2).addcmul_(grad, grad, 1 - o_.beta2);

    at::Tensor denom;
    if (o_.amsgrad) {
      at::Tensor& max_exp_avg_sq = slot.state[kMaxExpAvgSq];
      at::max_out(max_exp_avg_sq, exp_avg_sq, max_exp_avg_sq);
      denom = max_exp_avg_sq.sqrt().div(std::sqrt(bias_correction2)).add_(o_.eps);
    } else {
      denom = exp_avg_sq.sqrt().div(std::sqrt(bias_correction2)).add_(o_.eps);
    }
    const double step_size = lr_ / bias_correction1;
    p.addcdiv_(exp_avg, denom, -step_size);
  }

#if ZS_HAVE_FUSED_ADAM
  // Shards on one CUDA device: LibTorch's fused Adam/AdamW, one multi-tensor launch for all of
  // them instead of about eight kernels per shard, with the step counts kept on the device (no
  // host sync). Its arithmetic is update()'s in fp32 registers, so results differ from update()
  // by rounding only; CPU shards keep update(), which matches torch::optim bit for bit.
  void update_all(const std::vector<size_t>& indices, const std::vector<ParamShard>& shards) override {
    if (!on_one_cuda_device(indices, shards)) return ShardedOptimizerBase::update_all(indices, shards);
    std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps;
    for (size_t i : indices) {
      ShardSlot& s = slot(i);
      const at::Tensor& p = shards[i].param;
      init_state(s, p);
      if (!s.device_step.defined()) {
        // The updates before this one (update() may have run them, e.g. on another device).
        s.device_step = at::full({}, static_cast<double>(s.updates - 1), p.options());
      }
      params.push_back(p);
      grads.push_back(shards[i].grad);
      exp_avgs.push_back(s.state[kExpAvg]);
      exp_avg_sqs.push_back(s.state[kExpAvgSq]);
      if (o_.amsgrad) max_exp_avg_sqs.push_back(s.state[kMaxExpAvgSq]);
      steps.push_back(s.device_step);
    }
    at::_foreach_add_(steps, at::Scalar(1.0));
    if (decoupled_) {
      at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, lr_, o_.beta1, o_.beta2,
                        o_.weight_decay, o_.eps, o_.amsgrad, /*maximize=*/false);
    } else {
      at::_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps, lr_, o_.beta1, o_.beta2,
                       o_.weight_decay, o_.eps, o_.amsgrad, /*maximize=*/false);
    }
  }

  static bool on_one_cuda_device(const std::vector<size_t>& indices, const std::vector<ParamShard>& shards) {
    if (indices.empty() || !shards[indices.front()].param.is_cuda()) return false;
    const c10::Device device = shards[indices.front()].param.device();
    for (size_t i : indices) {
      if (shards[i].param.device() != device) return false;
    }
    return true;
  }
#endif

  AdamOptions o_;
  bool decoupled_;
};

std::unique_ptr<ShardedOptimizer> make_adam_checked(const AdamOptions& o, bool decoupled,
                                                    const OptionChecker& c) {
  check_adam(o, c);
  return std::make_unique<Adam>(o, decoupled);
}

}  // namespace

std::unique_ptr<ShardedOptimizer> make_sgd(const SgdOptions& options) {
  check_sgd(options, OptionChecker("SgdOptions.", /*config_error=*/false));
  return std::make_unique<Sgd>(options);
}

std::unique_ptr<ShardedOptimizer> make_adam(const AdamOptions& options) {
  return make_adam_checked(options, false, OptionChecker("AdamOptions.", false));
}

std::unique_ptr<ShardedOptimizer> make_adamw(const AdamOptions& options) {
  return make_adam_checked(options, true, OptionChecker("AdamOptions.", false));
}

// SGD takes lr, momentum, nesterov, weight_decay (dampening 0); ADAM/ADAMW take lr, beta1, beta2,
// eps, weight_decay (amsgrad off). momentum/nesterov with an Adam type cannot be honoured and are
// refused rather than ignored.
std::unique_ptr<ShardedOptimizer> make_optimizer(const config::OptimizerConfig& cfg) {
  const OptionChecker c("optimizer.", /*config_error=*/true);
  const std::string type = config::OptimizerConfig::Type_Name(cfg.type());
  if (cfg.type() == config::OptimizerConfig::SGD) {
    SgdOptions o;
    o.lr = cfg.lr();
    o.momentum = cfg.momentum();
    o.nesterov = cfg.nesterov();
    o.weight_decay = cfg.weight_decay();
    check_sgd(o, c);
    return std::make_unique<Sgd>(o);
  }
  ZS_REQUIRE(cfg.type() == config::OptimizerConfig::ADAM ||
                 cfg.type() == config::OptimizerConfig::ADAMW,
             ConfigError, "optimizer.type = ", static_cast<int>(cfg.type()),
             " is not supported; allowed: ADAM, ADAMW, SGD");
  c.require(cfg.momentum() == 0 && !cfg.nesterov(),
            "momentum = " + format_double(cfg.momentum()) + " / optimizer.nesterov = " +
                (cfg.nesterov() ? "true" : "false") + " apply only to optimizer.type = SGD, but " +
                "optimizer.type = " + type + "; remove them or use SGD");
  AdamOptions o;
  o.lr = cfg.lr();
  o.beta1 = cfg.beta1();
  o.beta2 = cfg.beta2();
  o.eps = cfg.eps();
  o.weight_decay = cfg.weight_decay();
  return make_adam_checked(o, cfg.type() == config::OptimizerConfig::ADAMW, c);
}

}  // namespace zeroshard
