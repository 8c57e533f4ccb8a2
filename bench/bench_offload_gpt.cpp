// SPDX-License-Identifier: Apache-2.0
// bench_offload_gpt: the largest GPT this machine trains, with the parameter shards, the gradient
// shards and the optimizer state on NVMe (ZeRO-Infinity: offload.params, offload.grads and
// offload.optimizer = NVME), measured against the raw drive in the same run.
//
//   bench_offload_gpt --nvme-path DIR [--steps 3] [--drive-mib 4096]
//                     [--set model.n_layer=24 --set model.d_model=2048 ...]
//
// Part 1 writes and reads --drive-mib MiB under DIR with O_DIRECT through the same async I/O engine
// the offload uses (1 MiB requests, 32 in flight): the drive's bandwidth. Part 2 builds the GPT of
// train_gpt under a ShardedInit (each block's shard goes to its file as soon as the block is
// built), trains --steps steps on one fixed batch (1 x model.seq_len tokens by default; the loss
// must go down), and prints per step the time of forward + backward and of the optimizer step, the
// bytes the offload moved and what the drive's bandwidth makes of them (the bound), then the
// ratios to the limits measured in the same run: bytes moved / the placement's necessary bytes, and
// step time / max(the same step's compute with everything resident, extrapolated from 1- and
// 2-block models trained first, the necessary bytes at the drive's bandwidth, reads and writes one
// after the other; also against the drive doing both at once: the longer of the two); then the
// process's peak resident memory (VmHWM, the kernel's count) next to where the model state lives:
// in memory (the engine's categories), pinned staging, on disk (bytes per parameter).
// Defaults (each overridable with --set): 24 layers, d_model 2048, 16 heads, 128 tokens, vocab 256
// (1.2 billion parameters), bf16 compute (param_dtype), activation checkpointing every block, state,
// parameters and gradients on NVMe, AdamW at lr 2e-5. Ends with one JSON line.

#include <ATen/ops/randint.h>
#include <torch/nn/functional/loss.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "bench_util.h"
#include "zeroshard/models/gpt.h"
#include "zeroshard/base/cli.h"
#include "zeroshard/base/error.h"
#include "zeroshard/base/format.h"
#include "zeroshard/config/resolve.h"
#include "zeroshard/config/main.h"
#include "zeroshard/core/memory_stats.h"
#include "zeroshard/core/session.h"
#include "zeroshard/io/aio.h"
#include "zeroshard/io/pinned_pool.h"
#include "zeroshard/offload/offload_optimizer.h"
#include "zeroshard/engine/engine.h"
#include "zeroshard/store/shard_store.h"
#include "zeroshard/engine/sharded_init.h"

namespace zs = zeroshard;
namespace zm = zeroshard::models;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct DriveFigures {
  double write_gbs = 0, read_gbs = 0;
};

// Sequential O_DIRECT write, sync, then read of `bytes` under `dir`, 1 MiB requests, 32 in flight.
DriveFigures measure_drive(const std::string& dir, int rank, int64_t bytes) {
  zs::IoOptions o;
  o.block_size = 1 << 20;
  o.queue_depth = 32;
  auto io = zs::make_io_engine(o);
  const std::string path = dir + "/zeroshard-drive-test-rank" + std::to_string(rank) + ".bin";
  zs::PinnedPool pool(false);
  const int64_t chunk = int64_t{64} << 20;  // 64 MiB per submit, one buffer reused
  at::Tensor buf = pool.empty(chunk, at::kByte);
  std::memset(buf.data_ptr(), 0x5a, static_cast<size_t>(chunk));
  DriveFigures f;
  {
    zs::AioFile file(path, zs::AioFile::kReadWrite | zs::AioFile::kCreate | zs::AioFile::kTruncate, true);
    file.allocate(bytes);
    auto t = Clock::now();
    for (int64_t off = 0; off < bytes; off += chunk) io->wait(io->submit_write(file, buf.data_ptr(), chunk, off));
    file.sync();
    f.write_gbs = static_cast<double>(bytes) / seconds_since(t) / 1e9;
    t = Clock::now();
    for (int64_t off = 0; off < bytes; off += chunk) io->wait(io->submit_read(file, buf.data_ptr(), chunk, off));
    f.read_gbs = static_cast<double>(bytes) / seconds_since(t) / 1e9;
  }
  std::filesystem::remove(path);
  return f;
}

