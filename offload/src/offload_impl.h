// SPDX-License-Identifier: Apache-2.0
#pragma once
// OffloadedOptimizer's private state, shared by offload_optimizer.cpp (bookkeeping, the CPU target,
// the public interface) and offload_nvme.cpp (the NVMe chunk pipeline and its rollback).

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "adam_update.h"
#include "cpu_common.h"
#include "nvme_state.h"
#include "sgd_update.h"
#include "zeroshard/base/error.h"
#include "zeroshard/comm/streams.h"
#include "zeroshard/io/offload_dir.h"
#include "zeroshard/io/pinned_pool.h"
#include "zeroshard/offload/cpu_sgd.h"
#include "zeroshard/offload/offload_optimizer.h"

namespace zeroshard {
namespace detail {

inline bool is_sgd(const OptimizerOptions& o) { return o.type == OptimizerOptions::Type::kSgd; }

// Adam's options for ADAM/ADAMW (checked as make_optimizer checks them); unused defaults for SGD,
// and the reverse below.
inline CpuAdamOptions checked_adam_options(const OptimizerOptions& o) {
  if (is_sgd(o)) return CpuAdamOptions{};
  (void)make_optimizer(o);
  return cpu_adam_options(o);
}

inline SgdOptions checked_sgd_options(const OptimizerOptions& o) {
  if (!is_sgd(o)) return SgdOptions{};
  (void)make_optimizer(o);
  return sgd_options(o);
}

inline float* data_at(const at::Tensor& t, int64_t offset) { return t.defined() ? t.data_ptr<float>() + offset : nullptr; }

inline std::string describe_names(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "no state" : out;
}

inline bool host_fp32(const at::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous();
}

}  // namespace detail

using detail::checked_adam_options;
using detail::checked_sgd_options;
using detail::data_at;
using detail::describe_names;
using detail::host_fp32;
using detail::is_sgd;

// The gradient of a shard on a GPU, chunk by chunk through two pinned buffers on the copy stream:
// fetch(off) starts bringing the chunk at element `off` down (nothing past the end), get(off) waits
// on the host for it and returns where it is. Fetch chunk k+1 only once the host is done with chunk
// k-1 (the same buffer). A gradient on the host is read where it is.
class GradChunks {
 public:
  GradChunks(DeviceStreams& streams, at::Tensor (&pair)[2], const at::Tensor& grad, int64_t chunk_elems)
      : streams_(streams), pair_(pair), grad_(grad), chunk_(chunk_elems), on_host_(host_fp32(grad)) {}
  void fetch(int64_t off) {
    if (on_host_ || off >= grad_.numel()) return;
    const int b = buffer(off);
    const int64_t c = std::min(chunk_, grad_.numel() - off);
    down_[b] = streams_.copy_async(pair_[b].narrow(0, 0, c), grad_.narrow(0, off, c));
  }
  const float* get(int64_t off) {
    if (on_host_) return grad_.data_ptr<float>() + off;
    const int b = buffer(off);
    wait_on_host(down_[b]);
    return pair_[b].data_ptr<float>();
  }
  // Polls until `mark` is done (LibTorch 1.13's c10::Event has no host synchronize).
  static void wait_on_host(const std::unique_ptr<StreamMark>& mark);

