// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/estimate/estimate.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>

#include "zeroshard/base/error.h"
#include "zeroshard/base/format.h"
#include "zeroshard/comm/quantize.h"
#include "zeroshard/engine/plan.h"
#include "zeroshard/io/pinned_pool.h"

namespace zeroshard {
namespace {

using Strategy = ShardingStrategy;
using Target = OffloadTarget;

int64_t pad(int64_t numel, int n) { return (numel + n - 1) / n * n; }

// The flat parameters' element counts: the root's (if any) first, then the units'.
std::vector<int64_t> flats(const ModelShape& m) {
  std::vector<int64_t> f;
  if (m.root_params > 0) f.push_back(m.root_params);
  for (int64_t u : m.unit_params) {
    if (u > 0) f.push_back(u);
  }
  return f;
}

// Sum of the `k` largest padded unit flats (root excluded), with `bytes_per` each element.
int64_t largest_units(const ModelShape& m, int n, size_t k, std::function<int64_t(int64_t padded)> bytes) {
  std::vector<int64_t> units;
  for (int64_t u : m.unit_params) {
    if (u > 0) units.push_back(pad(u, n));
  }
  std::sort(units.rbegin(), units.rend());
  int64_t b = 0;
  for (size_t i = 0; i < k && i < units.size(); ++i) b += bytes(units[i]);
  return b;
}

ShardingPlan plan_for(const EstimateOptions& o) {
  ZS_REQUIRE(o.world_size >= 1, UsageError, "EstimateOptions.world_size = ", o.world_size, " must be at least 1");
  ZS_REQUIRE(o.ranks_per_node >= 1, UsageError, "EstimateOptions.ranks_per_node = ", o.ranks_per_node, " must be at least 1");
  // One rank: a shard group of one whatever the hybrid group size says (as the engine).
  if (o.world_size == 1) {
    ShardingPlan one = plan_sharding(o.sharding.strategy, 1, 1, 1);
    plan_secondary_groups(one, o.sharding.hpz_group_size, 1);  // ConfigError unless hpZ is off, as the engine
    return one;
  }
  const int l = std::min(o.ranks_per_node, o.world_size);
  ShardingPlan p = plan_sharding(o.sharding.strategy, o.sharding.hybrid_group_size, o.world_size, l);
  plan_secondary_groups(p, o.sharding.hpz_group_size, l);
  return p;
}

int dtype_bytes(c10::ScalarType t) { return static_cast<int>(c10::elementSize(t)); }

// The config's names: FP32, BF16, FP16.
const char* dtype_name(c10::ScalarType t) {
  return t == c10::kBFloat16 ? "BF16" : t == c10::kHalf ? "FP16" : t == c10::kFloat ? "FP32" : c10::toString(t);
}

// The highest sum of device categories over one step (after zero_grad), replaying what the engine
// does unit by unit (engine/src/engine_hooks.cpp). `base`: sharded params + optimizer state; `p`,
// `r`: bytes per element gathered (param_dtype) and reduced (reduce_dtype).
class StepReplay {
 public:
  StepReplay(const ModelShape& m, const EstimateOptions& o, const ShardingPlan& plan, bool aliased, int p, int r,
             int64_t base)
      : plan_(plan),
        aliased_(aliased),
        p_(p),
        r_(r),
        base_(base),
        n_(plan.shard_group_size),
        fwd_prefetch_(o.sharding.forward_prefetch && o.sharding.limit_all_gathers >= 2),
        bwd_prefetch_(o.sharding.backward_prefetch == BackwardPrefetch::kBackwardPre &&
                      o.sharding.limit_all_gathers >= 2),
        grads_off_(o.offload_grads != OffloadTarget::kDevice),
        // With a one-rank shard group and no cast, a unit's reduction works on its gradient buffer
        // itself (no comm buffer).
        in_place_(n_ == 1 && p == r) {
    for (int64_t x : m.unit_params) {
      if (x > 0) u_.push_back(pad(x, n_));
    }
    root_ = m.root_params > 0 ? pad(m.root_params, n_) : 0;
    all_ = root_;
    for (int64_t x : u_) all_ += x;
    units_ = static_cast<int>(u_.size());
    // offload.grads: each unit's gradient shard goes to the store as its reduction completes,
    // written behind the next unit's backward, so at most two (the one being written and the one
    // being added up: at most the two largest) are in memory instead of all finished ones.
    std::vector<int64_t> by_size = u_;
    by_size.push_back(root_);
    std::sort(by_size.rbegin(), by_size.rend());
    two_largest_ = (by_size[0] + (by_size.size() > 1 ? by_size[1] : 0)) / n_;
  }

