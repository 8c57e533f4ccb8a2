// SPDX-License-Identifier: Apache-2.0
// bench_hf_io: a Llama-family model's Hugging Face directory into a model sharded over the job's
// ranks (load_hf_weights), and a checkpoint of it out as a Hugging Face directory again
// (export_hf_directory, every rank writing its own files): per rank, the host memory each step
// allocates, measured by the tracking allocator (core/host_memory.h), against one tensor; and
// its time against reading (and, for the export, writing) the same bytes with plain reads and
// writes in the same run, as a ratio of bandwidths (each measured kReps times, alternating with its
// references; the fastest of each counts). The load has two references: plain reads into one
// 8 MiB buffer, which stays in the CPU's caches, and plain reads landing in memory of the load's
// size, as the loaded bytes must (the physical limit of a load into memory).
//
//   mpirun -n 2 build/bin/bench_hf_io [--dir /dev/shm] [--layers 12] [--hidden 768] [--vocab 16000]
//
// Rank 0 first writes the directory (random weights, fp32, two safetensors files and their index)
// under --dir, then every rank frees what it can and the measured part starts. The plain reads
// and the measured reads find the same page cache (the directory was just written), so on a disk
// both measure the cache, and on tmpfs memory. Last line: JSON.

#include <ATen/ops/ones.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "models/llama_test_util.h"
#include "zeroshard/base/cli.h"
#include "zeroshard/base/error.h"
#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/checkpoint/checkpoint_format.h"
#include "zeroshard/core/host_memory.h"
#include "zeroshard/core/main.h"
#include "zeroshard/core/session.h"
#include "zeroshard/engine/engine.h"
#include "zeroshard/engine/flat_shard.h"
#include "zeroshard/engine/sharded_init.h"
#include "zeroshard/models/hf_checkpoint.h"
#include "zeroshard/models/hf_export.h"
#include "zeroshard/models/llama.h"

namespace zs = zeroshard;
namespace zm = zeroshard::models;
namespace fs = std::filesystem;

