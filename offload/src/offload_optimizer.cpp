// SPDX-License-Identifier: Apache-2.0
// OffloadedOptimizer: options, shard bookkeeping, the CPU target (state in host tensors), imported
// state and the public interface. The NVMe pipeline is in offload_nvme.cpp. See offload_optimizer.h.

#include "zeroshard/offload/offload_optimizer.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

#include "offload_impl.h"
#include "zeroshard/base/error.h"
#include "zeroshard/base/format.h"
#include "zeroshard/base/logging.h"
#include "zeroshard/io/pinned_pool.h"
#include "cpu_common.h"
#include "zeroshard/core/memory_stats.h"

namespace zeroshard {

namespace {

// The pager of a step over resident shards: nothing to load or write back.
class ResidentPager final : public ShardPager {
 public:
  explicit ResidentPager(const std::vector<ParamShard>& shards) : shards_(shards) {}
  int64_t numel(size_t i) const override {
    const ParamShard& s = shards_.at(i);
    ZS_REQUIRE(s.param.defined(), UsageError, "OffloadedOptimizer step: shard ", i, " ('", s.name,
               "') has no values: its parameters are offloaded (offload.params); step it through "
               "engine.step(optimizer), which brings them in");
    return s.param.numel();
  }
  void acquire(size_t, bool, bool) override {}
  void release(size_t, bool) override {}
  void prefetch(size_t, bool) override {}

