// SPDX-License-Identifier: Apache-2.0
// SGD, Adam and AdamW over flat shards, with the ATen op sequence of LibTorch 1.13's
// torch::optim::SGD/Adam/AdamW (torch/csrc/api/src/optim/{sgd,adam,adamw}.cpp), so that a sharded
// run matches an unsharded torch::optim run element by element (bitwise on CPU in our tests):
// every op is element-wise, so splitting a parameter across shards changes nothing.
//
// Layout of this file: shared shard bookkeeping (ShardedOptimizerBase), option checks, the three
// algorithms, the factories. CUDA shards under LibTorch 2.x take LibTorch's fused Adam/AdamW
// (Adam::update_all); SGD runs its element-wise ops on whatever device the shards are.

#include "zeroshard/optim/optimizer.h"

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

std::vector<at::Tensor> ShardOptimizerState::materialize() const {
  if (!read) return tensors;
  std::vector<at::Tensor> out = read();
  for (size_t k = 0; k < out.size(); ++k) {
    ZS_REQUIRE(out[k].numel() == read_numel, CheckpointError, "optimizer state tensor ", k, " read back with ",
               out[k].numel(), " elements, expected ", read_numel);
  }
  return out;
}

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

  // Host state aliases the live tensors; state on a GPU comes lazily (one position copied to the
  // host at a time as a checkpoint writes it).
  std::vector<ShardOptimizerState> export_state() const final {
    if (pending_) return *pending_;
    std::vector<ShardOptimizerState> out;
    for (const ShardSlot& slot : slots_) {
      ShardOptimizerState st;
      st.updates = slot.updates;
      const bool on_host = slot.state.empty() || slot.state[0].is_cpu();
      if (on_host) {
        for (const at::Tensor& t : slot.state) st.tensors.push_back(t.contiguous());
      } else {
        st.read_numel = slot.state[0].numel();
        st.read = [state = slot.state] {
          std::vector<at::Tensor> host;
          for (const at::Tensor& t : state) host.push_back(t.to(at::kCPU).contiguous());
          return host;
        };
      }
      out.push_back(std::move(st));
    }
    return out;
  }

  void import_state(std::vector<ShardOptimizerState> state, int64_t steps) final {
    const size_t want = state_names().size();
    for (size_t i = 0; i < state.size(); ++i) {
      ZS_REQUIRE(state[i].read || state[i].tensors.empty() || state[i].tensors.size() == want, UsageError,
                 "optimizer import_state: position ", i, " has ", state[i].tensors.size(),
                 " state tensors, ", describe(), " keeps ", want);
    }
    pending_ = std::make_unique<std::vector<ShardOptimizerState>>(std::move(state));
    steps_ = steps;
  }

 protected:
  using ShardedOptimizer::ShardedOptimizer;

  // Updates one shard in place, run by run (shard_runs). `slot.updates` already counts this
  // update (1 on the first).
  virtual void update(ShardSlot& slot, const ParamShard& shard) = 0;
  // Updates the shards at `indices` (in order; their slots already count this update). The
  // default calls update() for each; an optimizer with a multi-tensor kernel overrides it.
  virtual void update_all(const std::vector<size_t>& indices, const std::vector<ParamShard>& shards) {
    for (size_t i : indices) update(slots_[i], shards[i]);
  }
  // The weight decay of elements outside every parameter group.
  virtual double default_weight_decay() const = 0;
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
    for (size_t i = 0; i < shards.size(); ++i) {
      check_shard(shards[i], i);
      (void)shard_runs(shards[i], default_weight_decay());  // throws on malformed groups
    }
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
      ZS_REQUIRE(!st.has_tensors() || st.numel() == shards[i].param.numel(), UsageError,
                 "optimizer: imported state of shard ", i, " ('", shards[i].name, "') has ", st.numel(),
                 " elements, the shard has ", shards[i].param.numel());
    }
    for (size_t i = 0; i < shards.size(); ++i) {
      ShardOptimizerState& st = (*pending_)[i];
      slots_[i].updates = st.updates;
      // The fused kernel's step count on the device would still count this optimizer's own
      // updates (an optimizer that stepped before the load): the next fused step derives it
      // again from the restored `updates`.
      slots_[i].device_step = at::Tensor();
      slots_[i].state.clear();
      for (const at::Tensor& t : st.materialize()) {
        slots_[i].state.push_back(t.to(shards[i].param.device(), at::kFloat).contiguous().clone());
      }
      st = ShardOptimizerState();  // one position's host copy at a time
    }
    pending_.reset();
  }

  std::vector<ShardSlot> slots_;
  bool layout_recorded_ = false;
  int64_t steps_ = 0;
  std::unique_ptr<std::vector<ShardOptimizerState>> pending_;
};