// The bytes this placement cannot do without per step and rank, for `numel` parameters of one
// rank: the parameter shards read for forward and again for backward (the recomputation shares
// backward's gather), the gradient written once and read once, the fp32 master and the optimizer's
// state arrays read and written once (the master: in the parameter store when the parameters are
// offloaded, else in the optimizer's records).
struct NecessaryBytes {
  double read = 0, written = 0;
};
NecessaryBytes necessary_bytes(const zs::RunOptions& o, int64_t numel) {
  const double n = static_cast<double>(numel);
  const bool params = o.sharding.offload_params.target == zs::OffloadTarget::kNvme;
  const bool grads = o.sharding.offload_grads.target == zs::OffloadTarget::kNvme;
  const bool state = o.offload.target == zs::OffloadTarget::kNvme;
  const int arrays = o.optimizer.type == zs::OptimizerOptions::Type::kSgd ? (o.optimizer.momentum > 0 ? 1 : 0) : 2;
  NecessaryBytes b;
  if (params) {
    // Gathers read the param_dtype copy when one is kept beside the master (written by the step).
    const double gathered = o.sharding.keep_param_dtype_shard ? c10::elementSize(o.sharding.param_dtype) : 4.0;
    b.read += 2 * gathered * n;
    if (o.sharding.keep_param_dtype_shard) b.written += gathered * n;
  }
  if (grads) {
    b.read += 4 * n;
    b.written += 4 * n;
  }
  if (params || state) {
    b.read += 4 * n;
    b.written += 4 * n;
  }
  if (state) {
    b.read += 4.0 * arrays * n;
    b.written += 4.0 * arrays * n;
  }
  return b;
}