 private:
  const std::vector<ParamShard>& shards_;
};

}  // namespace

void OffloadedOptimizer::Impl::check_shards(const std::vector<ParamShard>& shards, ShardPager& pager) {
  for (size_t i = 0; i < shards.size(); ++i) {
    const ParamShard& s = shards[i];
    const int64_t n = pager.numel(i);
    ZS_REQUIRE(!s.param.defined() || (s.param.scalar_type() == at::kFloat && s.param.is_contiguous() &&
                                      s.param.numel() == n),
               UsageError, "OffloadedOptimizer step: shard ", i, " ('", s.name,
               "') must be a contiguous fp32 tensor of ", n, " elements");
    ZS_REQUIRE(!s.grad.defined() || (s.grad.scalar_type() == at::kFloat && s.grad.numel() == n &&
                                     s.grad.is_contiguous()),
               UsageError, "OffloadedOptimizer step: the grad of shard ", i, " ('", s.name,
               "') must be a contiguous fp32 tensor of ", n, " elements");
    (void)shard_runs(s, default_weight_decay(), n);  // throws on malformed groups before anything changes
  }
  if (!layout_recorded) {
    if (o.target == OffloadTarget::kCpu) {
      host.resize(shards.size());
      for (size_t i = 0; i < shards.size(); ++i) host[i].numel = pager.numel(i);
    } else {
      master_in_records = pager.master_generations() < o.nvme_generations;
      for (size_t i = 0; i < shards.size(); ++i) {
        files.push_back(std::make_unique<detail::NvmeShardFiles>(dir->path(), i, shards[i].name, rank,
                                                                 pager.numel(i), chunk_elems, state_arrays,
                                                                 master_in_records, o.direct_io, o.nvme_generations));
      }
    }
    layout_recorded = true;
    return;
  }
  const size_t expected = o.target == OffloadTarget::kCpu ? host.size() : files.size();
  ZS_REQUIRE(shards.size() == expected, UsageError, "OffloadedOptimizer step ", steps + 1, " got ",
             shards.size(), " shards, the first step had ", expected,
             "; pass the same shard list, in the same order, every step");
  for (size_t i = 0; i < shards.size(); ++i) {
    const int64_t n = o.target == OffloadTarget::kCpu ? host[i].numel : files[i]->numel;
    ZS_REQUIRE(pager.numel(i) == n, UsageError, "OffloadedOptimizer step ", steps + 1, ": shard ", i, " ('",
               shards[i].name, "') changed: expected ", n, " elements, got ", pager.numel(i));
  }
}

// ---- CPU target: state in host tensors, the update chunk by chunk where data must travel ----

// The shard's state before its update: zero moments and (unless the update is in place on the
// shard) an fp32 master at its first step; the master replaced by weights loaded since the last.
// Returns whether this is SGD's first update, which creates the momentum buffer and writes it
// whole (as torch's clone of d_p; an imported buffer is continued).
bool OffloadedOptimizer::Impl::prepare_host_slot(const ParamShard& s, HostSlot& slot, bool in_place) {
  const int64_t n = slot.numel;
  if (!slot.started) {
    if (!sgd) {
      slot.m = state_pool.empty(n, at::kFloat).zero_();
      slot.v = state_pool.empty(n, at::kFloat).zero_();
    }
    if (!in_place) slot.master = state_pool.empty(n, at::kFloat).copy_(s.param);
    slot.started = true;
  } else if (s.values_replaced && !in_place) {
    slot.master.copy_(s.param);
  }
  const bool first = sgd && state_arrays == 1 && !slot.m.defined();
  if (first) slot.m = state_pool.empty(n, at::kFloat);
  return first;
}

void OffloadedOptimizer::Impl::step_cpu(const std::vector<ParamShard>& shards, ShardPager& pager) {
  for (size_t i = 0; i < shards.size(); ++i) {
    const ParamShard& s = shards[i];
    HostSlot& slot = host[i];
    // Updated by an earlier attempt at this step that failed on a later shard: the update is in
    // place and cannot be undone, so the retry completes the step without repeating it.
    if (!s.grad.defined() || slot.step_done == steps + 1) continue;
    try {
      pager.acquire(i);
    } catch (const Error& e) {
      partial_grads = grads_of(shards);
      ZS_THROW(IoError, "offloaded optimizer step ", steps + 1, " failed on rank ", rank, " at shard ", i, " ('",
               s.name, "'): ", e.message(),
               ". The shards before it have this step's update (in place: the state is in host memory), the rest "
               "not; once the cause is fixed, engine.step(optimizer) again completes the step (it skips them)");
    }
    pager.prefetch(next_with_grad(shards, i));
    update_host_shard(s, slot);
    // The update was in place on the only copy of the master (an offloaded shard on a CPU run) or
    // on the host master: it cannot be undone, so a failed write-back (whose values stay in
    // memory, the pager's contract) must not stop the rest of the step.
    try {
      pager.release(i, true);
    } catch (const Error& e) {
      if (unwritten.empty()) unwritten = "shard " + std::to_string(i) + " ('" + s.name + "'): " + e.message();
    }
  }
}

// The update of one shard whose values are at hand (resident, or acquired through the pager).
void OffloadedOptimizer::Impl::update_host_shard(const ParamShard& s, HostSlot& slot, bool speculative) {
  const int64_t n = slot.numel;
  const bool in_place = host_fp32(s.param);
  if (speculative) {
    slot.was_started = slot.started;
  }
  const bool first = prepare_host_slot(s, slot, in_place);
  const int64_t update = slot.updates + 1;
  float* p = in_place ? s.param.data_ptr<float>() : slot.master.data_ptr<float>();
  // Speculative: the new values and state into the slot's next arrays, the current ones untouched.
  float *p_out = nullptr, *m_out = nullptr, *v_out = nullptr;
  if (speculative) {
    auto ensure = [&](at::Tensor& t) {
      if (!t.defined()) t = state_pool.empty(n, at::kFloat);
      return t.data_ptr<float>();
    };
    p_out = ensure(slot.master_next);
    if (slot.m.defined()) m_out = ensure(slot.m_next);
    if (slot.v.defined()) v_out = ensure(slot.v_next);
  }
  const at::Tensor& values = speculative ? slot.master_next : slot.master;  // where the new values land
  auto at_offset = [](float* q, int64_t off) { return q == nullptr ? nullptr : q + off; };
  const std::vector<ShardGroupRange> runs = shard_runs(s, default_weight_decay());
  if (in_place && host_fp32(s.grad)) {
    update_elements(runs, update, first, 0, p, s.grad.data_ptr<float>(), data_at(slot.m, 0), data_at(slot.v, 0), n,
                    p_out, m_out, v_out);
  } else if (!update_device_shard(s, slot, runs, update, first, in_place, speculative)) {
    // Synchronous copies (staging or master in pageable memory, offload.pin_memory = false; or a
    // host tensor that is not contiguous fp32): chunks of the gradient come to the host through
    // the staging buffer, chunks of the new values go back.
    if (!grad_staging.defined()) grad_staging = staging_pool.empty(chunk_elems, at::kFloat);
    for (int64_t off = 0; off < n; off += chunk_elems) {
      const int64_t c = std::min(chunk_elems, n - off);
      at::Tensor g = grad_staging.narrow(0, 0, c);
      g.copy_(s.grad.narrow(0, off, c));
      update_elements(runs, update, first, off, p + off, g.data_ptr<float>(), data_at(slot.m, off),
                      data_at(slot.v, off), c, at_offset(p_out, off), at_offset(m_out, off), at_offset(v_out, off));
      if (!in_place) s.param.narrow(0, off, c).copy_(values.narrow(0, off, c));
    }
  }
  if (speculative) {
    slot.speculated = true;
    return;
  }
  slot.updates = update;
  slot.step_done = steps + 1;
}

// ---- a step run during backward: the new values and state in the slot's next arrays ----

// The step stands: the next arrays become the current ones (a shard that is its own master takes
// the new values now; until here it kept the old ones).
void OffloadedOptimizer::Impl::keep_speculated(const ParamShard& s, HostSlot& slot) {
  if (host_fp32(s.param)) {
    s.param.copy_(slot.master_next.view(s.param.sizes()));
  } else {
    std::swap(slot.master, slot.master_next);
  }
  if (slot.m.defined()) std::swap(slot.m, slot.m_next);
  if (slot.v.defined()) std::swap(slot.v, slot.v_next);
  slot.updates += 1;
  slot.step_done = steps + 1;
  slot.speculated = false;
}

// The step is abandoned: the current arrays were never written; a shard on the device, which took
// the new values from the next master, gets the current master's back (its own values before the
// step: the master is their copy, or was made from them by this step's preparation).
void OffloadedOptimizer::Impl::drop_speculated(const ParamShard& s, HostSlot& slot) {
  if (!host_fp32(s.param)) s.param.copy_(slot.master.view(s.param.sizes()));
  // Its first update: the state this step's preparation made goes (a started slot holds all of
  // it: SGD's buffer too, which its first update creates).
  if (!slot.was_started) {
    slot.master = slot.m = slot.v = at::Tensor();
    slot.started = false;
  }
  slot.speculated = false;
}

void GradChunks::wait_on_host(const std::unique_ptr<StreamMark>& mark) {
  while (mark && !mark->done()) std::this_thread::yield();
}

DeviceStreams* OffloadedOptimizer::Impl::copy_streams_for(const ParamShard& s, const at::Tensor& host_side) {
  const c10::Device device = host_fp32(s.grad) ? s.param.device() : s.grad.device();
  if (device.is_cpu()) return nullptr;
  if (!streams || streams->device() != device) streams = std::make_unique<DeviceStreams>(device);
  // Pageable staging (offload.pin_memory = false) or no copy stream: the synchronous chunk copies,
  // and no gradient buffers held for nothing.
  if (!streams->enabled() || !o.pin_memory) return nullptr;
  if (!grad_pair[0].defined()) {
    for (at::Tensor& t : grad_pair) t = staging_pool.empty(chunk_elems, at::kFloat);
  }
  const bool pinned = grad_pair[0].is_pinned() && (!host_side.defined() || host_side.is_pinned());
  return pinned ? streams.get() : nullptr;
}

// A shard on a GPU: the gradient comes down chunk by chunk into two pinned buffers on the copy
// stream (chunk k+1 is on its way while chunk k is updated), and every updated chunk of the host
// master goes up on the same stream without the host waiting; the host waits only for a gradient
// chunk it is about to read, and for the last upload before the shard is handed back (the master's
// chunks are not touched again before the next step, the shard's next reader follows the upload).
// Not run yet: this machine has no GPU (docs/offload.md). On a CPU-only run the streams are
// disabled and the shards are host tensors: the caller's in-place path runs instead.
bool OffloadedOptimizer::Impl::update_device_shard(const ParamShard& s, HostSlot& slot,
                                                    const std::vector<ShardGroupRange>& runs, int64_t update,
                                                    bool first, bool in_place, bool speculative) {
  // Speculative (a step during backward): the new values and state go to the slot's next arrays,
  // and the shard takes its values from there.
  const at::Tensor& values = speculative ? slot.master_next : slot.master;
  DeviceStreams* st = copy_streams_for(s, in_place ? at::Tensor() : values);
  if (st == nullptr) return false;
  const int64_t n = slot.numel;
  float* p = in_place ? s.param.data_ptr<float>() : slot.master.data_ptr<float>();
  auto out = [&](const at::Tensor& t, int64_t off) { return speculative && t.defined() ? t.data_ptr<float>() + off : nullptr; };
  GradChunks grads(*st, grad_pair, s.grad, chunk_elems);
  std::unique_ptr<StreamMark> up;
  grads.fetch(0);
  for (int64_t off = 0; off < n; off += chunk_elems) {
    const int64_t c = std::min(chunk_elems, n - off);
    const float* g = grads.get(off);
    grads.fetch(off + chunk_elems);  // into the other buffer, whose chunk the host has finished with
    update_elements(runs, update, first, off, p + off, g, data_at(slot.m, off), data_at(slot.v, off), c,
                    out(slot.master_next, off), slot.m.defined() ? out(slot.m_next, off) : nullptr,
                    slot.v.defined() ? out(slot.v_next, off) : nullptr);
    if (!in_place) up = st->copy_async(s.param.narrow(0, off, c), values.narrow(0, off, c));
  }
  if (up) up->block(st->current());  // the shard's readers on the device follow the upload
  GradChunks::wait_on_host(up);
  return true;
}

// Imported state (a checkpoint) replaces the current one: host moments (CPU), or fresh files
// written from the shards and the imported moments (NVME).
void OffloadedOptimizer::Impl::apply_pending(const std::vector<ParamShard>& shards, ShardPager& pager) {
  if (!pending) return;
  ZS_REQUIRE(pending->size() == shards.size(), UsageError, "OffloadedOptimizer: the imported state has ",
             pending->size(), " shard positions, the step got ", shards.size(), " shards");
  for (size_t i = 0; i < shards.size(); ++i) {
    const ShardOptimizerState& st = (*pending)[i];
    ZS_REQUIRE(!st.has_tensors() || st.numel() == pager.numel(i), UsageError, "OffloadedOptimizer: imported state "
               "of shard ", i, " ('", shards[i].name, "') has ", st.numel(), " elements, the shard has ",
               pager.numel(i));
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    ShardOptimizerState& st = (*pending)[i];
    if (st.read) {  // a checkpoint's state, read one position at a time and dropped once applied
      st.tensors = st.materialize();
      st.read = nullptr;
      for (at::Tensor& t : st.tensors) t = t.to(at::kCPU, at::kFloat).contiguous();
    }
    if (o.target == OffloadTarget::kCpu) {
      HostSlot& slot = host[i];
      slot.updates = st.updates;
      slot.step_done = 0;
      slot.m = slot.v = slot.master = at::Tensor();
      slot.started = false;
      if (!st.tensors.empty()) {
        slot.m = state_pool.empty(slot.numel, at::kFloat).copy_(st.tensors[0]);
        if (st.tensors.size() > 1) slot.v = state_pool.empty(slot.numel, at::kFloat).copy_(st.tensors[1]);
        pager.acquire(i, /*read=*/true, /*grad=*/false);
        if (!host_fp32(shards[i].param)) slot.master = state_pool.empty(slot.numel, at::kFloat).copy_(shards[i].param);
        pager.release(i, false);
        slot.started = true;
      }
    } else {
      ensure_buffers();
      detail::NvmeShardFiles& f = *files[i];
      f.updates = st.updates;
      f.initialized = false;
      f.started = false;
      if (!st.tensors.empty()) {
        if (f.master) pager.acquire(i, /*read=*/true, /*grad=*/false);
        nvme_shard(shards[i], f, /*initialize=*/true, &st);
        if (f.master) pager.release(i, false);
        f.initialized = true;
        f.started = true;
      }
    }
    st = ShardOptimizerState();
  }
  pending.reset();
}

// ---- the optimizer ----

OffloadedOptimizer::OffloadedOptimizer(const OptimizerOptions& optimizer, const OffloadOptions& options, int rank,
                                       MemoryStats* mem, std::shared_ptr<IoEngine> io)
    : ShardedOptimizer(optimizer.lr),
      impl_(std::make_unique<Impl>(optimizer, options, rank, mem, std::move(io))) {}

OffloadedOptimizer::~OffloadedOptimizer() {
  if (impl_ && impl_->io) {
    try {
      impl_->io->wait_all();
    } catch (...) {
    }
  }
}

void OffloadedOptimizer::step(const std::vector<ParamShard>& shards) {
  for (size_t i = 0; i < shards.size(); ++i) {
    ZS_REQUIRE(!shards[i].grad.defined() || !shards[i].grad.is_meta(), UsageError, "OffloadedOptimizer step: the "
               "gradient of shard ", i, " ('", shards[i].name, "') is offloaded (offload.grads); step it through "
               "engine.step(optimizer), which brings it in");
  }
  ResidentPager pager(shards);
  std::vector<ParamShard> copy = shards;  // the same tensors; the pager never changes them
  step(copy, pager);
}

void OffloadedOptimizer::step(std::vector<ParamShard>& shards, ShardPager& pager) {
  ZS_REQUIRE(impl_->broken.empty(), IoError, "offloaded optimizer: an earlier ", impl_->broken,
             ", and with offload.nvme_generations = 1 the state on disk is partly that step's; restart from the "
             "last checkpoint");
  impl_->check_shards(shards, pager);
  at::NoGradGuard no_grad;
  impl_->apply_pending(shards, pager);
  impl_->lr = lr_;
  if (impl_->o.target == OffloadTarget::kCpu) {
    impl_->unwritten.clear();
    ZS_REQUIRE(impl_->partial_grads.empty() || impl_->partial_grads == Impl::grads_of(shards), IoError,
               "offloaded optimizer step ", impl_->steps + 1, " was partly applied before it failed; only a retry "
               "with the same gradients (engine.step right after the failure, no new backward) can complete it. "
               "Restart from the last checkpoint");
    impl_->step_cpu(shards, pager);
    impl_->partial_grads.clear();
  } else {
    impl_->step_nvme(shards, pager);
  }
  ++impl_->steps;
  ZS_REQUIRE(impl_->unwritten.empty(), IoError, "offloaded optimizer step ", impl_->steps, " was applied on rank ",
             impl_->rank, ", but writing a parameter shard back to its store failed: ", impl_->unwritten,
             ". The new values stay in memory and are written at the shard's next release; do not repeat the step");
}

bool OffloadedOptimizer::steps_shards_during_backward() const {
  return impl_->o.target == OffloadTarget::kCpu && impl_->o.params == OffloadTarget::kDevice;
}

void OffloadedOptimizer::begin_shard_step(const std::vector<ParamShard>& shards) {
  Impl& im = *impl_;
  ZS_REQUIRE(steps_shards_during_backward(), UsageError, "optimizer ", describe(), " cannot step shards during "
             "backward: its state or its parameter shards are not in host memory (offload.optimizer = CPU with "
             "offload.params = DEVICE does it)");
  ZS_REQUIRE(!im.shard_step_open, UsageError, "OffloadedOptimizer: begin_shard_step while step ", im.steps + 1,
             " begun during an earlier backward is still open (finish or abandon it first)");
  ZS_REQUIRE(im.partial_grads.empty(), UsageError, "OffloadedOptimizer step ", im.steps + 1, " was partly applied "
             "before it failed; complete it with engine.step(optimizer) before the next backward");
  for (size_t i = 0; i < shards.size(); ++i) {
    ZS_REQUIRE(!shards[i].grad.defined() || !shards[i].grad.is_meta(), UsageError, "OffloadedOptimizer: the "
               "gradient of shard ", i, " ('", shards[i].name, "') is offloaded (offload.grads): a step during "
               "backward needs the gradients in memory");
  }
  ResidentPager pager(shards);
  im.check_shards(shards, pager);
  at::NoGradGuard no_grad;
  im.apply_pending(shards, pager);
  im.lr = lr_;
  for (HostSlot& slot : im.host) slot.speculated = false;
  im.shard_step_open = true;
}

void OffloadedOptimizer::step_shard(size_t i, const ParamShard& shard) {
  Impl& im = *impl_;
  ZS_REQUIRE(im.shard_step_open, UsageError, "OffloadedOptimizer::step_shard without begin_shard_step");
  ZS_REQUIRE(i < im.host.size(), UsageError, "OffloadedOptimizer::step_shard: position ", i, " is past the ",
             im.host.size(), " shards of the step");
  HostSlot& slot = im.host[i];
  ZS_REQUIRE(shard.param.defined() && shard.param.numel() == slot.numel && shard.grad.defined() &&
                 shard.grad.numel() == slot.numel,
             UsageError, "OffloadedOptimizer::step_shard: shard ", i, " ('", shard.name, "') needs values and a "
             "gradient of ", slot.numel, " elements");
  ZS_REQUIRE(!slot.speculated && slot.step_done != im.steps + 1, UsageError, "OffloadedOptimizer::step_shard: "
             "shard ", i, " ('", shard.name, "') was already updated in step ", im.steps + 1);
  at::NoGradGuard no_grad;
  im.update_host_shard(shard, slot, /*speculative=*/true);
}

void OffloadedOptimizer::finish_shard_step(const std::vector<ParamShard>& shards) {
  Impl& im = *impl_;
  ZS_REQUIRE(im.shard_step_open, UsageError, "OffloadedOptimizer::finish_shard_step without begin_shard_step");
  ZS_REQUIRE(shards.size() == im.host.size(), UsageError, "OffloadedOptimizer::finish_shard_step got ",
             shards.size(), " shards, the step has ", im.host.size());
  im.shard_step_open = false;
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < shards.size(); ++i) {
    if (im.host[i].speculated) im.keep_speculated(shards[i], im.host[i]);
  }
  step(shards);  // the shards not updated yet; those done are skipped
}

