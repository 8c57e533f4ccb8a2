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
  // A shard on a GPU (not when initializing: no gradient is read, the values come down once): the
  // gradient's chunks come down ahead through two pinned buffers and each updated chunk goes up
  // from its record buffer on the copy stream, as in update_device_shard; a record buffer is read
  // into again only once its upload is done. Not run yet (no GPU here).
  DeviceStreams* st = initialize ? nullptr : copy_streams_for(s, buffers.front());
  std::unique_ptr<GradChunks> grads = st != nullptr ? std::make_unique<GradChunks>(*st, grad_pair, s.grad, C) : nullptr;
  std::vector<std::unique_ptr<StreamMark>> up(static_cast<size_t>(B));  // per record buffer: its last upload
  std::unique_ptr<StreamMark>* last_up = nullptr;
  auto finish_uploads = [&] {
    if (last_up == nullptr) return;
    (*last_up)->block(st->current());  // the shard's readers on the device follow the uploads
    GradChunks::wait_on_host(*last_up);  // the copy stream runs in order: all of them are done
  };
  auto wait_write = [&](int64_t k) {
    if (k >= 0 && write_pending[static_cast<size_t>(k)]) {
      write_pending[static_cast<size_t>(k)] = false;
      io->wait(writes[static_cast<size_t>(k)]);
      io_stats.bytes_written += f.record_bytes;
    }
  };
  try {
    if (grads) grads->fetch(0);
    for (int64_t k = 0; k < f.chunks; ++k) {
      if (!initialize) {
        for (; next_read < f.chunks && next_read <= k + lookahead; ++next_read) {
          wait_write(next_read - B);  // the buffer's previous record must be on disk first
          GradChunks::wait_on_host(up[static_cast<size_t>(next_read % B)]);  // and uploaded
          reads[static_cast<size_t>(next_read)] = f.files[src]->read(*io, next_read, 1, buf_of(next_read));
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
        f.files[src]->verify(k, 1, buf);
        const float* g = nullptr;
        if (grads) {
          g = grads->get(k * C);
          grads->fetch((k + 1) * C);  // into the other buffer, whose chunk the host has finished with
        } else if (host_fp32(s.grad)) {
          g = s.grad.data_ptr<float>() + k * C;
        } else {
          at::Tensor staged = grad_staging.narrow(0, 0, c);
          staged.copy_(s.grad.narrow(0, k * C, c));
          g = staged.data_ptr<float>();
        }
        update_elements(runs, update, first, k * C, p, g, m, v, c);
        if (host_fp32(s.param)) {
          std::memcpy(s.param.data_ptr<float>() + k * C, p, static_cast<size_t>(c) * sizeof(float));
        } else if (st != nullptr) {
          last_up = &up[static_cast<size_t>(k % B)];
          *last_up = st->copy_async(s.param.narrow(0, k * C, c), at::from_blob(p, {c}, at::kFloat));
        } else {
          s.param.narrow(0, k * C, c).copy_(at::from_blob(p, {c}, at::kFloat));
        }
      }
      writes[static_cast<size_t>(k)] = f.files[dst]->write(*io, k, 1, buf);
      write_pending[static_cast<size_t>(k)] = true;
    }
    for (int64_t k = 0; k < f.chunks; ++k) wait_write(k);
    finish_uploads();
  } catch (...) {
    try {
      io->wait_all();  // nothing may still write into our buffers
    } catch (...) {
    }
    for (const auto& mark : up) GradChunks::wait_on_host(mark);  // nor read from them
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
  for (int b = 0; b < o.buffer_count; ++b) {
    buffers.push_back(staging_pool.empty((1 + state_arrays) * chunk_elems, at::kFloat));
  }
  grad_staging = staging_pool.empty(chunk_elems, at::kFloat);
}

// Shards seen for the first time: write their initial state (master from the shard, zero moments)
// so every later step, and a rollback, has a complete previous generation to read. Others whose
// values were replaced since the last step take them as their master.
void OffloadedOptimizer::Impl::prepare_nvme_state(const std::vector<ParamShard>& shards, ShardPager& pager) {
  std::vector<bool> fresh(shards.size(), false);
  for (size_t i = 0; i < shards.size(); ++i) {
    detail::NvmeShardFiles& f = *files[i];
    if (f.initialized || !shards[i].grad.defined()) continue;
    pager.acquire(i, /*read=*/true, /*grad=*/false);
    nvme_shard(shards[i], f, /*initialize=*/true);
    pager.release(i, false);
    f.initialized = true;
    fresh[i] = true;
  }
  for (size_t i = 0; i < shards.size(); ++i) {
    if (!shards[i].values_replaced || fresh[i] || !shards[i].grad.defined()) continue;
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
void OffloadedOptimizer::Impl::fail_nvme_step(const std::vector<ParamShard>& shards, ShardPager& pager, size_t done,
                                              const Error& e) {
  const std::string where = "shard " + std::to_string(done) + " ('" + shards[std::min(done, shards.size() - 1)].name +
                            "')";
  if (o.nvme_generations == 1) {
    // In place: records of this shard (and every shard before it) hold this step's state, the
    // rest the previous step's.
    broken = "step " + std::to_string(steps + 1) + " failed at " + where + ": " + e.message();
    ZS_THROW(IoError, "offloaded optimizer ", broken, " (rank ", rank,
             "). With offload.nvme_generations = 1 the state is updated in place and is now partly this step's: "
             "restart from the last checkpoint (offload.nvme_generations = 2 keeps the previous step's state and "
             "rolls back)");
  }
  std::string rollback = "the parameters and optimizer state are as before this step; fix the cause and retry, "
                         "or save a checkpoint";
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
    rollback = std::string("rolling back failed too (") + e2.message() +
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
  size_t done = 0;
  try {
    for (; done < shards.size(); ++done) {
      if (!shards[done].grad.defined()) continue;
      // The update takes the master from the state file and only writes the shard: nothing to read
      // of it (an offloaded gradient is read, the next one ahead).
      pager.acquire(done, /*read=*/false);
      pager.prefetch(next_with_grad(shards, done), /*read=*/false);
      nvme_shard(shards[done], *files[done], /*initialize=*/false);
      pager.release(done, true);
    }
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