// Seconds of one step (forward, backward, clip, optimizer step) of the same GPT with `layers`
// blocks and nothing offloaded (the optimizer's state in host memory: the same fused kernel as the
// NVMe step's), the fastest of 3 after a warm-up: the compute the offloaded step would need if the
// drive cost nothing.
double resident_step_seconds(zs::Session& session, const zs::RunOptions& o, int layers, const at::Tensor& x,
                             const at::Tensor& y, int64_t vocab) {
  zs::ShardingOptions so = o.sharding;
  so.offload_params.target = zs::OffloadTarget::kDevice;
  so.offload_grads.target = zs::OffloadTarget::kDevice;
  so.keep_param_dtype_shard = false;
  zs::OffloadOptions off = o.offload;
  off.target = zs::OffloadTarget::kCpu;
  off.params = zs::OffloadTarget::kDevice;
  zm::GptOptions mo = o.model;
  mo.n_layer = layers;
  mo.device = session.device();
  at::manual_seed(o.session.seed);
  zm::Gpt model(mo);
  zs::ShardingEngine engine(session, model.ptr(), so);
  auto opt = zs::make_engine_optimizer(o.optimizer, off, session.rank(), &engine.memory());
  double best = 0;
  for (int i = 0; i < 4; ++i) {
    const auto t = Clock::now();
    at::Tensor loss = engine.forward(
        [&] { return torch::cross_entropy_loss(model->forward(x).view({-1, vocab}).to(at::kFloat), y); });
    loss.backward();
    engine.clip_grad_norm(1.0);
    engine.step(*opt);
    engine.zero_grad();
    const double s = seconds_since(t);
    if (i == 1 || (i > 1 && s < best)) best = s;
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const zs::Program program{"bench_offload_gpt",
                            {zs::keys::engine(), {"model", "activation_checkpointing", "optimizer", "offload",
                                                  "train.batch_size"}}};
  return zs::run_main(argc, argv, program, [](zs::Session& session, const zs::Run& run) {
    int steps = 3;
    int64_t drive_mib = 4096;
    std::string nvme_path;
    zs::cli::App app("bench_offload_gpt",
                     "Trains a GPT with its parameter shards and optimizer state on NVMe, measures the raw drive in "
                     "the same run, and prints step times, the bound (drive or compute) and where every byte lives.");
    app.usage("mpirun -n N bench_offload_gpt --nvme-path DIR [OPTIONS]");
    app.add_text("--nvme-path", &nvme_path, "folder on the drive for the offload files (required)", "DIR");
    app.add_int("--steps", &steps, "optimizer steps (default 3)", 1);
    app.add_int("--drive-mib", &drive_mib, "MiB written and read to measure the drive (default 4096)", 64);
    app.add_config_options();
    if (!app.parse(run.args, session.rank() == 0)) return 0;
    ZS_REQUIRE(!nvme_path.empty(), zs::UsageError, "bench_offload_gpt needs --nvme-path DIR (a folder on the drive)");
    zs::Config cfg = run.config;  // with the benchmark's defaults where it sets nothing
    auto& m = *cfg.mutable_model();
    if (!m.has_n_layer()) m.set_n_layer(24);
    if (!m.has_d_model()) m.set_d_model(2048);
    if (!m.has_n_head()) m.set_n_head(16);
    if (!m.has_seq_len()) m.set_seq_len(128);
    if (!m.has_dropout()) m.set_dropout(0);
    // Adam's first steps move every weight by about lr, all at once and without warm-up: 1e-3 (the
    // config's default) overshoots on a fresh billion-parameter model, and at 2.75B parameters so
    // did 1e-4 by the third step on one batch (measured); 2e-5 goes down step after step.
    if (!cfg.optimizer().has_lr()) cfg.mutable_optimizer()->set_lr(2e-5);
    if (!cfg.precision().has_param_dtype()) cfg.mutable_precision()->set_param_dtype(zs::config::PrecisionConfig::BF16);
    if (!cfg.activation_checkpointing().has_enabled()) cfg.mutable_activation_checkpointing()->set_enabled(true);
    auto& off = *cfg.mutable_offload();
    if (!off.has_optimizer()) off.set_optimizer(zs::config::OffloadConfig::NVME);
    if (!off.has_params()) off.set_params(zs::config::OffloadConfig::NVME);
    if (!off.has_grads()) off.set_grads(zs::config::OffloadConfig::NVME);
    off.set_nvme_path(nvme_path);
    zs::validate_config(cfg);
    const zs::RunOptions o = zs::resolve(cfg);
    const int rank = session.rank(), world = session.world_size();
    const int64_t batch = cfg.train().has_batch_size() ? cfg.train().batch_size() / world : 1;

    // 1. The drive.
    const DriveFigures drive = measure_drive(nvme_path, rank, drive_mib << 20);
    if (rank == 0) {
      std::printf("drive under %s (%s): write %.2f GB/s, read %.2f GB/s (O_DIRECT, 1 MiB x 32 in flight, %lld MiB, "
                  "per rank, %d rank(s) at once)\n",
                  nvme_path.c_str(), zs::filesystem_type(nvme_path).c_str(), drive.write_gbs, drive.read_gbs,
                  static_cast<long long>(drive_mib), world);
    }

    // 2. The compute of the same step with everything resident, from 1- and 2-block models (the
    // blocks are alike: the step's compute is linear in their count).
    torch::manual_seed(1234 + rank);
    const at::Tensor x = at::randint(m.vocab_size(), {batch, m.seq_len()}, at::kLong);
    const at::Tensor y = at::randint(m.vocab_size(), {batch * m.seq_len()}, at::kLong);
    const double one_block = resident_step_seconds(session, o, 1, x, y, m.vocab_size());
    const double two_blocks = resident_step_seconds(session, o, 2, x, y, m.vocab_size());
    const double resident_s = one_block + (m.n_layer() - 1) * std::max(0.0, two_blocks - one_block);
    if (rank == 0) {
      std::printf("the same step with everything resident (optimizer state in host memory): 1 block %.2f s, 2 blocks "
                  "%.2f s, so %d blocks %.1f s\n",
                  one_block, two_blocks, m.n_layer(), resident_s);
    }

    // 3. The model, sharded into its files block by block.
    auto t_build = Clock::now();
    auto init = std::make_unique<zs::ShardedInit>(session, o.sharding);
    at::manual_seed(o.session.seed);
    zm::GptOptions model_options = o.model;
    model_options.device = session.device();
    zm::Gpt model(model_options);
    zs::ShardingEngine engine(*init, model.ptr());
    const double build_s = seconds_since(t_build);
    auto opt = zs::make_engine_optimizer(o.optimizer, o.offload, rank, &engine.memory());
    auto* offloaded = dynamic_cast<zs::OffloadedOptimizer*>(opt.get());
    const int64_t params = engine.num_params();
    if (rank == 0) {
      std::printf("model: %lld parameters (%d layers, d_model %d, %d heads, %lld x %d tokens per rank per step), "
                  "compute %s%s; built and sharded in %.1f s\n",
                  static_cast<long long>(params), m.n_layer(), m.d_model(), m.n_head(), static_cast<long long>(batch),
                  m.seq_len(), zs::config::PrecisionConfig::DType_Name(cfg.precision().param_dtype()).c_str(),
                  cfg.activation_checkpointing().enabled() ? ", activation checkpointing" : "", build_s);
      std::printf("optimizer: %s\n", opt->describe().c_str());
    }

    // 4. Training on one fixed batch.
    const NecessaryBytes need = necessary_bytes(o, (params + world - 1) / world);
    // What the drive alone needs for the necessary bytes, and the bound of the step: that or the
    // resident compute, whichever is longer.
    const double need_drive_s = need.read / (drive.read_gbs * 1e9) + need.written / (drive.write_gbs * 1e9);
    const double bound_s = std::max(resident_s, need_drive_s);
    if (rank == 0) {
      std::printf("necessary per step and rank for this placement: %.2f GB read, %.2f GB written (%.1f bytes per "
                  "parameter): %.1f s at the drive's bandwidth; bound max(compute %.1f s, drive %.1f s) = %.1f s\n",
                  need.read / 1e9, need.written / 1e9, (need.read + need.written) * world / static_cast<double>(params),
                  need_drive_s, resident_s, need_drive_s, bound_s);
    }
    // The parameter and gradient stores (either may be null) and the optimizer: every byte moved.
    const zs::ShardStore* stores[2] = {engine.param_store(), engine.grad_store()};
    auto store_io = [&] {
      zs::ShardStore::IoStats sum;
      for (const zs::ShardStore* st : stores) {
        if (st == nullptr) continue;
        sum.bytes_read += st->io_stats().bytes_read;
        sum.bytes_written += st->io_stats().bytes_written;
      }
      return sum;
    };
    double first_loss = 0, last_loss = 0, total_fb = 0, total_step = 0, total_bytes = 0;
    if (rank == 0) {
      std::printf("%5s %10s %9s %9s %12s %12s %10s %s\n", "step", "loss", "fwd+bwd s", "step s", "read GB", "written GB",
                  "drive s", "bound");
    }
    for (int step = 0; step < steps; ++step) {
      const auto p0 = store_io();
      const auto o0 = offloaded != nullptr ? offloaded->io_stats() : zs::OffloadedOptimizer::IoStats{};
      auto t = Clock::now();
      at::Tensor loss = engine.forward([&] {
        return torch::cross_entropy_loss(model->forward(x).view({-1, m.vocab_size()}).to(at::kFloat), y);
      });
      loss.backward();
      engine.clip_grad_norm(1.0);
      const double fb = seconds_since(t);
      t = Clock::now();
      engine.step(*opt);
      engine.zero_grad();
      const double st = seconds_since(t);
      const double l = loss.item<double>();
      const auto p1 = store_io();
      const auto o1 = offloaded != nullptr ? offloaded->io_stats() : zs::OffloadedOptimizer::IoStats{};
      const double read = static_cast<double>((p1.bytes_read - p0.bytes_read) + (o1.bytes_read - o0.bytes_read));
      const double written =
          static_cast<double>((p1.bytes_written - p0.bytes_written) + (o1.bytes_written - o0.bytes_written));
      // What the drive alone needs for this traffic at the bandwidth measured above.
      const double drive_s = read / (drive.read_gbs * 1e9) + written / (drive.write_gbs * 1e9);
      const bool disk_bound = drive_s >= 0.5 * (fb + st);
      if (step == 0) first_loss = l;
      last_loss = l;
      if (step > 0 || steps == 1) {
        total_fb += fb;
        total_step += st;
        total_bytes += read + written;
      }
      if (rank == 0) {
        std::printf("%5d %10.4f %9.1f %9.1f %12.2f %12.2f %10.1f %s (drive %.0f%% of the step)\n", step + 1, l, fb, st,
                    read / 1e9, written / 1e9, drive_s, disk_bound ? "drive" : "compute",
                    100.0 * drive_s / (fb + st));
      }
    }

    // 5. Where the bytes live.
    const zs::MemoryStats& mem = engine.memory();
    const int64_t on_disk = mem.current(zs::MemCategory::kNvme);
    const int64_t hwm = zs_bench::peak_resident_bytes();
    const double per_param = static_cast<double>(on_disk) * world / static_cast<double>(params);
    const int64_t model_state = 16 * params / world;  // fp32 master + grad + Adam m, v per rank
    if (rank == 0) {
      std::printf("%s", engine.memory_report().c_str());
      std::printf("rank 0: peak resident memory (VmHWM) %s; pinned staging %s; on disk %s (%.1f bytes per parameter "
                  "on this rank's share); the model state of mixed-precision Adam would be %s per rank\n",
                  zs::format_bytes(hwm).c_str(), zs::format_bytes(mem.current(zs::MemCategory::kPinnedHost)).c_str(),
                  zs::format_bytes(on_disk).c_str(), per_param, zs::format_bytes(model_state).c_str());
      const int timed = steps > 1 ? steps - 1 : 1;
      std::printf("%s: loss %.4f -> %.4f over %d step(s); mean after the first: fwd+bwd %.1f s, optimizer step %.1f s, "
                  "%.2f GB moved per step\n",
                  last_loss < first_loss ? "OK" : "FAILED", first_loss, last_loss, steps, total_fb / timed,
                  total_step / timed, total_bytes / timed / 1e9);
      const double step_s = (total_fb + total_step) / timed;
      const double need_bytes = need.read + need.written;
      std::printf("ratios: bytes moved / necessary %.2fx; step time / bound %.2fx (bound %.1f s: compute with "
                  "everything resident %.1f s, necessary bytes at the drive's bandwidth %.1f s)\n",
                  need_bytes > 0 ? total_bytes / timed / need_bytes : 0.0, step_s / bound_s, bound_s, resident_s,
                  need_drive_s);
      // A drive that reads and writes at full speed at once needs only the longer of the two.
      const double overlapped_s = std::max(resident_s, std::max(need.read / (drive.read_gbs * 1e9),
                                                                need.written / (drive.write_gbs * 1e9)));
      std::printf("        step time / %.1f s (the drive reading and writing at full speed at once) %.2fx\n",
                  overlapped_s, step_s / overlapped_s);
      std::printf("{\"bench\":\"offload_gpt\",\"params\":%lld,\"ranks\":%d,\"steps\":%d,\"first_loss\":%.5f,"
                  "\"last_loss\":%.5f,\"fwd_bwd_s\":%.2f,\"step_s\":%.2f,\"bytes_per_step\":%.0f,"
                  "\"necessary_bytes_per_step\":%.0f,\"resident_step_s\":%.2f,\"bound_s\":%.2f,"
                  "\"drive_write_gbs\":%.3f,\"drive_read_gbs\":%.3f,\"peak_rss_bytes\":%lld,\"disk_bytes\":%lld,"
                  "\"disk_bytes_per_param\":%.2f}\n",
                  static_cast<long long>(params), world, steps, first_loss, last_loss, total_fb / timed,
                  total_step / timed, total_bytes / timed, need_bytes, resident_s, bound_s, drive.write_gbs,
                  drive.read_gbs, static_cast<long long>(hwm), static_cast<long long>(on_disk), per_param);
    }
    return last_loss < first_loss ? 0 : 1;
  });
}