  int64_t peak() const {
    const int64_t forward = forward_peak();
    return std::max(forward, plan_.replicas > 1 ? replicated_backward_peak() : backward_peak());
  }

 private:
  int64_t at(int i) const { return i >= 0 && i < units_ ? u_[static_cast<size_t>(i)] : 0; }
  int64_t resident(int64_t shard_elems) const { return grads_off_ ? std::min(shard_elems, two_largest_) : shard_elems; }
  int64_t kept() const { return plan_.keep_gathered && !aliased_ ? all_ * p_ : 0; }

  // Gathered elements while unit i computes (forward or backward).
  int64_t gathered(int i, bool backward) const {
    if (aliased_) return 0;
    if (plan_.keep_gathered) return all_;  // NO_SHARD: gathered once, never resharded
    if (!plan_.reshard_after_forward) {    // SHARD_GRAD_OP: units resharded after their backward
      const int last = backward ? i : std::min(i + (fwd_prefetch_ ? 1 : 0), units_ - 1);
      int64_t g = root_;
      for (int j = 0; j <= last; ++j) g += at(j);
      return g;
    }
    return root_ + at(i) + (backward ? (bwd_prefetch_ ? at(i - 1) : 0) : (fwd_prefetch_ ? at(i + 1) : 0)) +
           slices(backward ? i + 1 : i);
  }
  // hpZ: the slices the units before `end` keep from their forward until their backward is done.
  int64_t slices(int end) const {
    int64_t s = 0;
    if (plan_.secondary_group_size == 1) return 0;
    for (int j = 0; j < end && j < units_; ++j) s += at(j) / plan_.secondary_group_size;
    return s;
  }

  int64_t forward_peak() const {
    int64_t peak = base_ + gathered(-1, false) * p_;  // before the first unit: the root is gathered
    for (int i = 0; i < units_; ++i) peak = std::max(peak, base_ + gathered(i, false) * p_);
    return peak;
  }

  // Replicated reductions (HYBRID_SHARD across groups, NO_SHARD): each unit's result stays in
  // flight until the end of backward (the replica all-reduce overlaps the rest of backward), held
  // in reduce_dtype: the shard its reduce-scatter wrote, or the gradient buffer itself.
  int64_t replicated_backward_peak() const {
    auto hold = [&](int64_t x) { return in_place_ ? x * p_ : (x / n_) * r_; };
    int64_t peak = 0, held = 0, largest_hold = hold(root_);
    for (int i = units_ - 1; i >= 0; --i) {
      held += hold(at(i));
      largest_hold = std::max(largest_hold, hold(at(i)));
      const int64_t buffers = in_place_ ? root_ : root_ + at(i) + at(i + 1);
      peak = std::max(peak, base_ + gathered(i, true) * p_ + buffers * p_ + held);
    }
    held += hold(root_);
    peak = std::max(peak, base_ + gathered(-1, true) * p_ + (in_place_ ? 0 : root_ * p_) + held);
    // The end of backward turns each result into an fp32 gradient shard (a new one while the
    // result is released; an fp32 result becomes the shard, counted once as both for a moment).
    const int64_t shards = 4 * resident(all_ / n_);
    peak = std::max(peak, base_ + kept() + std::max(held, shards) + largest_hold);
    return std::max(peak, base_ + shards + kept());
  }

  // The highest moment of unit i is its post-backward: its reduce-scatter has just started
  // (gradient buffer + output) while unit i+1's finishes, whose gradient shard is counted before
  // its buffers are released; the root's gradient buffer lives through all of backward, units
  // after i+1 hold their gradient shards. The root's own post-backward comes last, after unit 0's,
  // then the end of backward finishes the root's reduce.
  int64_t backward_peak() const {
    auto sh = [&](int64_t padded) { return padded / n_; };
    auto moment = [&](int64_t gathered_elems, int64_t buffers, int64_t in_flight_shards, int64_t done_shards) {
      return base_ + gathered_elems * p_ + buffers * p_ + (in_place_ ? 0 : in_flight_shards * r_) +
             4 * resident(done_shards);
    };
    int64_t peak = 0, done = 0;  // done: gradient shards of units after i+1
    for (int i = units_ - 1; i >= 0; --i) {
      if (i + 1 < units_) done += sh(at(i + 1));
      peak = std::max(peak, moment(gathered(i, true), root_ + at(i) + at(i + 1), sh(at(i)) + sh(at(i + 1)), done));
    }
    done += sh(at(0));
    peak = std::max(peak, moment(gathered(-1, true), root_ + at(0), sh(root_) + sh(at(0)), done));
    peak = std::max(peak, moment(gathered(-1, true), root_, sh(root_), done + sh(root_)));
    // After backward every gradient shard exists and the transients are gone.
    return std::max(peak, base_ + 4 * resident(all_ / n_) + kept());
  }