size_t OffloadedOptimizer::abandon_shard_step(const std::vector<ParamShard>& shards) {
  Impl& im = *impl_;
  ZS_REQUIRE(im.shard_step_open, UsageError, "OffloadedOptimizer::abandon_shard_step without begin_shard_step");
  ZS_REQUIRE(shards.size() == im.host.size(), UsageError, "OffloadedOptimizer::abandon_shard_step got ",
             shards.size(), " shards, the step has ", im.host.size());
  at::NoGradGuard no_grad;
  size_t restored = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    if (!im.host[i].speculated) continue;
    im.drop_speculated(shards[i], im.host[i]);
    ++restored;
  }
  im.shard_step_open = false;
  return restored;
}

bool OffloadedOptimizer::expects_offloaded_params() const { return impl_->o.params != OffloadTarget::kDevice; }

int64_t OffloadedOptimizer::state_bytes() const {
  int64_t bytes = 0;
  for (const HostSlot& s : impl_->host) {
    for (const at::Tensor* t : {&s.m, &s.v}) {
      if (t->defined()) bytes += static_cast<int64_t>(t->nbytes());
    }
  }
  for (const auto& f : impl_->files) {
    if (f->initialized) bytes += impl_->state_arrays * f->numel * static_cast<int64_t>(sizeof(float));
  }
  return bytes;
}