// ---- option checks ----

// Throws a UsageError naming `prefix + field`, the value and the allowed range.
class OptionChecker {
 public:
  explicit OptionChecker(std::string prefix) : prefix_(std::move(prefix)) {}

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
  [[noreturn]] void fail(const std::string& message) const { ZS_THROW(UsageError, message); }

  std::string prefix_;
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
  double default_weight_decay() const override { return o_.weight_decay; }

  void update(ShardSlot& slot, const ParamShard& shard) override {
    // torch clones d_p into a new buffer at the first update; here each run copies its part.
    const bool first = o_.momentum != 0 && slot.state.empty();
    if (first) slot.state.push_back(at::empty_like(shard.param, at::MemoryFormat::Contiguous));
    for (const ShardGroupRange& r : shard_runs(shard, o_.weight_decay)) {
      const int64_t n = r.end - r.begin;
      at::Tensor p = shard.param.narrow(0, r.begin, n);
      at::Tensor d_p = shard.grad.narrow(0, r.begin, n);
      if (r.weight_decay != 0) d_p = d_p.add(p, r.weight_decay);
      if (o_.momentum != 0) {
        at::Tensor buf = slot.state[0].narrow(0, r.begin, n);
        if (first) {
          buf.copy_(d_p);
        } else {
          buf.mul_(o_.momentum).add_(d_p, 1 - o_.dampening);
        }
        d_p = o_.nesterov ? d_p.add(buf, o_.momentum) : buf;
      }
      p.add_(d_p, -1 * (lr_ * r.lr_scale));
    }
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

  double default_weight_decay() const override { return o_.weight_decay; }

  void update(ShardSlot& slot, const ParamShard& shard) override {
    init_state(slot, shard.param);
    const double t = static_cast<double>(slot.updates);
    const double bias_correction1 = 1 - std::pow(o_.beta1, t);
    const double bias_correction2 = 1 - std::pow(o_.beta2, t);
    for (const ShardGroupRange& r : shard_runs(shard, o_.weight_decay)) {
      const int64_t n = r.end - r.begin;
      const double lr = lr_ * r.lr_scale;
      at::Tensor p = shard.param.narrow(0, r.begin, n);
      at::Tensor exp_avg = slot.state[kExpAvg].narrow(0, r.begin, n);
      at::Tensor exp_avg_sq = slot.state[kExpAvgSq].narrow(0, r.begin, n);
      if (decoupled_ && r.weight_decay != 0) p.mul_(1 - lr * r.weight_decay);

      at::Tensor grad = shard.grad.narrow(0, r.begin, n);
      if (!decoupled_ && r.weight_decay != 0) grad = grad.add(p, r.weight_decay);
      exp_avg.mul_(o_.beta1).add_(grad, 1 - o_.beta1);
      exp_avg_sq.mul_(o_.beta2).addcmul_(grad, grad, 1 - o_.beta2);

      at::Tensor denom;
      if (o_.amsgrad) {
        at::Tensor max_exp_avg_sq = slot.state[kMaxExpAvgSq].narrow(0, r.begin, n);
        at::max_out(max_exp_avg_sq, exp_avg_sq, max_exp_avg_sq);
        denom = max_exp_avg_sq.sqrt().div(std::sqrt(bias_correction2)).add_(o_.eps);
      } else {
        denom = exp_avg_sq.sqrt().div(std::sqrt(bias_correction2)).add_(o_.eps);
      }
      const double step_size = lr / bias_correction1;
      p.addcdiv_(exp_avg, denom, -step_size);
    }
  }

#if ZS_HAVE_FUSED_ADAM
  // Shards on one CUDA device: LibTorch's fused Adam/AdamW, one multi-tensor launch for all of
  // them instead of about eight kernels per shard, with the step counts kept on the device (no
  // host sync). Its arithmetic is update()'s in fp32 registers, so results differ from update()
  // by rounding only; CPU shards keep update(), which matches torch::optim bit for bit.
  void update_all(const std::vector<size_t>& indices, const std::vector<ParamShard>& shards) override {
    if (!on_one_cuda_device(indices, shards)) return ShardedOptimizerBase::update_all(indices, shards);
    // One launch per distinct (weight decay, lr scale): each takes its runs of every shard as
    // views. A shard's step counter is advanced once and shared by all its runs.
    struct Launch {
      double weight_decay = 0, lr_scale = 1;
      std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps;
    };
    std::vector<Launch> launches;
    std::vector<at::Tensor> shard_steps;
    for (size_t i : indices) {
      ShardSlot& s = slot(i);
      const ParamShard& shard = shards[i];
      init_state(s, shard.param);
      if (!s.device_step.defined()) {
        // The updates before this one (update() may have run them, e.g. on another device).
        s.device_step = at::full({}, static_cast<double>(s.updates - 1), shard.param.options());
      }
      shard_steps.push_back(s.device_step);
      for (const ShardGroupRange& r : shard_runs(shard, o_.weight_decay)) {
        Launch* l = nullptr;
        for (Launch& c : launches) {
          if (c.weight_decay == r.weight_decay && c.lr_scale == r.lr_scale) l = &c;
        }
        if (l == nullptr) {
          launches.emplace_back();
          l = &launches.back();
          l->weight_decay = r.weight_decay;
          l->lr_scale = r.lr_scale;
        }
        const int64_t n = r.end - r.begin;
        l->params.push_back(shard.param.narrow(0, r.begin, n));
        l->grads.push_back(shard.grad.narrow(0, r.begin, n));
        l->exp_avgs.push_back(s.state[kExpAvg].narrow(0, r.begin, n));
        l->exp_avg_sqs.push_back(s.state[kExpAvgSq].narrow(0, r.begin, n));
        if (o_.amsgrad) l->max_exp_avg_sqs.push_back(s.state[kMaxExpAvgSq].narrow(0, r.begin, n));
        l->steps.push_back(s.device_step);
      }
    }
    at::_foreach_add_(shard_steps, at::Scalar(1.0));
    for (Launch& l : launches) {
      const double lr = lr_ * l.lr_scale;
      if (decoupled_) {
        at::_fused_adamw_(l.params, l.grads, l.exp_avgs, l.exp_avg_sqs, l.max_exp_avg_sqs, l.steps, lr, o_.beta1,
                          o_.beta2, l.weight_decay, o_.eps, o_.amsgrad, /*maximize=*/false);
      } else {
        at::_fused_adam_(l.params, l.grads, l.exp_avgs, l.exp_avg_sqs, l.max_exp_avg_sqs, l.steps, lr, o_.beta1,
                         o_.beta2, l.weight_decay, o_.eps, o_.amsgrad, /*maximize=*/false);
      }
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

void ShardedOptimizer::step(std::vector<ParamShard>& shards, ShardPager& pager) {
  (void)shards;
  (void)pager;
  ZS_THROW(UsageError, "optimizer ", describe(),
           " keeps its state on the device and cannot step offloaded parameter or gradient shards: step them "
           "with an offloaded optimizer (make_engine_optimizer with OffloadOptions.target = CPU or NVME)");
}

namespace {
[[noreturn]] void no_shard_steps(const ShardedOptimizer& o) {
  ZS_THROW(UsageError, "optimizer ", o.describe(), " cannot step shards during backward: only an optimizer with its "
           "state in host memory does (offload.optimizer = CPU, make_engine_optimizer with OffloadOptions.target = CPU)");
}
}  // namespace

void ShardedOptimizer::begin_shard_step(const std::vector<ParamShard>&) { no_shard_steps(*this); }
void ShardedOptimizer::step_shard(size_t, const ParamShard&) { no_shard_steps(*this); }
void ShardedOptimizer::finish_shard_step(const std::vector<ParamShard>&) { no_shard_steps(*this); }
size_t ShardedOptimizer::abandon_shard_step(const std::vector<ParamShard>&) { no_shard_steps(*this); }

std::vector<ShardGroupRange> shard_runs(const ParamShard& shard, double default_weight_decay, int64_t numel) {
  if (numel < 0) numel = shard.param.defined() ? shard.param.numel() : 0;
  std::vector<ShardGroupRange> runs;
  auto append = [&](ShardGroupRange r) {
    if (r.end == r.begin) return;
    if (!runs.empty() && runs.back().end == r.begin && runs.back().weight_decay == r.weight_decay &&
        runs.back().lr_scale == r.lr_scale) {
      runs.back().end = r.end;
    } else {
      runs.push_back(r);
    }
  };
  int64_t at = 0;
  for (size_t k = 0; k < shard.groups.size(); ++k) {
    const ShardGroupRange& g = shard.groups[k];
    ZS_REQUIRE(g.begin >= at && g.end >= g.begin && g.end <= numel, UsageError, "optimizer: group range ", k,
               " [", g.begin, ", ", g.end, ") of shard '", shard.name, "' (", numel,
               " elements) is out of order, overlaps the previous one or leaves the shard");
    ZS_REQUIRE(std::isfinite(g.weight_decay) && g.weight_decay >= 0 && std::isfinite(g.lr_scale) &&
                   g.lr_scale >= 0,
               UsageError, "optimizer: group range ", k, " of shard '", shard.name,
               "' has weight_decay = ", format_double(g.weight_decay), ", lr_scale = ", format_double(g.lr_scale),
               "; both must be finite and >= 0");
    append({at, g.begin, default_weight_decay, 1.0});
    append(g);
    at = g.end;
  }
  append({at, numel, default_weight_decay, 1.0});
  return runs;
}

std::unique_ptr<ShardedOptimizer> make_sgd(const SgdOptions& options) {
  check_sgd(options, OptionChecker("SgdOptions."));
  return std::make_unique<Sgd>(options);
}

std::unique_ptr<ShardedOptimizer> make_adam(const AdamOptions& options) {
  return make_adam_checked(options, false, OptionChecker("AdamOptions."));
}

std::unique_ptr<ShardedOptimizer> make_adamw(const AdamOptions& options) {
  return make_adam_checked(options, true, OptionChecker("AdamOptions."));
}

const char* to_string(OptimizerOptions::Type t) {
  switch (t) {
    case OptimizerOptions::Type::kAdam: return "ADAM";
    case OptimizerOptions::Type::kAdamW: return "ADAMW";
    case OptimizerOptions::Type::kSgd: return "SGD";
  }
  return "unknown optimizer type";
}

SgdOptions sgd_options(const OptimizerOptions& options) {
  ZS_REQUIRE(options.type == OptimizerOptions::Type::kSgd, UsageError, "OptimizerOptions.type = ",
             to_string(options.type), " is not SGD");
  SgdOptions o;
  o.lr = options.lr;
  o.momentum = options.momentum;
  o.nesterov = options.nesterov;
  o.weight_decay = options.weight_decay;
  return o;
}

AdamOptions adam_options(const OptimizerOptions& options) {
  ZS_REQUIRE(options.type != OptimizerOptions::Type::kSgd, UsageError, "OptimizerOptions.type = SGD is not ADAM or ADAMW");
  AdamOptions o;
  o.lr = options.lr;
  o.beta1 = options.beta1;
  o.beta2 = options.beta2;
  o.eps = options.eps;
  o.weight_decay = options.weight_decay;
  return o;
}

// SGD takes lr, momentum, nesterov, weight_decay (dampening 0); ADAM/ADAMW take lr, beta1, beta2,
// eps, weight_decay (amsgrad off). momentum/nesterov with an Adam type cannot be honoured and are
// refused rather than ignored.
std::unique_ptr<ShardedOptimizer> make_optimizer(const OptimizerOptions& options) {
  const OptionChecker c("OptimizerOptions.");
  if (options.type == OptimizerOptions::Type::kSgd) {
    const SgdOptions o = sgd_options(options);
    check_sgd(o, c);
    return std::make_unique<Sgd>(o);
  }
  c.require(options.momentum == 0 && !options.nesterov,
            "momentum = " + format_double(options.momentum) + " / nesterov = " + (options.nesterov ? "true" : "false") +
                " apply only to type SGD, but type = " + to_string(options.type));
  return make_adam_checked(adam_options(options), options.type == OptimizerOptions::Type::kAdamW, c);
}

}  // namespace zeroshard
