// SPDX-License-Identifier: Apache-2.0
// bench_ckpt: checkpoint save and load throughput per rank against the raw sequential write and
// read bandwidth of the same disk, measured in the same run.
//
//   mpirun -n 2 build/bin/bench_ckpt [--dir DIR] [--dim 1024] [--layers 8] [--vocab 8192] [--repeat 3]
//
// Raw: each rank writes a file of its rank-file size with 4 MiB write() calls + fsync (the same
// pattern as a save), then reads it back after posix_fadvise(DONTNEED) dropped it from the page
// cache. Save: Checkpointer::save (sync), timed on each rank from the call to its return (includes
// the manifest and rename). Load: Checkpointer::load after the rank files were dropped from the
// page cache. Goal: save >= 70% of raw write. Prints a table and a final JSON line.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ATen/ops/empty.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/models.h"
#include "zeroshard/checkpoint/checkpoint_format.h"
#include "zeroshard/base/cli.h"
#include "zeroshard/base/error.h"
#include "zeroshard/config/main.h"
#include "zeroshard/core/session.h"
#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/engine/engine.h"

namespace zs = zeroshard;
namespace fs = std::filesystem;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

void drop_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// Raw sequential write (+fsync) and cold read of `bytes`; returns {write GB/s, read GB/s}.
std::pair<double, double> raw_bandwidth(const std::string& path, int64_t bytes) {
  std::vector<char> buf(4 << 20, 7);
  double t0 = now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ZS_CHECK_ERRNO(fd, "open ", path);
  for (int64_t off = 0; off < bytes;) {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(buf.size()), bytes - off);
    ZS_CHECK_ERRNO(::write(fd, buf.data(), static_cast<size_t>(n)), "write ", path);
    off += n;
  }
  ZS_CHECK_ERRNO(::fsync(fd), "fsync ", path);
  ::close(fd);
  const double w = bytes / (now() - t0) / 1e9;
  drop_cache(path);
  t0 = now();
  const int rfd = ::open(path.c_str(), O_RDONLY);
  ZS_CHECK_ERRNO(rfd, "open ", path);
  for (int64_t off = 0; off < bytes;) {
    const ssize_t n = ::read(rfd, buf.data(), buf.size());
    ZS_CHECK_ERRNO(n, "read ", path);
    if (n == 0) break;
    off += n;
  }
  ::close(rfd);
  const double r = bytes / (now() - t0) / 1e9;
  ::unlink(path.c_str());
  return {w, r};
}

}  // namespace