ShardedOptimizer::Placement OffloadedOptimizer::placement() const {
  Placement p;
  for (const HostSlot& s : impl_->host) {
    for (const at::Tensor* t : {&s.m, &s.v, &s.master}) {
      if (t->defined()) p.host += static_cast<int64_t>(t->nbytes());
    }
  }
  for (const HostSlot& s : impl_->host) {  // steps during backward: the next arrays
    for (const at::Tensor* t : {&s.master_next, &s.m_next, &s.v_next}) {
      if (t->defined()) p.host += static_cast<int64_t>(t->nbytes());
    }
  }
  for (const auto& f : impl_->files) {
    if (f->initialized) p.nvme += f->bytes_on_disk();
  }
  return p;
}

std::string OffloadedOptimizer::describe() const {
  const auto& o = impl_->o;
  std::string s = std::string("Offloaded") + (impl_->sgd ? "Sgd" : impl_->adam.adamw ? "AdamW" : "Adam") +
                  "(lr=" + format_double(lr_);
  if (impl_->sgd) {
    s += ", momentum=" + format_double(impl_->sgdo.momentum) +
         ", nesterov=" + (impl_->sgdo.nesterov ? "true" : "false");
  }
  s += std::string(", state=") + to_string(o.target) + ", simd=" + to_string(impl_->path);
  if (o.target == OffloadTarget::kNvme) {
    s += ", dir=" + impl_->dir->path() + ", io=" + to_string(impl_->io->backend()) +
         ", block=" + std::to_string(o.block_size) + ", depth=" + std::to_string(o.queue_depth) +
         ", buffers=" + std::to_string(o.buffer_count) + ", generations=" + std::to_string(o.nvme_generations);
  }
  return s + ", pinned=" + impl_->staging_pool.mode() + ")";
}