namespace {

constexpr int kReps = 4;

struct Args {
  std::string dir;
  int64_t layers = 12, hidden = 768, intermediate = 2048, vocab = 16000, heads = 12, kv_heads = 4;
  bool keep = false;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Reads `bytes` bytes from the files (taken as one run of bytes, in order) from `offset` on,
// with pread of 8 MiB at a time: into one 8 MiB buffer (which stays in the CPU's caches), or with
// `land` (`bytes` long, touched beforehand), each piece at its own place in it, as a load's bytes
// land in the model's memory. Returns the seconds it took.
double plain_read(const std::vector<std::string>& files, int64_t offset, int64_t bytes, char* land = nullptr) {
  std::vector<char> buf(land != nullptr ? 0 : 8 << 20);
  const int64_t piece = 8 << 20;
  char* out = land;
  const auto t0 = std::chrono::steady_clock::now();
  for (const std::string& f : files) {
    const int64_t size = static_cast<int64_t>(fs::file_size(f));
    if (offset >= size) {
      offset -= size;
      continue;
    }
    const int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    ZS_REQUIRE(fd >= 0, zs::IoError, "cannot open '", f, "'");
    while (bytes > 0 && offset < size) {
      const int64_t n = std::min<int64_t>({bytes, size - offset, piece});
      ZS_REQUIRE(::pread(fd, out != nullptr ? out : buf.data(), n, offset) == n, zs::IoError, "short read of '", f, "'");
      if (out != nullptr) out += n;
      offset += n;
      bytes -= n;
    }
    ::close(fd);
    offset = 0;
    if (bytes == 0) break;
  }
  return seconds_since(t0);
}

// Writes `bytes` bytes to `path` 8 MiB at a time (from one buffer, or from `from`, `bytes` long,
// each piece from its own place), fsyncs and removes it. Returns the seconds.
double plain_write(const std::string& path, int64_t bytes, const char* from = nullptr) {
  std::vector<char> buf(from != nullptr ? 0 : 8 << 20, 1);
  const auto t0 = std::chrono::steady_clock::now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ZS_REQUIRE(fd >= 0, zs::IoError, "cannot create '", path, "'");
  while (bytes > 0) {
    const int64_t n = std::min<int64_t>(bytes, int64_t{8} << 20);
    ZS_REQUIRE(::write(fd, from != nullptr ? from : buf.data(), n) == n, zs::IoError, "short write of '", path, "'");
    if (from != nullptr) from += n;
    bytes -= n;
  }
  ::fsync(fd);
  ::close(fd);
  const double s = seconds_since(t0);
  fs::remove(path);
  return s;
}

std::vector<std::string> files_in(const std::string& dir, const std::string& extension) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == extension) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

zs_llama_test::TinySpec spec_of(const Args& a) {
  zs_llama_test::TinySpec s;
  s.vocab = a.vocab;
  s.hidden = a.hidden;
  s.intermediate = a.intermediate;
  s.layers = a.layers;
  s.heads = a.heads;
  s.kv_heads = a.kv_heads;
  return s;
}

// The figures of one rank, all-gathered as doubles.
std::vector<std::vector<double>> gather(zs::Session& s, const std::vector<double>& mine) {
  at::Tensor t = at::zeros({s.world_size(), static_cast<int64_t>(mine.size())}, at::kDouble);
  for (size_t i = 0; i < mine.size(); ++i) t[s.rank()][static_cast<int64_t>(i)] = mine[i];
  s.world()->all_reduce(t, zs::ReduceOp::kSum, "bench.gather")->wait();
  std::vector<std::vector<double>> out(static_cast<size_t>(s.world_size()));
  for (int r = 0; r < s.world_size(); ++r) {
    for (size_t i = 0; i < mine.size(); ++i) out[static_cast<size_t>(r)].push_back(t[r][static_cast<int64_t>(i)].item<double>());
  }
  return out;
}

int run(zs::Session& s) {
  Args a;
  zs::cli::App app("bench_hf_io",
                   "A Hugging Face directory into a sharded Llama-family model and a checkpoint of it out as one "
                   "again: host memory per rank by the allocator against one tensor, time against plain reads and "
                   "writes of the same bytes. Last line: JSON.");
  app.usage("mpirun -n N bench_hf_io [OPTIONS]");
  app.add_text("--dir", &a.dir, "where to write (default $TMPDIR, else the build tree)", "DIR");
  app.add_int("--layers", &a.layers, "decoder layers", 1);
  app.add_int("--hidden", &a.hidden, "hidden size", 8);
  app.add_int("--intermediate", &a.intermediate, "MLP size", 8);
  app.add_int("--vocab", &a.vocab, "vocabulary", 8);
  app.add_int("--heads", &a.heads, "attention heads", 1);
  app.add_int("--kv-heads", &a.kv_heads, "key/value heads", 1);
  app.add_flag("--keep", &a.keep, "keep the files written");
  app.add_config_options();
  if (!app.parse(s.args(), s.rank() == 0)) return 0;
  zs::install_host_memory_tracking();
  if (a.dir.empty()) a.dir = std::getenv("TMPDIR") != nullptr ? std::getenv("TMPDIR") : ZS_BENCH_DEFAULT_DIR;
  const std::string work = a.dir + "/bench_hf_io." + std::to_string(::getppid());
  const zs_llama_test::TinySpec spec = spec_of(a);
  const zm::LlamaConfig c = spec.config();
  if (s.rank() == 0) {
    fs::remove_all(work);
    fs::create_directories(work);
    zs_llama_test::write_hf_dir(work + "/hf", spec.config_json(), zs_llama_test::random_state(c, 1), 2);
  }
  s.world()->barrier("bench.written")->wait();
  int64_t largest = 0, model_bytes = 0;
  for (const zs::TensorInfo& t : zm::hf_tensors(c)) {
    largest = std::max(largest, t.numel() * 4);
    model_bytes += t.numel() * 4;
  }
  // Load: build sharded, then load_hf_weights measured alone.
  zs::ShardedInit init(s, {});
  zm::LlamaForCausalLM model(zm::LlamaOptions{c});
  zs::ShardingEngine engine(init, model.ptr());
  int64_t shards = 0;
  for (zs::FlatShard* f : engine.flat_shards()) shards += f->shard_numel() * 4;
  const std::vector<std::string> hf_files = files_in(work + "/hf", ".safetensors");
  // Each measured twice, alternating with its plain reference; the faster of each counts.
  double load_s = 1e30, plain_load_s = 1e30, landed_load_s = 1e30;
  int64_t load_peak = 0;
  zs::PretrainedReport r;
  at::Tensor landing;  // the "landed" reference's destination (the shards' allocator), touched before it is timed
  for (int rep = 0; rep < kReps; ++rep) {
    s.world()->barrier("bench.load")->wait();
    zs::begin_host_memory_window();
    const auto t0 = std::chrono::steady_clock::now();
    r = zm::load_hf_weights(engine, c, work + "/hf");
    load_s = std::min(load_s, seconds_since(t0));
    load_peak = std::max(load_peak, zs::host_memory_window_peak());
    s.world()->barrier("bench.plain_load")->wait();
    plain_load_s = std::min(plain_load_s, plain_read(hf_files, s.rank() * r.bytes_read, r.bytes_read));
    if (!landing.defined()) landing = at::ones({r.bytes_read}, at::kByte);
    landed_load_s = std::min(landed_load_s, plain_read(hf_files, s.rank() * r.bytes_read, r.bytes_read,
                                                       static_cast<char*>(landing.data_ptr())));
  }
  landing = at::Tensor();
  // Export: a checkpoint of the loaded model (its config recorded), then the directory again.
  auto opt = zs::make_sgd({});
  zs::CheckpointOptions co;
  co.dir = work + "/ckpt";
  co.model.hf_config = spec.config_json();
  zs::Checkpointer(engine, co).save(*opt, {0});
  const std::string step = zs::ckpt::resolve_checkpoint(work + "/ckpt");
  double export_s = 1e30, plain_export_s = 1e30, landed_export_s = 1e30;
  int64_t export_peak = 0;
  zm::HfExportReport e;
  for (int rep = 0; rep < kReps; ++rep) {
    if (s.rank() == 0) fs::remove_all(work + "/out");
    s.world()->barrier("bench.export")->wait();
    zs::begin_host_memory_window();
    const auto t0 = std::chrono::steady_clock::now();
    e = zm::export_hf_directory(work + "/ckpt", work + "/out", {c10::kFloat}, s.world().get());
    export_s = std::min(export_s, seconds_since(t0));
    export_peak = std::max(export_peak, zs::host_memory_window_peak());
    s.world()->barrier("bench.plain_export")->wait();
    const std::string plain_out = work + "/plain-write." + std::to_string(s.rank());
    plain_export_s = std::min(plain_export_s, plain_read(files_in(step, ".zsr"), s.rank() * e.read_here, e.read_here) +
                                                  plain_write(plain_out, e.bytes_here));
    // Landed: through memory of the export's size, as the bytes pass through the tensors.
    if (!landing.defined()) landing = at::ones({std::max(e.read_here, e.bytes_here)}, at::kByte);
    char* through = static_cast<char*>(landing.data_ptr());
    landed_export_s = std::min(landed_export_s,
                               plain_read(files_in(step, ".zsr"), s.rank() * e.read_here, e.read_here, through) +
                                   plain_write(plain_out, e.bytes_here, through));
  }
  landing = at::Tensor();
  const auto all = gather(s, {static_cast<double>(r.bytes_read), load_s, plain_load_s, static_cast<double>(load_peak),
                              static_cast<double>(e.read_here), static_cast<double>(e.bytes_here), export_s,
                              plain_export_s, static_cast<double>(export_peak), static_cast<double>(shards),
                              landed_load_s, landed_export_s});
  if (s.rank() == 0) {
    const double mib = 1048576.0;
    std::printf("bench_hf_io: %lld parameters (%.1f MiB fp32; largest tensor %.2f MiB) over %d rank(s), in %s\n",
                static_cast<long long>(engine.num_params()), model_bytes / mib, largest / mib, s.world_size(),
                a.dir.c_str());
    nlohmann::ordered_json j = {{"bench", "hf_io"}, {"ranks", s.world_size()}, {"model_bytes", model_bytes},
                                {"largest_tensor", largest}};
    nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
    auto bytes = [](double v) { return static_cast<int64_t>(v); };  // byte counts gathered as doubles
    for (int q = 0; q < s.world_size(); ++q) {
      const std::vector<double>& v = all[static_cast<size_t>(q)];
      std::printf("  rank %d load:   %.1f MiB in %.3f s (%.0f MiB/s), plain reads %.3f s: %.2fx their bandwidth "
                  "(landed in memory of the load's size: %.3f s, %.2fx); shards %.1f MiB, the load allocated %.2f "
                  "MiB more = %.2f tensors\n",
                  q, v[0] / mib, v[1], v[0] / mib / v[1], v[2], v[2] / v[1], v[10], v[10] / v[1], v[9] / mib,
                  v[3] / mib, v[3] / largest);
      std::printf("  rank %d export: read %.1f MiB, wrote %.1f MiB in %.3f s, plain read + write %.3f s: %.2fx their "
                  "bandwidth (through memory of the export's size: %.3f s, %.2fx); allocated %.2f MiB = %.2f "
                  "tensors\n",
                  q, v[4] / mib, v[5] / mib, v[6], v[7], v[7] / v[6], v[11], v[11] / v[6], v[8] / mib, v[8] / largest);
      ranks.push_back({{"rank", q}, {"load_bytes", bytes(v[0])}, {"load_s", v[1]}, {"plain_load_s", v[2]},
                       {"load_peak", bytes(v[3])}, {"export_read", bytes(v[4])}, {"export_written", bytes(v[5])},
                       {"export_s", v[6]}, {"plain_export_s", v[7]}, {"export_peak", bytes(v[8])},
                       {"shard_bytes", bytes(v[9])}});
    }
    j["per_rank"] = std::move(ranks);
    std::printf("%s\n", j.dump().c_str());
    if (!a.keep) fs::remove_all(work);
  }
  s.world()->barrier("bench.done")->wait();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return zs::run_main(argc, argv, run); }