 private:
  int buffer(int64_t off) const { return static_cast<int>((off / chunk_) % 2); }
  DeviceStreams& streams_;
  at::Tensor (&pair_)[2];
  const at::Tensor& grad_;
  int64_t chunk_;
  bool on_host_;
  std::unique_ptr<StreamMark> down_[2];
};

// Per position in the shard list.
struct HostSlot {
  int64_t numel = 0;
  int64_t updates = 0;
  bool started = false;  // state allocated (first update or import)
  int64_t step_done = 0;  // the optimizer step whose update the slot holds (a retried step skips it)
  at::Tensor master;     // host fp32 master when the shard is not a host fp32 tensor
  at::Tensor m, v;       // Adam: exp_avg, exp_avg_sq; SGD: m = momentum_buffer (when momentum > 0)
  // A step run during backward (begin_shard_step) writes the new values and state here, the
  // arrays above left as they were: the step ending swaps them in (the new values copied into a
  // shard that is its own master), or abandons them. Allocated at the first such step and kept.
  at::Tensor master_next, m_next, v_next;
  bool speculated = false;  // this step's update is in the *_next arrays
  bool was_started = false;  // before it: `started`
};

struct OffloadedOptimizer::Impl {
  bool sgd;
  CpuAdamOptions adam;  // ADAM/ADAMW
  SgdOptions sgdo;      // SGD
  int state_arrays;     // per element besides the master: Adam 2, SGD 1 with momentum, else 0
  OffloadOptions o;
  int rank;
  MemoryStats* mem;
  SimdPath path;
  PinnedPool state_pool;    // CPU target: moments and host masters (reported as offloaded state)
  PinnedPool staging_pool;  // chunk buffers and D2H/H2D staging (reported as pinned staging)
  int64_t chunk_elems;
  bool layout_recorded = false;
  int64_t steps = 0;
  IoStats io_stats;
  // CPU target
  std::vector<HostSlot> host;
  // NVME target
  std::shared_ptr<IoEngine> io;
  std::unique_ptr<OffloadDir> dir;
  std::vector<std::unique_ptr<detail::NvmeShardFiles>> files;
  std::vector<at::Tensor> buffers;  // buffer_count records ([master |] moments of chunk_elems floats each)
  at::Tensor grad_staging;          // chunk_elems floats, for gradients not in host fp32
  // Shards on a GPU: the copy stream, and two pinned gradient chunks (one coming down while the
  // other is updated from).
  std::unique_ptr<DeviceStreams> streams;
  at::Tensor grad_pair[2];
  // The copy streams for the chunk copies of shard `s`, or null where they cannot run
  // asynchronously: its gradient and values on the host, or pageable staging (offload.pin_memory =
  // false) or `host_side` (the host memory the new values go up from) not pinned.
  DeviceStreams* copy_streams_for(const ParamShard& s, const at::Tensor& host_side);

  Impl(const OptimizerOptions& opt, const OffloadOptions& opts, int r, MemoryStats* m,
       std::shared_ptr<IoEngine> engine)
      : sgd(is_sgd(opt)),
        adam(checked_adam_options(opt)),
        sgdo(checked_sgd_options(opt)),
        state_arrays(sgd ? (sgdo.momentum != 0 ? 1 : 0) : 2),
        o(opts),
        rank(r),
        mem(m),
        state_pool(opts.pin_memory, nullptr),
        staging_pool(opts.pin_memory, m),
        io(std::move(engine)) {
    ZS_REQUIRE(o.target == OffloadTarget::kCpu || o.target == OffloadTarget::kNvme, UsageError,
               "OffloadedOptimizer needs OffloadOptions.target = CPU or NVME, got ", to_string(o.target));
    ZS_REQUIRE(o.block_size >= kDirectAlignment && o.block_size % kDirectAlignment == 0, UsageError,
               "OffloadOptions.block_size = ", o.block_size, " must be a positive multiple of ", kDirectAlignment);
    ZS_REQUIRE(o.buffer_count >= 2, UsageError, "OffloadOptions.buffer_count = ", o.buffer_count,
               " must be at least 2 (one chunk read while another is written)");
    ZS_REQUIRE(o.nvme_generations == 1 || o.nvme_generations == 2, UsageError, "OffloadOptions.nvme_generations = ",
               o.nvme_generations, " must be 1 or 2");
    path = o.simd == SimdPath::kAuto ? detect_simd() : o.simd;
    ZS_REQUIRE(simd_supported(path), UsageError, "OffloadOptions.simd = ", to_string(path),
               " cannot run on this CPU (flags: ", cpu_simd_flags(), ")");
    chunk_elems = o.block_size / static_cast<int64_t>(sizeof(float));
    if (o.target == OffloadTarget::kNvme) {
      dir = std::make_unique<OffloadDir>(o.nvme_path, "zeroshard-rank", rank, ".state.", "optimizer state");
      if (!io) {
        io = make_io_engine(IoOptions{o.io_backend, o.queue_depth, o.block_size});
      }
    }
  }