int64_t OffloadedOptimizer::steps() const { return impl_->steps; }

std::vector<std::string> OffloadedOptimizer::state_names() const {
  if (!impl_->sgd) return {"exp_avg", "exp_avg_sq"};
  if (impl_->state_arrays == 0) return {};
  return {"momentum_buffer"};
}

// The moments of one shard's files, read chunk by chunk through the staging buffer.
std::vector<at::Tensor> OffloadedOptimizer::Impl::read_moments(detail::NvmeShardFiles& f) {
  ZS_REQUIRE(broken.empty(), IoError, "offloaded optimizer: cannot read the state back (e.g. for a checkpoint): ",
             "an earlier ", broken, "; restart from the last checkpoint");
  ensure_buffers();
  std::vector<at::Tensor> out;
  for (int j = 0; j < state_arrays; ++j) out.push_back(at::empty({f.numel}, at::kFloat));
  float* buf = buffers[0].data_ptr<float>();
  for (int64_t k = 0; k < f.chunks; ++k) {
    const int64_t c = f.chunk_numel(k);
    read_record(f, f.current, k, buf);
    for (int j = 0; j < state_arrays; ++j) {
      std::memcpy(out[static_cast<size_t>(j)].data_ptr<float>() + k * f.chunk_elems, buf + f.state_offset(j),
                  static_cast<size_t>(c) * sizeof(float));
    }
  }
  return out;
}

