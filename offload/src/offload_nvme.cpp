// SPDX-License-Identifier: Apache-2.0
// OffloadedOptimizer's NVMe target: the chunk pipeline (read ahead, update, write behind), checksum
// verification, and the rollback of a failed step. See offload_optimizer.h.

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "offload_impl.h"
#include "zeroshard/base/error.h"

namespace zeroshard {

// ---- NVMe target ----

void OffloadedOptimizer::Impl::read_record(detail::NvmeShardFiles& f, int gen, int64_t k, float* buf) {
  io->wait(f.files[gen]->read(*io, k, 1, buf));
  io_stats.bytes_read += f.record_bytes;
  f.files[gen]->verify(k, 1, buf);
}

// One shard through the chunk pipeline: record k+1.. read ahead while record k is updated and
// record k-1 written behind. `initialize`: the shard has no state yet; its records are built (the
// master from the shard where the records hold it, moments zero or imported) and written to
// generation `current`, without an update. Where the records hold no master, the update changes
// the shard's values in place (on the host: the shard is the store's, which keeps the master).
class OffloadedOptimizer::Impl::NvmeShardPass {
 public:
  NvmeShardPass(Impl& im, const ParamShard& s, detail::NvmeShardFiles& f, bool initialize,
                const ShardOptimizerState* imported)
      : im_(im),
        s_(s),
        f_(f),
        initialize_(initialize),
        imported_(imported),
        B_(static_cast<int>(im.buffers.size())),
        lookahead_(std::max(1, B_ - 2)),
        src_(f.current),
        dst_(initialize ? f.current : f.next()),
        C_(f.chunk_elems),
        update_(f.updates + 1),
        first_(!f.started),
        reads_(static_cast<size_t>(f.chunks), 0),
        writes_(static_cast<size_t>(f.chunks), 0),
        write_pending_(static_cast<size_t>(f.chunks), false),
        up_(static_cast<size_t>(B_)) {
    if (initialize_) return;
    runs_ = shard_runs(s, im.default_weight_decay());
    ZS_CHECK(f.master || host_fp32(s.param), "offloaded optimizer: shard '", s.name,
             "' holds its master outside the state files but is not a host fp32 tensor");
    // A shard on a GPU (the master in the records): the gradient's chunks come down ahead through
    // two pinned buffers and each updated chunk goes up from its record buffer on the copy stream,
    // as in update_device_shard; a record buffer is read into again only once its upload is done.
    st_ = f.master ? im.copy_streams_for(s, im.buffers.front()) : nullptr;
    if (st_ != nullptr) grads_ = std::make_unique<GradChunks>(*st_, im.grad_pair, s.grad, C_);
  }

  void run() {
    try {
      if (grads_) grads_->fetch(0);
      for (int64_t k = 0; k < f_.chunks; ++k) chunk(k);
      for (int64_t k = 0; k < f_.chunks; ++k) wait_write(k);
      finish_uploads();
    } catch (...) {
      drain();
      throw;
    }
  }

 private:
  void chunk(int64_t k) {
    const int64_t c = f_.chunk_numel(k);
    if (!f_.has_records()) {  // plain SGD, the master in the shard: nothing on the drive
      if (!initialize_) im_.update_elements(runs_, update_, first_, k * C_, param_at(k), gradient(k, c), nullptr,
                                            nullptr, c);
      return;
    }
    if (initialize_) {
      wait_write(k - B_);
    } else {
      read_ahead(k);
    }
    float* buf = buf_of(k);
    if (initialize_) {
      fill_initial(k, c, buf);
    } else {
      update(k, c, buf);
    }
    writes_[static_cast<size_t>(k)] = f_.files[dst_]->write(*im_.io, k, 1, buf);
    write_pending_[static_cast<size_t>(k)] = true;
  }

