// OffloadedOptimizer: shard bookkeeping, the CPU (host tensors) and NVMe (streamed files) state
// stores, the chunk pipeline, and rollback of a failed NVMe step. See offload_optimizer.h.

#include "zeroshard/offload/offload_optimizer.h"
#include "zeroshard/core/config.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "adam_update.h"
#include "sgd_update.h"
#include "zeroshard/offload/cpu_sgd.h"
#include "zeroshard/base/crc32c.h"
#include "nvme_state.h"
#include "zeroshard/base/error.h"
#include "zeroshard/base/logging.h"
#include "zeroshard/io/pinned_pool.h"
#include "cpu_common.h"
#include "zeroshard/core/memory_stats.h"

namespace zeroshard {

namespace {

IoBackend io_backend_from(config::OffloadConfig::IoBackend b) {
  switch (b) {
    case config::OffloadConfig::IO_URING: return IoBackend::kIoUring;
    case config::OffloadConfig::LIBAIO: return IoBackend::kLibaio;
    case config::OffloadConfig::THREADS: return IoBackend::kThreads;
    default: return IoBackend::kAuto;
  }
}

bool is_sgd(const config::OptimizerConfig& cfg) { return cfg.type() == config::OptimizerConfig::SGD; }

// Adam's options for ADAM/ADAMW (validated there); unused defaults for SGD, and the reverse below.
CpuAdamOptions adam_options(const config::OptimizerConfig& cfg) {
  return is_sgd(cfg) ? CpuAdamOptions{} : CpuAdamOptions::from_config(cfg);
}

SgdOptions sgd_options(const config::OptimizerConfig& cfg) {
  return is_sgd(cfg) ? sgd_options_from_config(cfg) : SgdOptions{};
}

float* data_at(const at::Tensor& t, int64_t offset) { return t.defined() ? t.data_ptr<float>() + offset : nullptr; }

std::string describe_names(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "no state" : out;
}

bool host_fp32(const at::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous();
}

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
  void acquire(size_t, bool) override {}
  void release(size_t, bool) override {}
  void prefetch(size_t) override {}

 private:
  const std::vector<ParamShard>& shards_;
};

}  // namespace

OffloadOptions OffloadOptions::from_config(const config::OffloadConfig& cfg) {
  OffloadOptions o;
  o.target = static_cast<OffloadTarget>(cfg.optimizer());  // the same values (sharding/src/options.cpp)
  o.params = static_cast<OffloadTarget>(cfg.params());
  ZS_REQUIRE(o.params == OffloadTarget::kDevice || o.target != OffloadTarget::kDevice, ConfigError,
             "offload.params = ", to_string(o.params),
             " needs offload.optimizer = CPU or NVME: the fp32 master and the moments live with the offloaded "
             "optimizer, whose step streams the parameter shards one at a time");
  o.nvme_path = cfg.nvme_path();
  o.pin_memory = cfg.pin_memory();
  o.block_size = cfg.block_size();
  o.queue_depth = cfg.queue_depth();
  o.buffer_count = cfg.buffer_count();
  o.io_backend = io_backend_from(cfg.io_backend());
  o.nvme_generations = cfg.nvme_generations();
  ZS_REQUIRE(o.target != OffloadTarget::kNvme || !o.nvme_path.empty(), ConfigError,
             "offload.optimizer = NVME needs offload.nvme_path (a directory on the NVMe drive)");
  return o;
}

// Per position in the shard list.
struct HostSlot {
  int64_t numel = 0;
  int64_t updates = 0;
  bool started = false;  // state allocated (first update or import)
  int64_t step_done = 0;  // the optimizer step whose update the slot holds (a retried step skips it)
  at::Tensor master;     // host fp32 master when the shard is not a host fp32 tensor
  at::Tensor m, v;       // Adam: exp_avg, exp_avg_sq; SGD: m = momentum_buffer (when momentum > 0)
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
  std::vector<at::Tensor> buffers;  // buffer_count records of 3 * chunk_elems floats
  at::Tensor grad_staging;          // chunk_elems floats, for gradients not in host fp32