std::vector<ShardOptimizerState> OffloadedOptimizer::export_state() const {
  Impl& im = *impl_;
  ZS_REQUIRE(im.broken.empty(), IoError, "offloaded optimizer: cannot export the state (e.g. for a checkpoint): ",
             "an earlier ", im.broken, ", and with offload.nvme_generations = 1 the state on disk is partly that "
             "step's; restart from the last checkpoint");
  if (im.pending) return *im.pending;
  std::vector<ShardOptimizerState> out;
  for (const HostSlot& slot : im.host) {
    ShardOptimizerState st;
    st.updates = slot.updates;
    for (const at::Tensor* t : {&slot.m, &slot.v}) {
      if (t->defined()) st.tensors.push_back(*t);
    }
    out.push_back(std::move(st));
  }
  for (const auto& fp : im.files) {
    detail::NvmeShardFiles& f = *fp;
    ShardOptimizerState st;
    st.updates = f.updates;
    // SGD's buffer before its first update is no state (the next update starts it afresh). Read
    // back lazily: a checkpoint holds one shard's moments at a time.
    if (f.initialized && im.state_arrays > 0 && (!im.sgd || f.started)) {
      st.read_numel = f.numel;
      st.read = [impl = &im, files = &f] { return impl->read_moments(*files); };
    }
    out.push_back(std::move(st));
  }
  return out;
}