  void read_ahead(int64_t k) {
    for (; next_read_ < f_.chunks && next_read_ <= k + lookahead_; ++next_read_) {
      wait_write(next_read_ - B_);  // the buffer's previous record must be on disk first
      GradChunks::wait_on_host(up_[static_cast<size_t>(next_read_ % B_)]);  // and uploaded
      reads_[static_cast<size_t>(next_read_)] = f_.files[src_]->read(*im_.io, next_read_, 1, buf_of(next_read_));
    }
  }

  void fill_initial(int64_t k, int64_t c, float* buf) {
    std::memset(buf, 0, static_cast<size_t>(f_.record_bytes));
    if (f_.master) at::from_blob(buf, {c}, at::kFloat).copy_(s_.param.narrow(0, k * C_, c));
    if (imported_ == nullptr) return;
    for (size_t j = 0; j < imported_->tensors.size(); ++j) {
      at::from_blob(buf + f_.state_offset(static_cast<int>(j)), {c}, at::kFloat)
          .copy_(imported_->tensors[j].narrow(0, k * C_, c));
    }
  }

  void update(int64_t k, int64_t c, float* buf) {
    im_.io->wait(reads_[static_cast<size_t>(k)]);
    im_.io_stats.bytes_read += f_.record_bytes;
    f_.files[src_]->verify(k, 1, buf);
    const float* g = gradient(k, c);
    float* p = f_.master ? buf : param_at(k);
    float* m = im_.state_arrays >= 1 ? buf + f_.state_offset(0) : nullptr;
    float* v = im_.state_arrays >= 2 ? buf + f_.state_offset(1) : nullptr;
    im_.update_elements(runs_, update_, first_, k * C_, p, g, m, v, c);
    if (f_.master) store_values(k, c, p);
  }

  const float* gradient(int64_t k, int64_t c) {
    if (grads_) {
      const float* g = grads_->get(k * C_);
      grads_->fetch((k + 1) * C_);  // into the other buffer, whose chunk the host has finished with
      return g;
    }
    if (host_fp32(s_.grad)) return s_.grad.data_ptr<float>() + k * C_;
    at::Tensor staged = im_.grad_staging.narrow(0, 0, c);
    staged.copy_(s_.grad.narrow(0, k * C_, c));
    return staged.data_ptr<float>();
  }

  // The updated master chunk (in record buffer `p`) into the shard.
  void store_values(int64_t k, int64_t c, const float* p) {
    if (host_fp32(s_.param)) {
      std::memcpy(s_.param.data_ptr<float>() + k * C_, p, static_cast<size_t>(c) * sizeof(float));
    } else if (st_ != nullptr) {
      last_up_ = &up_[static_cast<size_t>(k % B_)];
      *last_up_ = st_->copy_async(s_.param.narrow(0, k * C_, c),
                                  at::from_blob(const_cast<float*>(p), {c}, at::kFloat));
    } else {
      s_.param.narrow(0, k * C_, c).copy_(at::from_blob(const_cast<float*>(p), {c}, at::kFloat));
    }
  }

  void wait_write(int64_t k) {
    if (k < 0 || !write_pending_[static_cast<size_t>(k)]) return;
    write_pending_[static_cast<size_t>(k)] = false;
    im_.io->wait(writes_[static_cast<size_t>(k)]);
    im_.io_stats.bytes_written += f_.record_bytes;
  }

  void finish_uploads() {
    if (last_up_ == nullptr) return;
    (*last_up_)->block(st_->current());  // the shard's readers on the device follow the uploads
    GradChunks::wait_on_host(*last_up_);  // the copy stream runs in order: all of them are done
  }

  // After a failure: nothing may still write into the buffers, nor read from them.
  void drain() {
    try {
      im_.io->wait_all();
    } catch (...) {
    }
    for (const auto& mark : up_) GradChunks::wait_on_host(mark);
  }