int main(int argc, char** argv) {
  const zs::Program program{"bench_ckpt", {}};
  return zs::run_main(argc, argv, program, [&](zs::Session& session, const zs::Run&) {
    std::string dir = (fs::current_path() / "bench_ckpt_dir").string();
    zs_test::GptConfig cfg;
    cfg.dim = 1024, cfg.layers = 8, cfg.heads = 8, cfg.vocab = 8192, cfg.seq = 64;
    int repeat = 3;
    zs::cli::App app("bench_ckpt",
                     "Checkpoint save and load throughput per rank against the raw sequential write and read "
                     "bandwidth of the same disk, in the same run. Final line: JSON.");
    app.usage("mpirun -n N bench_ckpt [OPTIONS]");
    app.add_text("--dir", &dir, "folder for the checkpoints (default ./bench_ckpt_dir; emptied)", "DIR");
    app.add_int("--dim", &cfg.dim, "model width (default 1024)", 1);
    app.add_int("--layers", &cfg.layers, "blocks (default 8)", 1);
    app.add_int("--vocab", &cfg.vocab, "vocabulary (default 8192)", 1);
    app.add_int("--repeat", &repeat, "repetitions, median kept (default 3)", 1);
    app.add_config_options();
    if (!app.parse(session.args(), session.rank() == 0)) return 0;
    auto world = session.world();
    const int rank = world->rank();
    if (rank == 0) {
      fs::remove_all(dir);
      fs::create_directories(dir);
    }
    world->barrier("bench.dir")->wait();
    torch::manual_seed(1);
    zs_test::Gpt model(cfg);
    zs::ShardingEngine engine(session, model.ptr(), zs::ShardingOptions{});
    zs::AdamOptions ao;
    auto opt = zs::make_adamw(ao);
    // One step so the optimizer state exists (12 bytes per parameter per rank in the files).
    {
      torch::Tensor x = torch::randint(cfg.vocab, {2, cfg.seq}, torch::kLong);
      auto loss = engine.forward([&] { return model->forward(x).mean(); });
      loss.backward();
      engine.step(*opt);
      engine.zero_grad();
    }
    zs::CheckpointOptions co;
    co.dir = dir + "/ckpt";
    co.keep_last = 1;
    zs::Checkpointer ckpt(engine, co);
    double best_save = 1e30, best_load = 1e30, best_w = 0, best_r = 0;
    int64_t file_bytes = 0;
    for (int it = 0; it < repeat; ++it) {
      zs::TrainingState st;
      st.step = it + 1;
      world->barrier("bench.save")->wait();
      double t0 = now();
      const std::string path = ckpt.save(*opt, st);
      best_save = std::min(best_save, now() - t0);
      const std::string mine = path + "/" + zs::ckpt::rank_file_name(rank);
      file_bytes = static_cast<int64_t>(fs::file_size(mine));
      drop_cache(mine);
      world->barrier("bench.load")->wait();
      t0 = now();
      ckpt.load(*opt, path);
      best_load = std::min(best_load, now() - t0);
      world->barrier("bench.raw")->wait();
      auto [w, r] = raw_bandwidth(dir + "/raw-" + std::to_string(rank), file_bytes);
      best_w = std::max(best_w, w);
      best_r = std::max(best_r, r);
    }
    const double save_gbs = file_bytes / best_save / 1e9, load_gbs = file_bytes / best_load / 1e9;
    // The slowest rank decides: take the minimum ratio over ranks.
    at::Tensor ratios = at::empty({2}, at::kDouble);
    ratios[0] = save_gbs / best_w;
    ratios[1] = load_gbs / best_r;
    world->all_reduce(ratios, zs::ReduceOp::kMin, "bench.ratios")->wait();
    if (rank == 0) {
      std::printf("bench_ckpt: %lld params, %d ranks, rank file %.1f MiB, best of %d\n",
                  static_cast<long long>(engine.num_params()), world->size(), file_bytes / 1048576.0, repeat);
      std::printf("  %-22s %10s %10s\n", "rank 0", "GB/s", "vs raw");
      std::printf("  %-22s %10.3f %10s\n", "raw write (+fsync)", best_w, "1.00");
      std::printf("  %-22s %10.3f %10.2f\n", "checkpoint save", save_gbs, save_gbs / best_w);
      std::printf("  %-22s %10.3f %10s\n", "raw read (cold)", best_r, "1.00");
      std::printf("  %-22s %10.3f %10.2f\n", "checkpoint load", load_gbs, load_gbs / best_r);
      std::printf("  min over ranks: save/raw %.2f (goal >= 0.70), load/raw %.2f\n", ratios[0].item<double>(),
                  ratios[1].item<double>());
      std::printf("{\"bench\":\"ckpt\",\"ranks\":%d,\"params\":%lld,\"rank_file_bytes\":%lld,\"raw_write_gbs\":%.4f,"
                  "\"save_gbs\":%.4f,\"raw_read_gbs\":%.4f,\"load_gbs\":%.4f,\"save_ratio_min\":%.3f,"
                  "\"load_ratio_min\":%.3f}\n",
                  world->size(), static_cast<long long>(engine.num_params()), static_cast<long long>(file_bytes), best_w,
                  save_gbs, best_r, load_gbs, ratios[0].item<double>(), ratios[1].item<double>());
    }
    world->barrier("bench.done")->wait();
    if (rank == 0) fs::remove_all(dir);
    return 0;
  });
}