void OffloadedOptimizer::import_state(std::vector<ShardOptimizerState> state, int64_t steps) {
  const std::vector<std::string> names = state_names();
  for (size_t i = 0; i < state.size(); ++i) {
    ZS_REQUIRE(state[i].read || state[i].tensors.empty() || state[i].tensors.size() == names.size(), UsageError,
               "OffloadedOptimizer import_state: position ", i, " has ", state[i].tensors.size(),
               " state tensors; expected none or ", names.size(), " (", describe_names(names), ")");
    for (at::Tensor& t : state[i].tensors) t = t.to(at::kCPU, at::kFloat).contiguous();
  }
  impl_->pending = std::make_unique<std::vector<ShardOptimizerState>>(std::move(state));
  impl_->steps = steps;
}

std::string OffloadedOptimizer::rank_dir() const { return impl_->dir ? impl_->dir->path() : std::string(); }

OffloadedOptimizer::IoStats OffloadedOptimizer::io_stats() const { return impl_->io_stats; }

std::unique_ptr<ShardedOptimizer> make_engine_optimizer(const OptimizerOptions& optimizer, const OffloadOptions& offload,
                                                        int rank, MemoryStats* mem) {
  if (offload.target == OffloadTarget::kDevice) return make_optimizer(optimizer);
  return std::make_unique<OffloadedOptimizer>(optimizer, offload, rank, mem);
}

}  // namespace zeroshard