  Impl(const config::OptimizerConfig& opt, const OffloadOptions& opts, int r, MemoryStats* m,
       std::shared_ptr<IoEngine> engine)
      : sgd(is_sgd(opt)),
        adam(adam_options(opt)),
        sgdo(sgd_options(opt)),
        state_arrays(sgd ? (sgdo.momentum != 0 ? 1 : 0) : 2),
        o(opts),
        rank(r),
        mem(m),
        state_pool(opts.pin_memory, nullptr),
        staging_pool(opts.pin_memory, m),
        io(std::move(engine)) {
    ZS_REQUIRE(o.target == OffloadTarget::kCpu || o.target == OffloadTarget::kNvme,
               ConfigError, "OffloadedOptimizer needs offload.optimizer = CPU or NVME, got ",
               to_string(o.target));
    ZS_REQUIRE(o.block_size >= kDirectAlignment && o.block_size % kDirectAlignment == 0, ConfigError,
               "offload.block_size = ", o.block_size, " must be a positive multiple of ", kDirectAlignment);
    ZS_REQUIRE(o.buffer_count >= 2, ConfigError, "offload.buffer_count = ", o.buffer_count,
               " must be at least 2 (one chunk read while another is written)");
    ZS_REQUIRE(o.nvme_generations == 1 || o.nvme_generations == 2, ConfigError, "offload.nvme_generations = ",
               o.nvme_generations, " must be 1 or 2");
    path = o.simd == SimdPath::kAuto ? detect_simd() : o.simd;
    ZS_REQUIRE(simd_supported(path), UsageError, "OffloadOptions.simd = ", to_string(path),
               " cannot run on this CPU (flags: ", cpu_simd_flags(), ")");
    chunk_elems = o.block_size / static_cast<int64_t>(sizeof(float));
    if (o.target == OffloadTarget::kNvme) {
      dir = std::make_unique<OffloadDir>(o.nvme_path, "zeroshard-rank", rank, ".state.", "optimizer state");
      if (!io) {
        IoOptions io_opts;
        io_opts.backend = o.io_backend;
        io_opts.queue_depth = o.queue_depth;
        io_opts.block_size = o.block_size;
        io = make_io_engine(io_opts);
      }
    }
  }