  float* param_at(int64_t k) const { return s_.param.data_ptr<float>() + k * C_; }
  float* buf_of(int64_t k) const { return im_.buffers[static_cast<size_t>(k % B_)].data_ptr<float>(); }

  Impl& im_;
  const ParamShard& s_;
  detail::NvmeShardFiles& f_;
  const bool initialize_;
  const ShardOptimizerState* imported_;
  const int B_;
  const int lookahead_;
  const int src_;
  const int dst_;
  const int64_t C_;
  const int64_t update_;
  const bool first_;  // SGD: the buffer is written whole by this update
  std::vector<ShardGroupRange> runs_;
  std::vector<IoEngine::Handle> reads_;
  std::vector<IoEngine::Handle> writes_;
  std::vector<bool> write_pending_;
  int64_t next_read_ = 0;
  DeviceStreams* st_ = nullptr;
  std::unique_ptr<GradChunks> grads_;
  std::vector<std::unique_ptr<StreamMark>> up_;  // per record buffer: its last upload
  std::unique_ptr<StreamMark>* last_up_ = nullptr;
};

void OffloadedOptimizer::Impl::nvme_shard(const ParamShard& s, detail::NvmeShardFiles& f, bool initialize,
                                          const ShardOptimizerState* imported) {
  NvmeShardPass(*this, s, f, initialize, imported).run();
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

// The shard's values were replaced since the last step (load_pretrained): its records take them as
// their master and keep their moments. Written to the other generation, which then becomes
// current, so a failure leaves the previous state whole (with one generation: in place).
void OffloadedOptimizer::Impl::reseed_master(const ParamShard& s, detail::NvmeShardFiles& f) {
  float* buf = buffers[0].data_ptr<float>();
  const int dst = f.next();
  for (int64_t k = 0; k < f.chunks; ++k) {
    const int64_t c = f.chunk_numel(k);
    read_record(f, f.current, k, buf);
    at::from_blob(buf, {c}, at::kFloat).copy_(s.param.narrow(0, k * f.chunk_elems, c));
    io->wait(f.files[dst]->write(*io, k, 1, buf));
    io_stats.bytes_written += f.record_bytes;
  }
  f.current = dst;
}

void OffloadedOptimizer::Impl::ensure_buffers() {
  if (!buffers.empty()) return;
  // A record's arrays: the moments, and the master where the records hold it (master_in_records,
  // decided at the first step, before any buffer is needed).
  const int arrays = (master_in_records ? 1 : 0) + state_arrays;
  for (int b = 0; b < o.buffer_count; ++b) buffers.push_back(staging_pool.empty(arrays * chunk_elems, at::kFloat));
  grad_staging = staging_pool.empty(chunk_elems, at::kFloat);
}

// Shards seen for the first time: write their initial state (the master from the shard where the
// records hold it, zero moments) so every later step, and a rollback, has a complete previous
// generation to read. Others whose values were replaced since the last step take them as their
// master (where the records hold one: otherwise the shard's values are the master already).
void OffloadedOptimizer::Impl::prepare_nvme_state(const std::vector<ParamShard>& shards, ShardPager& pager) {
  std::vector<bool> fresh(shards.size(), false);
  for (size_t i = 0; i < shards.size(); ++i) {
    detail::NvmeShardFiles& f = *files[i];
    if (f.initialized || !shards[i].grad.defined()) continue;
    if (f.master) pager.acquire(i, /*read=*/true, /*grad=*/false);
    nvme_shard(shards[i], f, /*initialize=*/true);
    if (f.master) pager.release(i, false);
    f.initialized = true;
    fresh[i] = true;
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    if (!files[i]->master || !shards[i].values_replaced || fresh[i] || !shards[i].grad.defined()) continue;
    pager.acquire(i, /*read=*/true, /*grad=*/false);
    reseed_master(shards[i], *files[i]);
    pager.release(i, false);
  }
}

// The step failed at shard `done` with `e`. With two generations every shard it touched gets the
// previous step's values back from its intact generation (update counts and `current` were not
// advanced): offloaded parameter shards are brought in, restored and written back, and one whose
// write-back fails keeps the restored values in memory (the pager's contract), so the training
// state is still whole. With one generation nothing can be rolled back. Throws IoError saying which.
// Where the records hold no master (master_in_records false), the pager abandons the step instead:
// its store's values, like the records' current generation, are the previous step's.
void OffloadedOptimizer::Impl::fail_nvme_step(const std::vector<ParamShard>& shards, ShardPager& pager, size_t done,
                                              const Error& e) {
  const std::string where = done < shards.size()
                                ? "shard " + std::to_string(done) + " ('" + shards[done].name + "')"
                                : std::string("committing the parameter shards");
  if (!master_in_records) pager.abandon();
  if (o.nvme_generations == 1) {
    // In place: records of this shard (and every shard before it) hold this step's state, the
    // rest the previous step's.
    broken = "step " + std::to_string(steps + 1) + " failed at " + where + ": " + e.message();
    ZS_THROW(IoError, "offloaded optimizer ", broken, " (rank ", rank,
             "). With offload.nvme_generations = 1 the state is updated in place and is now partly this step's: "
             "restart from the last checkpoint (offload.nvme_generations = 2 keeps the previous step's state and "
             "rolls back)");
  }
  std::string rollback = "The parameters and optimizer state are as before this step; fix the cause and retry, "
                         "or save a checkpoint";
  if (!master_in_records) {
    ZS_THROW(IoError, "offloaded optimizer step ", steps + 1, " failed on rank ", rank, " at ", where, ": ",
             e.message(), ". ", rollback);
  }
  std::string unwritten;
  try {
    for (size_t i = 0; i <= done && i < shards.size(); ++i) {
      if (!shards[i].grad.defined() || !files[i]->initialized) continue;
      pager.acquire(i, /*read=*/false, /*grad=*/false);  // the intact generation's master has every value
      restore_shard(shards[i], *files[i]);
      try {
        pager.release(i, true);
      } catch (const Error& e3) {
        unwritten = std::string(" (the restored parameters of shard ") + std::to_string(i) + " ('" + shards[i].name +
                    "') stay in memory until a write succeeds: " + e3.message() + ")";
      }
    }
  } catch (const Error& e2) {
    rollback = std::string("Rolling back failed too (") + e2.message() +
               "); the parameters of this rank are inconsistent: restart from the last checkpoint";
  }
  rollback += unwritten;
  ZS_THROW(IoError, "offloaded optimizer step ", steps + 1, " failed on rank ", rank, " at ", where, ": ", e.message(),
           ". ", rollback);
}

void OffloadedOptimizer::Impl::step_nvme(const std::vector<ParamShard>& shards, ShardPager& pager) {
  const auto t0 = std::chrono::steady_clock::now();
  ensure_buffers();
  prepare_nvme_state(shards, pager);
  // With the master in the records the update only writes the shard: nothing of it is read (an
  // offloaded gradient is, the next one ahead). Otherwise the shard is the master, read ahead,
  // updated in place and written into the store's other generation, which commit() makes current.
  const bool read = !master_in_records;
  if (read) pager.begin_step();  // outside the try: a failure here changed nothing
  size_t done = 0;
  try {
    for (; done < shards.size(); ++done) {
      if (!shards[done].grad.defined()) continue;
      pager.acquire(done, read);
      pager.prefetch(next_with_grad(shards, done), read);
      nvme_shard(shards[done], *files[done], /*initialize=*/false);
      pager.release(done, true);
    }
    if (read) pager.commit();
  } catch (const Error& e) {
    fail_nvme_step(shards, pager, done, e);
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    if (!shards[i].grad.defined()) continue;
    files[i]->current = files[i]->next();
    ++files[i]->updates;
    files[i]->started = true;
  }
  io_stats.step_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace zeroshard