  const ShardingPlan& plan_;
  const bool aliased_;
  const int p_, r_;
  const int64_t base_;
  const int n_;
  const bool fwd_prefetch_, bwd_prefetch_, grads_off_, in_place_;
  std::vector<int64_t> u_;  // padded units in forward order
  int64_t root_ = 0, all_ = 0, two_largest_ = 0;
  int units_ = 0;
};

int64_t replay_step_peak(const ModelShape& m, const EstimateOptions& o, const ShardingPlan& plan, bool aliased, int p,
                         int r, int64_t base) {
  return StepReplay(m, o, plan, aliased, p, r, base).peak();
}

}  // namespace

int64_t ModelShape::total() const {
  int64_t t = root_params;
  for (int64_t u : unit_params) t += u;
  return t;
}

int64_t ModelShape::largest_unit() const {
  int64_t m = 0;
  for (int64_t u : unit_params) m = std::max(m, u);
  return m;
}

int64_t GptShape::effective_heads() const { return heads > 0 ? heads : std::max<int64_t>(1, d_model / 64); }

ModelShape gpt_model_shape(const GptShape& g) {
  ZS_REQUIRE(g.layers >= 1 && g.d_model >= 1 && g.vocab >= 1 && g.seq >= 1, UsageError,
             "GPT shape layers=", g.layers, " d_model=", g.d_model, " vocab=", g.vocab, " seq=", g.seq,
             ": every value must be at least 1");
  ModelShape m;
  const int64_t d = g.d_model;
  m.root_params = g.vocab * d + g.seq * d + 2 * d;  // wte (tied with the output), wpe, ln_f
  // ln1 2d, qkv 3d^2 (no bias), proj d^2+d, ln2 2d, fc 4d^2+4d, out 4d^2+d
  m.unit_params.assign(static_cast<size_t>(g.layers), 12 * d * d + 10 * d);
  return m;
}

ModelShape uniform_model_shape(int64_t params, int64_t unit_params) {
  ZS_REQUIRE(params >= 1, UsageError, "parameter count ", params, " must be at least 1");
  ZS_REQUIRE(unit_params >= 0, UsageError, "unit size ", unit_params, " must not be negative");
  ModelShape m;
  if (unit_params == 0 || unit_params >= params) {
    m.unit_params.push_back(params);
    return m;
  }
  for (int64_t left = params; left > 0; left -= unit_params) m.unit_params.push_back(std::min(left, unit_params));
  return m;
}

namespace {

// Every flat parameter's shard (padded to the shard group), largest first.
std::vector<int64_t> shards_largest_first(const std::vector<int64_t>& f, int n) {
  std::vector<int64_t> shards;
  for (int64_t x : f) shards.push_back(pad(x, n) / n);
  std::sort(shards.rbegin(), shards.rend());
  return shards;
}

// Everything on NVMe on a CPU run: the parameter store's generations are the optimizer's master.
bool master_in_param_store(const EstimateOptions& o) {
  return !o.gpu && o.offload_optimizer == Target::kNvme && o.offload_params == Target::kNvme;
}

// The offloaded optimizer's NVMe pipeline (offload/src/offload_nvme.cpp): buffer_count record buffers,
// each one block of every array a record holds (the moments, and the master unless the parameter
// store holds it), and one gradient chunk, from the pinned pool's power-of-two size classes.
int64_t nvme_pipeline_bytes(const EstimateOptions& o) {
  const int64_t arrays = (master_in_param_store(o) ? 0 : 1) + o.optimizer_state_bytes / 4;
  return o.offload_buffer_count * PinnedPool::size_class(arrays * o.offload_block_size) +
         PinnedPool::size_class(o.offload_block_size);
}

// Offloaded optimizer state: the fp32 master and the moments leave the device. Returns whether the
// NVMe staging buffers were counted (offloaded parameters share them).
bool offload_optimizer_state(MemoryEstimate& e, const EstimateOptions& o, int64_t shard) {
  e.offloaded = true;
  // fp32 master (unless the parameter store holds it) + moments
  const int64_t state = ((master_in_param_store(o) ? 0 : 4) + static_cast<int64_t>(o.optimizer_state_bytes)) * shard;
  // On NVMe the store keeps offload.nvme_generations copies (with 2, the previous step's survives a
  // failed step).
  if (o.offload_optimizer == Target::kCpu) {
    e.offload_host += state;
  } else {
    e.nvme += o.nvme_generations * state;
  }
  e.optimizer_state = 0;
  // The device keeps its fp32 shard (the engine's; the optimizer's host master is a second copy):
  // only offload.params takes it off, and offload.keep_param_dtype_shard leaves param_dtype there.
  // fp32 gradient shard copied for the CPU optimizer (offloaded gradients are there already)
  if (o.offload_grads == Target::kDevice) e.pinned_host += 4 * shard;
  if (o.offload_optimizer != Target::kNvme) return false;
  e.pinned_host += nvme_pipeline_bytes(o);
  return true;
}

// Offloaded parameter shards. Returns the fp32 shards the step holds at once.
int64_t offload_param_shards(MemoryEstimate& e, const EstimateOptions& o, const std::vector<int64_t>& f, int n, int p,
                             int64_t shard, bool staged) {
  e.offloaded = true;
  // The store keeps the fp32 shard (shard_store.h); with both in host memory on a CPU run the
  // optimizer updates it in place as its master (no second copy). Between uses nothing of the
  // shard stays on the device (a gathered unit's shard is read in for its gather only).
  const bool master_is_param = o.offload_optimizer == Target::kCpu && o.offload_params == Target::kCpu;
  // offload.keep_param_dtype_shard: the shard cast to param_dtype stays on the device.
  e.sharded_params = o.keep_param_dtype_shard ? static_cast<int64_t>(p) * shard : 0;
  // On NVMe as the optimizer's master too: in as many generations as its state.
  const int64_t copies = master_in_param_store(o) ? o.nvme_generations : 1;
  if (!master_is_param) (o.offload_params == Target::kCpu ? e.offload_host : e.nvme) += copies * 4 * shard;
  // A unit's shard is dropped once its gather is done, but while it computes the next unit's
  // gather (prefetched) still holds that unit's shard and the one after is read ahead: two shards
  // (at most the two largest) are in memory at the peak. With the param_dtype copy the gathers
  // read none: only the step brings masters in (the one it updates and the next), after backward.
  const std::vector<int64_t> shards = shards_largest_first(f, n);
  int64_t step_masters = 0;
  for (size_t i = 0; i < 2 && i < shards.size(); ++i) step_masters += 4 * shards[i];
  if (!o.keep_param_dtype_shard) e.device_peak += step_masters;
  if (o.offload_params == Target::kNvme && !staged) e.pinned_host += o.offload_buffer_count * o.offload_block_size;
  return step_masters;
}

// Offloaded gradient shards: one file (or host tensor) per trainable flat parameter's gradient
// shard; files whole blocks of 4096 bytes. The step replay counted at most one shard resident.
void offload_grad_shards(MemoryEstimate& e, const EstimateOptions& o, const std::vector<int64_t>& f, int n) {
  e.offloaded = true;
  int64_t stored = 0;
  for (int64_t x : f) stored += o.offload_grads == Target::kNvme ? pad(4 * (pad(x, n) / n), 4096) : 4 * (pad(x, n) / n);
  (o.offload_grads == Target::kCpu ? e.offload_host : e.nvme) += stored;
  e.grad_shards = 0;
}

}  // namespace

MemoryEstimate estimate_memory(const ModelShape& model, const EstimateOptions& o) {
  const std::vector<int64_t> f = flats(model);
  ZS_REQUIRE(!f.empty(), UsageError, "the model has no parameters to estimate");
  MemoryEstimate e;
  const ShardingPlan plan = plan_for(o);
  ZS_REQUIRE(plan.secondary_group_size == 1 || o.offload_params == Target::kDevice, ConfigError,
             "sharding.hpz_group_size = ", o.sharding.hpz_group_size, " keeps a slice of each unit's gathered "
             "parameters in memory from forward to backward, but the parameters are offloaded (offload.params = ",
             o.offload_params == Target::kCpu ? "CPU" : "NVME", "); the engine refuses the two together");
  const int n = plan.shard_group_size;
  e.shard_group = n;
  const int p = dtype_bytes(o.sharding.param_dtype), r = dtype_bytes(o.sharding.reduce_dtype);
  // Views of the shard: nothing to gather (one-rank shard group computing in fp32).
  const bool aliased = n == 1 && p == 4;

  int64_t shard = 0, padded_total = 0;
  for (int64_t x : f) {
    shard += pad(x, n) / n;
    padded_total += pad(x, n);
  }
  const int64_t root_padded = model.root_params > 0 ? pad(model.root_params, n) : 0;
  e.sharded_params = 4 * shard;
  e.grad_shards = 4 * shard;
  e.optimizer_state = static_cast<int64_t>(o.optimizer_state_bytes) * shard;

  const bool prefetch =
      (o.sharding.forward_prefetch || o.sharding.backward_prefetch != BackwardPrefetch::kNone) &&
      o.sharding.limit_all_gathers >= 2;
  const auto lp = [p](int64_t padded) { return padded * p; };
  if (aliased) {
    e.gathered_params_peak = 0;
  } else if (!plan.reshard_after_forward) {
    e.gathered_params_peak = padded_total * p;  // gathered from forward to backward (NO_SHARD: always)
  } else {
    e.gathered_params_peak = root_padded * p + largest_units(model, n, prefetch ? 2 : 1, lp);
    // hpZ: at most every unit's slice, kept from its forward until its backward.
    if (plan.secondary_group_size > 1) e.gathered_params_peak += (padded_total - root_padded) / plan.secondary_group_size * p;
  }
  // A unit's gradient buffer lives until the next unit's gradients are ready, except where the
  // replica all-reduce works on it in place (one-rank shard group, no cast): then until the end of
  // backward. Comm buffers (reduce-scatter outputs or cast copies) live until the next unit's
  // gradients are ready, or with replicas until the end of backward.
  const bool replicated = plan.replicas > 1, in_place = n == 1 && p == r;
  e.grad_buffers_peak =
      replicated && in_place ? padded_total * p : root_padded * p + largest_units(model, n, 2, lp);
  if (!in_place) {
    const std::vector<int64_t> shards = shards_largest_first(f, n);
    for (size_t i = 0; i < (replicated ? shards.size() : 2) && i < shards.size(); ++i) e.comm_buffers_peak += shards[i] * r;
  }

  const int64_t device_base = e.sharded_params + e.optimizer_state;
  e.device_peak = replay_step_peak(model, o, plan, aliased, p, r, device_base);

  // Offload: formulas only (see the header).
  const bool staged = o.offload_optimizer != Target::kDevice && offload_optimizer_state(e, o, shard);
  const int64_t step_masters =
      o.offload_params != Target::kDevice ? offload_param_shards(e, o, f, n, p, shard, staged) : 0;
  if (o.offload_grads != Target::kDevice) offload_grad_shards(e, o, f, n);
  // What offload took off the device comes off the peak too (the transients stay).
  e.device_peak -= device_base - (e.sharded_params + e.optimizer_state);
  if (o.keep_param_dtype_shard && o.offload_params != Target::kDevice) {
    e.device_peak = std::max(e.device_peak, e.sharded_params + e.grad_shards + step_masters);
  }
  return e;
}

ActivationEstimate estimate_gpt_activations(const GptShape& g, int64_t b, int bytes, int every_n_blocks) {
  ZS_REQUIRE(b >= 1, UsageError, "micro-batch ", b, " must be at least 1");
  ZS_REQUIRE(every_n_blocks >= 1, UsageError, "every_n_blocks ", every_n_blocks, " must be at least 1");
  const int64_t s = g.seq, d = g.d_model, h = g.effective_heads(), v = g.vocab;
  ActivationEstimate a;
  a.per_block = (16 * b * s * d + h * b * s * s) * bytes + s * s /* bool causal mask */;
  a.head = (2 * b * s * d + 2 * b * s * v) * bytes;
  a.plain = g.layers * a.per_block + a.head;
  const int64_t c = (g.layers + every_n_blocks - 1) / every_n_blocks;  // blocks 0, k, 2k, ...
  a.checkpointed = c * b * s * d * bytes + (g.layers - c) * a.per_block + a.per_block + a.head;
  return a;
}

StepCommEstimate estimate_step_comm(const ModelShape& model, const EstimateOptions& o, const LinkOptions& link) {
  ZS_REQUIRE(link.bytes_per_s > 0 && std::isfinite(link.bytes_per_s), UsageError, "the link's bandwidth (",
             link.bytes_per_s, " bytes/s) must be positive");
  ZS_REQUIRE(link.latency_s >= 0 && link.compute_s >= 0, UsageError, "the link's latency (", link.latency_s,
             " s) and the step's compute time (", link.compute_s, " s) must not be negative");
  ZS_REQUIRE(model.total() > 0, UsageError, "the model has no parameters");
  const ShardingPlan plan = plan_for(o);
  const int world = o.world_size, l = std::min(o.ranks_per_node, world);
  ZS_REQUIRE(world % l == 0, UsageError, "the communication estimate needs the same number of ranks on every node: ",
             "world size ", world, " is not a multiple of ", l, " ranks per node");
  StepCommEstimate e;
  e.strategy = o.sharding.strategy;
  e.nodes = world / l;
  const int n = plan.shard_group_size, replicas = plan.replicas;
  // The nodes a shard group spans and its ranks on each.
  int group_nodes = 1, group_l = n;
  if (n > l) {
    group_nodes = n / l;
    group_l = l;
  }
  if (e.nodes > 1) {
    if (o.sharding.strategy == Strategy::kNoShard) {
      e.not_modelled = "its gradient all-reduce runs as one MPI_Iallreduce, whose path through the nodes is Open MPI's";
    } else if ((n > l && n % l != 0) || (n < l && l % n != 0)) {
      e.not_modelled = detail::concat("shard groups of ", n, " ranks straddle nodes of ", l);
    } else if (replicas > 1 && n != l) {
      e.not_modelled = detail::concat("replicas of a shard on one node (shard groups of ", n, " ranks, ", l,
                                      " per node): the all-reduce's path is Open MPI's");
    } else if (plan.secondary_groups_cross_nodes) {
      e.not_modelled = detail::concat("hpZ groups of ", plan.secondary_group_size, " ranks straddle nodes of ", l);
    } else if (!o.reduce_scatter_ring && group_nodes > 1 && o.sharding.reduce_quant_block == 0) {
      e.not_modelled = "comm.reduce_scatter_ring = false: MPI_Reduce_scatter_block's path is Open MPI's";
    }
  }
  if (!e.not_modelled.empty()) return e;
  const bool stages = o.node_stages && group_l > 1;
  const int k = group_nodes;
  const double across = k > 1 ? static_cast<double>(k - 1) / k : 0.0;
  const int pbytes = dtype_bytes(o.sharding.param_dtype), rbytes = dtype_bytes(o.sharding.reduce_dtype);
  const bool reshard = plan.reshard_after_forward;
  const std::vector<int64_t> f = flats(model);
  for (size_t i = 0; i < f.size(); ++i) {
    const bool root = model.root_params > 0 && i == 0;
    const int64_t padded = pad(f[i], n), shard = padded / n;
    if (n > 1 && k > 1) {
      const double shard_bytes = o.sharding.gather_quant_block > 0
                                     ? static_cast<double>(quant::int8_encoded_bytes(shard, o.sharding.gather_quant_block))
                                     : static_cast<double>(shard) * pbytes;
      // Forward's gather, and backward's again after a reshard, unless hpZ keeps it inside the node.
      const double gathers = reshard && !root && plan.secondary_group_size == 1 ? 2 : 1;
      e.link_bytes += gathers * (stages ? 1.0 : group_l) * across * n * shard_bytes;
      e.messages += gathers * (k - 1);
      if (o.sharding.reduce_quant_block > 0) {
        // All-to-all of int8-encoded shards: each rank sends one to every rank of the other nodes
        // (with stages: one node sum to each of the k - 1 other nodes).
        const auto encoded = static_cast<double>(quant::int8_encoded_bytes(shard, o.sharding.reduce_quant_block));
        e.link_bytes += (stages ? 1.0 : group_l) * group_l * (k - 1) * encoded;
        e.messages += stages ? k - 1 : n - group_l;
      } else {
        const double reduce = static_cast<double>(padded) * rbytes;
        e.link_bytes += stages ? across * reduce : static_cast<double>(n - 1) / n * reduce;
        e.messages += stages ? k - 1 : n - 1;
      }
    }
    if (replicas > 1 && e.nodes > 1) {  // HYBRID_SHARD: one shard group per node
      e.link_bytes += l * 2.0 * (replicas - 1) / replicas * static_cast<double>(shard) * rbytes;
      e.messages += 2.0 * (replicas - 1);
    }
  }
  e.comm_s = e.link_bytes / link.bytes_per_s + e.messages * link.latency_s;
  if (link.compute_s > 0) {
    e.step_min_s = std::max(link.compute_s, e.comm_s);
    e.step_max_s = link.compute_s + e.comm_s;
    e.step_s = (e.step_min_s + e.step_max_s) / 2;
    e.exposed_share = (e.step_s - link.compute_s) / e.step_s;
  }
  return e;
}

namespace {

std::string human(int64_t bytes) { return bytes == 0 ? "0" : format_bytes(bytes); }

const char* target_name(Target t) { return t == Target::kCpu ? "cpu" : t == Target::kNvme ? "nvme" : "device"; }

}  // namespace

namespace {

// One line per strategy and offload placement ("*" marks the configured one; a strategy the
// options cannot run says why, once).
void format_table(std::ostringstream& os, const ModelShape& model, const EstimateOptions& options) {
  char line[256];
  std::snprintf(line, sizeof(line), "  %-14s %5s %-7s %-7s %-7s %14s %14s %14s %14s\n", "strategy", "N", "optim",
                "params", "grads", "device state", "device peak", "host", "nvme");
  os << line;
  struct Mode {
    Target opt, params, grads;
  };
  const std::vector<Mode> modes = {{Target::kDevice, Target::kDevice, Target::kDevice},
                                   {Target::kCpu, Target::kDevice, Target::kDevice},
                                   {Target::kNvme, Target::kDevice, Target::kDevice},
                                   {Target::kCpu, Target::kCpu, Target::kDevice},
                                   {Target::kNvme, Target::kNvme, Target::kDevice},
                                   {Target::kCpu, Target::kCpu, Target::kCpu},
                                   {Target::kNvme, Target::kNvme, Target::kNvme}};
  for (auto strategy : {Strategy::kFullShard, Strategy::kShardGradOp, Strategy::kNoShard, Strategy::kHybridShard}) {
    for (const Mode& m : modes) {
      EstimateOptions o = options;
      o.sharding.strategy = strategy;
      // hpZ where the config asks for it (its strategy, parameters on the device); the other rows without.
      if (strategy != options.sharding.strategy || m.params != Target::kDevice) o.sharding.hpz_group_size = 1;
      o.offload_optimizer = m.opt;
      o.offload_params = m.params;
      o.offload_grads = m.grads;
      MemoryEstimate e;
      try {
        e = estimate_memory(model, o);
      } catch (const ConfigError& err) {
        if (m.opt == Target::kDevice && m.params == Target::kDevice) {
          std::snprintf(line, sizeof(line), "  %-14s  not possible: %s\n", to_string(strategy),
                        err.message().c_str());
          os << line;
        }
        break;
      }
      const bool chosen = strategy == options.sharding.strategy && m.opt == options.offload_optimizer &&
                          m.params == options.offload_params && m.grads == options.offload_grads;
      std::snprintf(line, sizeof(line), "%s %-14s %5d %-7s %-7s %-7s %14s %14s %14s %14s%s\n", chosen ? "*" : " ",
                    to_string(strategy), e.shard_group, target_name(m.opt), target_name(m.params),
                    target_name(m.grads), human(e.device_persistent()).c_str(), human(e.device_peak).c_str(),
                    human(e.host_total()).c_str(), human(e.nvme).c_str(), e.offloaded ? "  (formula)" : "");
      os << line;
    }
  }
}

// The configured setup, category by category.
void format_configured(std::ostringstream& os, const ModelShape& model, const EstimateOptions& options) {
  const MemoryEstimate e = estimate_memory(model, options);
  os << "\nconfigured (" << to_string(options.sharding.strategy) << ", optimizer "
     << target_name(options.offload_optimizer) << ", params " << target_name(options.offload_params) << ", grads "
     << target_name(options.offload_grads)
     << (options.keep_param_dtype_shard && options.offload_params != Target::kDevice ? ", param_dtype copy resident" : "")
     << "), shard group of " << e.shard_group << ":\n";
  auto row = [&](const char* name, int64_t bytes) {
    char line[256];
    std::snprintf(line, sizeof(line), "  %-28s %14s %16lld bytes\n", name, human(bytes).c_str(),
                  static_cast<long long>(bytes));
    os << line;
  };
  row("sharded params", e.sharded_params);
  row("gradient shards", e.grad_shards);
  row("optimizer state", e.optimizer_state);
  row("gathered params (peak)", e.gathered_params_peak);
  row("unsharded grads (peak)", e.grad_buffers_peak);
  row("comm buffers (peak)", e.comm_buffers_peak);
  row("device peak", e.device_peak);
  row("offloaded to host", e.offload_host);
  row("pinned staging", e.pinned_host);
  row("on NVMe (disk)", e.nvme);
  if (e.offloaded) {
    os << "  offload figures are the formulas of docs/tools.md; the NVMe placements are checked against the engine\n"
          "  (tests/tools/test_estimate.cpp), the CPU ones are not\n";
  }
}

}  // namespace

std::string format_step_comm(const ModelShape& model, const EstimateOptions& options, const LinkOptions& link) {
  std::ostringstream os;
  char line[320];
  const int l = std::min(options.ranks_per_node, options.world_size);
  std::snprintf(line, sizeof(line),
                "\ncommunication per step over links of %.4g Gb/s each way, %.4g us latency, %d node(s) of %d rank(s)%s%s%s%s:\n",
                link.bytes_per_s * 8 / 1e9, link.latency_s * 1e6, options.world_size / std::max(l, 1), l,
                options.node_stages ? "" : ", one collective over all ranks (comm.node_stages = false)",
                options.sharding.gather_quant_block > 0 ? ", int8 parameter gathers" : "",
                options.sharding.reduce_quant_block > 0 ? ", int8 gradient reduce-scatters" : "",
                options.sharding.hpz_group_size != 1 ? ", hpZ (backward's gathers in secondary groups; * row)" : "");
  os << line;
  std::snprintf(line, sizeof(line), "  %-14s %16s %10s %24s %8s\n", "strategy", "link MB/node/step", "comm s",
                "step s (min..max)", "exposed");
  os << line;
  for (auto strategy : {Strategy::kFullShard, Strategy::kShardGradOp, Strategy::kHybridShard, Strategy::kNoShard}) {
    EstimateOptions o = options;
    o.sharding.strategy = strategy;
    if (strategy != options.sharding.strategy) o.sharding.hpz_group_size = 1;  // hpZ on the configured row only
    const char* mark = strategy == options.sharding.strategy ? "*" : " ";
    StepCommEstimate e;
    try {
      e = estimate_step_comm(model, o, link);
    } catch (const ConfigError& err) {
      std::snprintf(line, sizeof(line), "%s %-14s not possible: %s\n", mark, to_string(strategy), err.message().c_str());
      os << line;
      continue;
    }
    if (!e.not_modelled.empty()) {
      std::snprintf(line, sizeof(line), "%s %-14s not modelled: %s\n", mark, to_string(strategy), e.not_modelled.c_str());
      os << line;
      continue;
    }
    char step[64] = "-", exposed[16] = "-";
    if (link.compute_s > 0) {
      std::snprintf(step, sizeof(step), "%.3f (%.3f..%.3f)", e.step_s, e.step_min_s, e.step_max_s);
      std::snprintf(exposed, sizeof(exposed), "%.0f%%", e.exposed_share * 100);
    }
    std::snprintf(line, sizeof(line), "%s %-14s %16.3f %10.3f %24s %8s\n", mark, to_string(strategy),
                  e.link_bytes / 1e6, e.comm_s, step, exposed);
    os << line;
  }
  if (link.compute_s > 0) {
    std::snprintf(line, sizeof(line),
                  "  step: between max(compute, comm) and compute + comm (compute %.3f s), estimated at their middle\n",
                  link.compute_s);
    os << line;
  }
  return os.str();
}

std::string format_estimates(const ModelShape& model, const EstimateOptions& options) {
  std::ostringstream os;
  os << "model: " << model.total() << " parameters (" << model.unit_params.size() << " unit(s), largest "
     << model.largest_unit() << "; root " << model.root_params << "), world size " << options.world_size << ", "
     << options.ranks_per_node << " rank(s) per node, param_dtype " << dtype_name(options.sharding.param_dtype)
     << ", reduce_dtype " << dtype_name(options.sharding.reduce_dtype) << ", optimizer " << options.optimizer << "\n";
  os << "per rank; device peak = the highest sum of the device categories during a step (transients included)\n";
  format_table(os, model, options);
  format_configured(os, model, options);
  return os.str();
}

}  // namespace zeroshard