  double default_weight_decay() const { return sgd ? sgdo.weight_decay : adam.weight_decay; }
  // One update of elements [offset, offset + n) of a shard (pointers at `offset`); `first`: SGD's
  // momentum buffer holds nothing yet. m/v may be null where the optimizer has no such state.
  void update_elements(const std::vector<ShardGroupRange>& runs, int64_t update, bool first, int64_t offset,
                       float* p, const float* g, float* m, float* v, int64_t n) const {
    if (sgd) {
      detail::sgd_update_runs(path, sgdo, runs, lr, first, offset, p, g, m, nullptr, cpu_optim::LowPrecision::kNone, n);
    } else {
      detail::adam_update_runs(path, adam, runs, lr, update, offset, p, g, m, v, nullptr,
                               cpu_optim::LowPrecision::kNone, n);
    }
  }
  // Every step function takes the shards with the pager that brings their values in (offload.params)
  // and touches shards[i].param only between pager.acquire(i) and pager.release(i).
  void check_shards(const std::vector<ParamShard>& shards, ShardPager& pager);
  void step_cpu(const std::vector<ParamShard>& shards, ShardPager& pager);
  void step_nvme(const std::vector<ParamShard>& shards, ShardPager& pager);
  void nvme_shard(const ParamShard& s, detail::NvmeShardFiles& f, bool initialize,
                  const ShardOptimizerState* imported = nullptr);
  void apply_pending(const std::vector<ParamShard>& shards, ShardPager& pager);
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
  void read_record(detail::NvmeShardFiles& f, int gen, int64_t k, float* buf);
  void verify(const detail::NvmeShardFiles& f, int gen, int64_t k, const float* buf) const;
  double lr = 0;
};

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
      for (size_t i = 0; i < shards.size(); ++i) {
        files.push_back(std::make_unique<detail::NvmeShardFiles>(
            dir->path(), i, shards[i].name, pager.numel(i), chunk_elems, state_arrays, o.direct_io,
            o.nvme_generations));
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
    const int64_t n = slot.numel;
    const bool in_place = host_fp32(s.param);
    if (!slot.started) {
      if (!sgd) {
        slot.m = state_pool.empty(n, at::kFloat).zero_();
        slot.v = state_pool.empty(n, at::kFloat).zero_();
      }
      if (!in_place) slot.master = state_pool.empty(n, at::kFloat).copy_(s.param);
      slot.started = true;
    }
    // SGD: the momentum buffer is created by its first update, which writes it whole (as torch's
    // clone of d_p); an imported buffer is continued.
    const bool first = sgd && state_arrays == 1 && !slot.m.defined();
    if (first) slot.m = state_pool.empty(n, at::kFloat);
    const int64_t update = slot.updates + 1;
    float* p = in_place ? s.param.data_ptr<float>() : slot.master.data_ptr<float>();
    const std::vector<ShardGroupRange> runs = shard_runs(s, default_weight_decay());
    if (in_place && host_fp32(s.grad)) {
      update_elements(runs, update, first, 0, p, s.grad.data_ptr<float>(), data_at(slot.m, 0), data_at(slot.v, 0), n);
    } else {
      // Device-resident shard (or a gradient elsewhere): chunks of the gradient come to the host
      // through pinned staging, chunks of the new values go back.
      if (!grad_staging.defined()) grad_staging = staging_pool.empty(chunk_elems, at::kFloat);
      for (int64_t off = 0; off < n; off += chunk_elems) {
        const int64_t c = std::min(chunk_elems, n - off);
        at::Tensor g = grad_staging.narrow(0, 0, c);
        g.copy_(s.grad.narrow(0, off, c));
        update_elements(runs, update, first, off, p + off, g.data_ptr<float>(), data_at(slot.m, off),
                        data_at(slot.v, off), c);
        if (!in_place) s.param.narrow(0, off, c).copy_(slot.master.narrow(0, off, c));
      }
    }
    slot.updates = update;
    slot.step_done = steps + 1;
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

// ---- NVMe target ----

void OffloadedOptimizer::Impl::verify(const detail::NvmeShardFiles& f, int gen, int64_t k, const float* buf) const {
  const uint32_t got = crc32c(buf, static_cast<size_t>(f.record_bytes));
  const uint32_t want = f.crc[gen][static_cast<size_t>(k)];
  ZS_REQUIRE(got == want, IoError, "offloaded optimizer state corrupted: '", f.paths[gen], "' chunk ", k,
             " at offset ", k * f.record_bytes, " (", f.record_bytes, " bytes) has CRC-32C ", got,
             ", the engine wrote ", want,
             "; the file was changed or truncated behind the engine's back (rank ", rank,
             "). Restart from the last checkpoint");
}

void OffloadedOptimizer::Impl::read_record(detail::NvmeShardFiles& f, int gen, int64_t k, float* buf) {
  io->wait(io->submit_read(*f.files[gen], buf, f.record_bytes, k * f.record_bytes));
  io_stats.bytes_read += f.record_bytes;
  verify(f, gen, k, buf);
}

// Streams one shard: record k+1.. read ahead while record k is updated and record k-1 written.
// initialize: the shard has no state yet; records are built from the shard (master) and zero
// moments and written to generation `current`, without updating.
void OffloadedOptimizer::Impl::nvme_shard(const ParamShard& s, detail::NvmeShardFiles& f, bool initialize,
                                          const ShardOptimizerState* imported) {
  const int B = static_cast<int>(buffers.size());
  const int lookahead = std::max(1, B - 2);
  const int src = f.current;
  const int dst = initialize ? f.current : f.next();
  const int64_t C = f.chunk_elems;
  const int64_t update = f.updates + 1;
  const std::vector<ShardGroupRange> runs = shard_runs(s, default_weight_decay());
  const bool first = !f.started;  // SGD: the buffer is written whole by this update
  std::vector<IoEngine::Handle> reads(static_cast<size_t>(f.chunks), 0);
  std::vector<IoEngine::Handle> writes(static_cast<size_t>(f.chunks), 0);
  std::vector<bool> write_pending(static_cast<size_t>(f.chunks), false);
  int64_t next_read = 0;
  auto buf_of = [&](int64_t k) { return buffers[static_cast<size_t>(k % B)].data_ptr<float>(); };
  auto wait_write = [&](int64_t k) {
    if (k >= 0 && write_pending[static_cast<size_t>(k)]) {
      write_pending[static_cast<size_t>(k)] = false;
      io->wait(writes[static_cast<size_t>(k)]);
      io_stats.bytes_written += f.record_bytes;
    }
  };
  try {
    for (int64_t k = 0; k < f.chunks; ++k) {
      if (!initialize) {
        for (; next_read < f.chunks && next_read <= k + lookahead; ++next_read) {
          wait_write(next_read - B);  // the buffer's previous record must be on disk first
          reads[static_cast<size_t>(next_read)] =
              io->submit_read(*f.files[src], buf_of(next_read), f.record_bytes, next_read * f.record_bytes);
        }
      } else {
        wait_write(k - B);
      }
      float* buf = buf_of(k);
      const int64_t c = f.chunk_numel(k);
      float* p = buf;
      float* m = state_arrays >= 1 ? buf + C : nullptr;
      float* v = state_arrays >= 2 ? buf + 2 * C : nullptr;
      if (initialize) {
        std::memset(buf, 0, static_cast<size_t>(f.record_bytes));
        at::from_blob(p, {c}, at::kFloat).copy_(s.param.narrow(0, k * C, c));
        if (imported != nullptr) {
          for (size_t j = 0; j < imported->tensors.size(); ++j) {
            at::from_blob(buf + (1 + static_cast<int64_t>(j)) * C, {c}, at::kFloat)
                .copy_(imported->tensors[j].narrow(0, k * C, c));
          }
        }
      } else {
        io->wait(reads[static_cast<size_t>(k)]);
        io_stats.bytes_read += f.record_bytes;
        verify(f, src, k, buf);
        const float* g = nullptr;
        if (host_fp32(s.grad)) {
          g = s.grad.data_ptr<float>() + k * C;
        } else {
          at::Tensor staged = grad_staging.narrow(0, 0, c);
          staged.copy_(s.grad.narrow(0, k * C, c));
          g = staged.data_ptr<float>();
        }
        update_elements(runs, update, first, k * C, p, g, m, v, c);
        if (host_fp32(s.param)) {
          std::memcpy(s.param.data_ptr<float>() + k * C, p, static_cast<size_t>(c) * sizeof(float));
        } else {
          s.param.narrow(0, k * C, c).copy_(at::from_blob(p, {c}, at::kFloat));
        }
      }
      f.crc[dst][static_cast<size_t>(k)] = crc32c(buf, static_cast<size_t>(f.record_bytes));
      writes[static_cast<size_t>(k)] = io->submit_write(*f.files[dst], buf, f.record_bytes, k * f.record_bytes);
      write_pending[static_cast<size_t>(k)] = true;
    }
    for (int64_t k = 0; k < f.chunks; ++k) wait_write(k);
  } catch (...) {
    try {
      io->wait_all();  // nothing may still write into our buffers
    } catch (...) {
    }
    throw;
  }
}

// Puts the master values of generation `current` (the last completed step) back into the shard.
void OffloadedOptimizer::Impl::restore_shard(const ParamShard& s, detail::NvmeShardFiles& f) {
  float* buf = buffers[0].data_ptr<float>();
  for (int64_t k = 0; k < f.chunks; ++k) {
    const int64_t c = f.chunk_numel(k);
    read_record(f, f.current, k, buf);
    s.param.narrow(0, k * f.chunk_elems, c).copy_(at::from_blob(buf, {c}, at::kFloat));
  }
}

// Imported state (a checkpoint) replaces the current one: host moments (CPU), or fresh files
// written from the shards and the imported moments (NVME).
void OffloadedOptimizer::Impl::apply_pending(const std::vector<ParamShard>& shards, ShardPager& pager) {
  if (!pending) return;
  ZS_REQUIRE(pending->size() == shards.size(), UsageError, "OffloadedOptimizer: the imported state has ",
             pending->size(), " shard positions, the step got ", shards.size(), " shards");
  for (size_t i = 0; i < shards.size(); ++i) {
    for (const at::Tensor& t : (*pending)[i].tensors) {
      ZS_REQUIRE(t.numel() == pager.numel(i), UsageError, "OffloadedOptimizer: imported state of shard ", i, " ('",
                 shards[i].name, "') has ", t.numel(), " elements, the shard has ", pager.numel(i));
    }
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    const ShardOptimizerState& st = (*pending)[i];
    if (o.target == OffloadTarget::kCpu) {
      HostSlot& slot = host[i];
      slot.updates = st.updates;
      slot.step_done = 0;
      slot.m = slot.v = slot.master = at::Tensor();
      slot.started = false;
      if (!st.tensors.empty()) {
        slot.m = state_pool.empty(slot.numel, at::kFloat).copy_(st.tensors[0]);
        if (st.tensors.size() > 1) slot.v = state_pool.empty(slot.numel, at::kFloat).copy_(st.tensors[1]);
        pager.acquire(i);
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
        pager.acquire(i);
        nvme_shard(shards[i], f, /*initialize=*/true, &st);
        pager.release(i, false);
        f.initialized = true;
        f.started = true;
      }
    }
  }
  pending.reset();
}

void OffloadedOptimizer::Impl::ensure_buffers() {
  if (!buffers.empty()) return;
  for (int b = 0; b < o.buffer_count; ++b) {
    buffers.push_back(staging_pool.empty((1 + state_arrays) * chunk_elems, at::kFloat));
  }
  grad_staging = staging_pool.empty(chunk_elems, at::kFloat);
}

void OffloadedOptimizer::Impl::step_nvme(const std::vector<ParamShard>& shards, ShardPager& pager) {
  const auto t0 = std::chrono::steady_clock::now();
  ensure_buffers();
  // Shards seen for the first time: write their initial state (master from the shard, zero
  // moments) so every later step, and a rollback, has a complete previous generation to read.
  for (size_t i = 0; i < shards.size(); ++i) {
    detail::NvmeShardFiles& f = *files[i];
    if (f.initialized || !shards[i].grad.defined()) continue;
    pager.acquire(i);
    nvme_shard(shards[i], f, /*initialize=*/true);
    pager.release(i, false);
    f.initialized = true;
  }
  size_t done = 0;
  try {
    for (; done < shards.size(); ++done) {
      if (!shards[done].grad.defined()) continue;
      // The update takes the master from the state file and only writes the shard: nothing to read.
      pager.acquire(done, /*read=*/false);
      nvme_shard(shards[done], *files[done], /*initialize=*/false);
      pager.release(done, true);
    }
  } catch (const Error& e) {
    if (o.nvme_generations == 1) {
      // In place: records of this shard (and every shard before it) hold this step's state, the
      // rest the previous step's; nothing can be rolled back.
      broken = "step " + std::to_string(steps + 1) + " failed at shard " + std::to_string(done) + " ('" +
               shards[std::min(done, shards.size() - 1)].name + "'): " + e.message();
      ZS_THROW(IoError, "offloaded optimizer ", broken, " (rank ", rank,
               "). With offload.nvme_generations = 1 the state is updated in place and is now partly this step's: "
               "restart from the last checkpoint (offload.nvme_generations = 2 keeps the previous step's state and "
               "rolls back)");
    }
    // Roll back: every shard touched by this step gets the previous step's values back from its
    // intact generation; update counts and `current` were not advanced. Offloaded parameter
    // shards are brought in, restored and written back; one whose write-back fails keeps the
    // restored values in memory (the pager's contract), so the training state is still whole.
    std::string rollback = "the parameters and optimizer state are as before this step; fix the cause and retry, "
                           "or save a checkpoint";
    std::string unwritten;
    try {
      for (size_t i = 0; i <= done && i < shards.size(); ++i) {
        if (!shards[i].grad.defined() || !files[i]->initialized) continue;
        pager.acquire(i, /*read=*/false);  // the master in the intact generation has every value
        restore_shard(shards[i], *files[i]);
        try {
          pager.release(i, true);
        } catch (const Error& e3) {
          unwritten = std::string(" (the restored parameters of shard ") + std::to_string(i) + " ('" +
                      shards[i].name + "') stay in memory until a write succeeds: " + e3.message() + ")";
        }
      }
    } catch (const Error& e2) {
      rollback = std::string("rolling back failed too (") + e2.message() +
                 "); the parameters of this rank are inconsistent: restart from the last checkpoint";
    }
    rollback += unwritten;
    ZS_THROW(IoError, "offloaded optimizer step ", steps + 1, " failed on rank ", rank, " at shard ",
             done, " ('", shards[std::min(done, shards.size() - 1)].name, "'): ", e.message(), ". ", rollback);
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    if (!shards[i].grad.defined()) continue;
    files[i]->current = files[i]->next();
    ++files[i]->updates;
    files[i]->started = true;
  }
  io_stats.step_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// ---- the optimizer ----

OffloadedOptimizer::OffloadedOptimizer(const config::OptimizerConfig& optimizer, const OffloadOptions& options,
                                       int rank, MemoryStats* mem, std::shared_ptr<IoEngine> io)
    : ShardedOptimizer(optimizer.lr()),
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
  for (const auto& f : impl_->files) {
    if (f->initialized) p.nvme += f->bytes_on_disk();
  }
  return p;
}

std::string OffloadedOptimizer::describe() const {
  const auto& o = impl_->o;
  std::string s = std::string("Offloaded") + (impl_->sgd ? "Sgd" : impl_->adam.adamw ? "AdamW" : "Adam") +
                  "(lr=" + cpu_optim::format_double(lr_);
  if (impl_->sgd) {
    s += ", momentum=" + cpu_optim::format_double(impl_->sgdo.momentum) +
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
    // SGD's buffer before its first update is no state (the next update starts it afresh).
    if (f.initialized && im.state_arrays > 0 && (!im.sgd || f.started)) {
      im.ensure_buffers();
      for (int j = 0; j < im.state_arrays; ++j) st.tensors.push_back(at::empty({f.numel}, at::kFloat));
      float* buf = im.buffers[0].data_ptr<float>();
      for (int64_t k = 0; k < f.chunks; ++k) {
        const int64_t c = f.chunk_numel(k);
        im.read_record(f, f.current, k, buf);
        for (int j = 0; j < im.state_arrays; ++j) {
          std::memcpy(st.tensors[static_cast<size_t>(j)].data_ptr<float>() + k * f.chunk_elems,
                      buf + (1 + j) * f.chunk_elems, static_cast<size_t>(c) * sizeof(float));
        }
      }
    }
    out.push_back(std::move(st));
  }
  return out;
}

void OffloadedOptimizer::import_state(std::vector<ShardOptimizerState> state, int64_t steps) {
  const std::vector<std::string> names = state_names();
  for (size_t i = 0; i < state.size(); ++i) {
    ZS_REQUIRE(state[i].tensors.empty() || state[i].tensors.size() == names.size(), UsageError,
               "OffloadedOptimizer import_state: position ", i, " has ", state[i].tensors.size(),
               " state tensors; expected none or ", names.size(), " (", describe_names(names), ")");
    for (at::Tensor& t : state[i].tensors) t = t.to(at::kCPU, at::kFloat).contiguous();
  }
  impl_->pending = std::make_unique<std::vector<ShardOptimizerState>>(std::move(state));
  impl_->steps = steps;
}

std::string OffloadedOptimizer::rank_dir() const { return impl_->dir ? impl_->dir->path() : std::string(); }

OffloadedOptimizer::IoStats OffloadedOptimizer::io_stats() const { return impl_->io_stats; }

std::unique_ptr<ShardedOptimizer> make_engine_optimizer(const config::Config& cfg, int rank, MemoryStats* mem) {
  const config::OffloadConfig& off = cfg.offload();
  if (off.optimizer() == config::OffloadConfig::DEVICE) {
    (void)OffloadOptions::from_config(off);  // rejects offload.params without an offloaded optimizer
    return make_optimizer(cfg.optimizer());
  }
  return std::make_unique<OffloadedOptimizer>(cfg.optimizer(), OffloadOptions::from_config(off), rank, mem);
}

}  // namespace zeroshard