  double default_weight_decay() const { return sgd ? sgdo.weight_decay : adam.weight_decay; }
  // One update of elements [offset, offset + n) of a shard (pointers at `offset`); `first`: SGD's
  // momentum buffer holds nothing yet. m/v may be null where the optimizer has no such state.
  // With p_out (and m_out, v_out where m, v are), the new values and state go there and the
  // inputs stay as they were.
  void update_elements(const std::vector<ShardGroupRange>& runs, int64_t update, bool first, int64_t offset,
                       float* p, const float* g, float* m, float* v, int64_t n, float* p_out = nullptr,
                       float* m_out = nullptr, float* v_out = nullptr) const {
    if (sgd) {
      detail::sgd_update_runs(path, sgdo, runs, lr, first, offset, p, g, m, nullptr, cpu_optim::LowPrecision::kNone, n,
                              p_out, m_out);
    } else {
      detail::adam_update_runs(path, adam, runs, lr, update, offset, p, g, m, v, nullptr,
                               cpu_optim::LowPrecision::kNone, n, p_out, m_out, v_out);
    }
  }
  // Every step function takes the shards with the pager that brings their values in (offload.params)
  // and touches shards[i].param only between pager.acquire(i) and pager.release(i).
  void check_shards(const std::vector<ParamShard>& shards, ShardPager& pager);
  bool prepare_host_slot(const ParamShard& s, HostSlot& slot, bool in_place);
  void step_cpu(const std::vector<ParamShard>& shards, ShardPager& pager);
  // The update of one shard whose values are at hand (resident or acquired), into host slot `slot`;
  // `speculative`: into the slot's *_next arrays (a step during backward), counted when it ends.
  void update_host_shard(const ParamShard& s, HostSlot& slot, bool speculative = false);
  // A step whose shards are updated during backward (begin_shard_step .. finish/abandon).
  bool shard_step_open = false;
  void keep_speculated(const ParamShard& s, HostSlot& slot);
  void drop_speculated(const ParamShard& s, HostSlot& slot);
  // The update of one shard whose gradient or values are on a GPU, chunk by chunk: see step_cpu.
  // Returns false (nothing done) where the copies cannot run asynchronously (staging or master in
  // pageable memory: offload.pin_memory = false), for the synchronous loop to do it.
  bool update_device_shard(const ParamShard& s, HostSlot& slot, const std::vector<ShardGroupRange>& runs,
                           int64_t update, bool first, bool in_place, bool speculative);
  void step_nvme(const std::vector<ParamShard>& shards, ShardPager& pager);
  void prepare_nvme_state(const std::vector<ParamShard>& shards, ShardPager& pager);
  [[noreturn]] void fail_nvme_step(const std::vector<ParamShard>& shards, ShardPager& pager, size_t done,
                                   const Error& e);
  class NvmeShardPass;  // offload_nvme.cpp
  void nvme_shard(const ParamShard& s, detail::NvmeShardFiles& f, bool initialize,
                  const ShardOptimizerState* imported = nullptr);
  // NVME: the state records hold the fp32 master (decided at the first step). Not where the pager
  // keeps the master on the drive in as many generations as the records would
  // (ShardPager::master_generations): then the records hold the moments only and the step updates
  // the shard brought in through the pager, bracketed by its begin_step / commit / abandon.
  bool master_in_records = true;
  void apply_pending(const std::vector<ParamShard>& shards, ShardPager& pager);
  std::vector<at::Tensor> read_moments(detail::NvmeShardFiles& f);
  // The next shard after `i` with a gradient (shards.size() when none): read ahead while i updates.
  static size_t next_with_grad(const std::vector<ParamShard>& shards, size_t i) {
    for (++i; i < shards.size(); ++i) {
      if (shards[i].grad.defined()) return i;
    }
    return shards.size();
  }
  void ensure_buffers();
  std::unique_ptr<std::vector<ShardOptimizerState>> pending;
  std::string unwritten;  // step_cpu: the first parameter shard whose write-back failed
  // step_cpu failed midway: the gradients it was given (tensor, version), which only the retry that
  // completes the step may pass again.
  std::vector<std::pair<const void*, int64_t>> partial_grads;
  static std::vector<std::pair<const void*, int64_t>> grads_of(const std::vector<ParamShard>& shards) {
    std::vector<std::pair<const void*, int64_t>> out;
    for (const ParamShard& s : shards) {
      out.emplace_back(s.grad.defined() ? s.grad.unsafeGetTensorImpl() : nullptr,
                       s.grad.defined() ? static_cast<int64_t>(s.grad._version()) : -1);
    }
    return out;
  }
  std::string broken;     // one NVMe generation: why the state on disk is no longer a step's
  void restore_shard(const ParamShard& s, detail::NvmeShardFiles& f);
  void reseed_master(const ParamShard& s, detail::NvmeShardFiles& f);
  void read_record(detail::NvmeShardFiles& f, int gen, int64_t k, float* buf);
  double lr = 0;
};

}  // namespace zeroshard
