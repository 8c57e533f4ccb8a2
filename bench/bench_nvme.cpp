// SPDX-License-Identifier: Apache-2.0
// NVMe offload bandwidth. Part 1 (here): the raw drive holding --dir, measured fio-style with the
// async I/O engine (sequential O_DIRECT write then read of one --size file, preallocated as fio
// lays out its files, --block-size requests, --queue-depth in flight) for each backend that starts here, next to a dd-style reference
// (blocking pwrite/pread of one block at a time, O_DIRECT, one thread). Prints the machine facts,
// a table and a final JSON line.
// Part 2 (added with the NVMe swapper): the swapper's bandwidth during an optimizer step, as a
// fraction of part 1's figures, and the step time with the state on device/cpu/nvme; see
// measure_swapper_during_step() below.
//
//   bench_nvme [--dir D (default $TMPDIR, else the build directory)] [--size BYTES (1G)]
//              [--block-size BYTES (1M)] [--queue-depth N (32)] [--passes N (1)]
// Sizes take K/M/G suffixes (powers of 1024).

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "zeroshard/base/cli.h"
#include "zeroshard/base/error.h"
#include "zeroshard/io/aio.h"
#include "zeroshard/offload/offload_optimizer.h"

#include <ATen/ops/randn.h>
#include <torch/types.h>
#include <torch/utils.h>

#ifndef ZS_BENCH_DEFAULT_DIR
#define ZS_BENCH_DEFAULT_DIR "."
#endif

namespace zs = zeroshard;

namespace {

struct Args {
  std::string dir;
  int64_t size = int64_t{1} << 30;
  int64_t block_size = 1 << 20;
  int queue_depth = 32;
  int passes = 1;
};

// One row of the table: bytes/s of the sequential write (fdatasync included) and read.
struct Figures {
  std::string name;
  double write_bps = 0, read_bps = 0;
  std::string skipped;  // why this backend did not run, or empty
};

struct DriveFigures {
  std::string filesystem;
  bool direct = false;
  Figures reference;            // dd-style, queue depth 1
  std::vector<Figures> engine;  // per backend
  double best_write_bps = 0, best_read_bps = 0;
};

// Extra "key": value pairs for the final JSON line (values already JSON).
using JsonFields = std::vector<std::pair<std::string, std::string>>;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

// "vda (model ..., rotational 0)" for the block device holding `dir`, as far as sysfs tells.
std::string block_device(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return "unknown";
  const std::string sys = "/sys/dev/block/" + std::to_string(major(st.st_dev)) + ":" +
                          std::to_string(minor(st.st_dev));
  char target[512] = {0};
  const ssize_t n = ::readlink(sys.c_str(), target, sizeof(target) - 1);
  if (n <= 0) return "not a block device (" + std::to_string(major(st.st_dev)) + ":" +
                     std::to_string(minor(st.st_dev)) + ")";
  std::string name(target, static_cast<size_t>(n));
  name = name.substr(name.find_last_of('/') + 1);
  // A partition's attributes live in its parent's directory.
  std::string base = sys;
  if (::access((sys + "/partition").c_str(), F_OK) == 0) base = sys + "/..";
  std::string model = read_line(base + "/device/model");
  const std::string rot = read_line(base + "/queue/rotational");
  return name + " (model: " + (model.empty() ? "n/a" : model) + ", rotational: " +
         (rot.empty() ? "n/a" : rot) + ")";
}

// Returns nullopt after --help/--version.
std::optional<Args> parse_args(int argc, char** argv) {
  Args a;
  const char* tmp = std::getenv("TMPDIR");
  a.dir = (tmp != nullptr && *tmp != '\0') ? tmp : ZS_BENCH_DEFAULT_DIR;
  zs::cli::App app("bench_nvme",
                   "NVMe offload bandwidth: the raw drive under --dir with each async I/O backend (fio-style), then "
                   "the optimizer-state swapper during an optimizer step, as a fraction of it. Final line: JSON.");
  app.add_text("--dir", &a.dir, "folder on the drive to measure (default $TMPDIR, else the build tree)", "DIR");
  app.add_size("--size", &a.size, "file size (default 1G)");
  app.add_size("--block-size", &a.block_size, "request size (default 1M)");
  app.add_int("--queue-depth", &a.queue_depth, "requests in flight (default 32)", 1);
  app.add_int("--passes", &a.passes, "passes over the file (default 1)", 1);
  app.then([&] {
    if (a.size % a.block_size != 0 || a.block_size % zs::kDirectAlignment != 0) {
      app.fail("--size (" + std::to_string(a.size) + ") must be a multiple of --block-size (" +
               std::to_string(a.block_size) + "), itself a multiple of " + std::to_string(zs::kDirectAlignment));
    }
  });
  if (!app.parse(argc, argv)) return std::nullopt;
  struct statvfs vfs {};
  ZS_CHECK_ERRNO(::statvfs(a.dir.c_str(), &vfs), "--dir ", a.dir);
  const auto free_bytes = static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
  ZS_REQUIRE(free_bytes > a.size + (int64_t{256} << 20), zs::UsageError, "bench_nvme: ", a.dir,
             " has ", free_bytes >> 20, " MiB free; --size ", a.size >> 20,
             " MiB needs that plus 256 MiB: use a smaller --size or another --dir");
  return a;
}

// The benchmark file, removed at the end.
struct ScratchFile {
  std::string path;
  ~ScratchFile() { ::unlink(path.c_str()); }
};

// The buffer all requests use (the data's content does not matter to the drive): the whole file
// or 256 MiB, whichever is smaller, so 1 GiB is 4 requests of `chunk`.
struct Staging {
  int64_t chunk;
  std::unique_ptr<char, decltype(&std::free)> buf{nullptr, &std::free};
  explicit Staging(const Args& a) : chunk(std::min<int64_t>(a.size, int64_t{256} << 20)) {
    buf.reset(static_cast<char*>(std::aligned_alloc(zs::kDirectAlignment, chunk)));
    ZS_REQUIRE(buf != nullptr, zs::Error, "cannot allocate ", chunk, " bytes of staging");
    std::mt19937_64 rng(1);
    auto* words = reinterpret_cast<uint64_t*>(buf.get());
    for (int64_t i = 0; i < chunk / 8; ++i) words[i] = rng();
  }
};

// Sequential write (then fdatasync) and read of the whole file through `io`; best of passes.
Figures run_engine(const Args& a, zs::IoEngine& io, zs::AioFile& f, Staging& s) {
  Figures r;
  r.name = zs::to_string(io.backend());
  double best_w = 1e30, best_r = 1e30;
  for (int pass = 0; pass < a.passes; ++pass) {
    f.truncate(0);  // each pass writes a new file, laid out first as fio does
    f.allocate(a.size);
    double t0 = now_s();
    for (int64_t off = 0; off < a.size; off += s.chunk) io.submit_write(f, s.buf.get(), s.chunk, off);
    io.wait_all();
    f.sync();
    best_w = std::min(best_w, now_s() - t0);
    t0 = now_s();
    for (int64_t off = 0; off < a.size; off += s.chunk) io.submit_read(f, s.buf.get(), s.chunk, off);
    io.wait_all();
    best_r = std::min(best_r, now_s() - t0);
  }
  r.write_bps = static_cast<double>(a.size) / best_w;
  r.read_bps = static_cast<double>(a.size) / best_r;
  return r;
}

// dd oflag=direct bs=block: one blocking pwrite/pread per block, nothing in flight in parallel.
Figures run_reference(const Args& a, zs::AioFile& f, Staging& s) {
  Figures r;
  r.name = "dd-style (sync, qd 1)";
  double best_w = 1e30, best_r = 1e30;
  for (int pass = 0; pass < a.passes; ++pass) {
    f.truncate(0);
    f.allocate(a.size);
    double t0 = now_s();
    for (int64_t off = 0; off < a.size; off += a.block_size) {
      const ssize_t n = ::pwrite(f.fd(), s.buf.get() + off % s.chunk, a.block_size, off);
      ZS_REQUIRE(n == a.block_size, zs::IoError, "pwrite ", f.path(), " at ", off, ": ",
                 n < 0 ? zs::detail::errno_string(errno) : "short write");
    }
    f.sync();
    best_w = std::min(best_w, now_s() - t0);
    t0 = now_s();
    for (int64_t off = 0; off < a.size; off += a.block_size) {
      const ssize_t n = ::pread(f.fd(), s.buf.get() + off % s.chunk, a.block_size, off);
      ZS_REQUIRE(n == a.block_size, zs::IoError, "pread ", f.path(), " at ", off, ": ",
                 n < 0 ? zs::detail::errno_string(errno) : "short read");
    }
    best_r = std::min(best_r, now_s() - t0);
  }
  r.write_bps = static_cast<double>(a.size) / best_w;
  r.read_bps = static_cast<double>(a.size) / best_r;
  return r;
}

// Part 1: the raw drive.
DriveFigures measure_drive(const Args& a) {
  DriveFigures d;
  d.filesystem = zs::filesystem_type(a.dir);
  ScratchFile scratch{a.dir + "/zs-bench-nvme-" + std::to_string(::getpid()) + ".bin"};
  zs::AioFile f(scratch.path, zs::AioFile::kReadWrite | zs::AioFile::kCreate, /*direct=*/true);
  d.direct = f.direct();
  Staging s(a);
  d.reference = run_reference(a, f, s);
  for (zs::IoBackend b : {zs::IoBackend::kIoUring, zs::IoBackend::kLibaio, zs::IoBackend::kThreads}) {
    zs::IoOptions o;
    o.backend = b;
    o.queue_depth = a.queue_depth;
    o.block_size = a.block_size;
    o.threads = std::min(a.queue_depth, 32);  // the pool can keep queue_depth blocks in flight
    std::unique_ptr<zs::IoEngine> io;
    try {
      io = zs::make_io_engine(o);
    } catch (const zs::IoError& e) {
      Figures skipped;
      skipped.name = zs::to_string(b);
      skipped.skipped = e.message();
      d.engine.push_back(skipped);
      continue;
    }
    d.engine.push_back(run_engine(a, *io, f, s));
    d.best_write_bps = std::max(d.best_write_bps, d.engine.back().write_bps);
    d.best_read_bps = std::max(d.best_read_bps, d.engine.back().read_bps);
  }
  return d;
}

// Part 2 hook: the NVMe swapper's bandwidth during an optimizer step (read(k+1) / update(k) /
// write(k-1) over --dir), printed as a fraction of `drive.best_*_bps`, with its fields appended
// to `json`. Added together with the swapper (offload/ NVMe swapper); until then it reports that
// it is absent, in the table and in the JSON line ("swapper": null).
// Part 2: an optimizer step of one fp32 shard whose Adam state (master, exp_avg, exp_avg_sq: 12
// bytes per parameter) is about --size bytes, with the state on the device (here: in memory,
// torch-op AdamW), in pinned host memory (fused CPU Adam) and on NVMe under --dir (the swapper:
// read, update and write pipelined through pinned buffers). The swapper's disk time ratio is the
// time the drive needs for the step's reads and writes at part 1's best rates, divided by the
// step's wall time (1.0: the step runs at the drive's speed, the CPU work fully hidden).
void measure_swapper_during_step(const Args& args, const DriveFigures& drive, JsonFields& json) {
  const int64_t n = std::max<int64_t>(1 << 20, args.size / 12 / (1 << 20) * (1 << 20));
  torch::manual_seed(0);
  at::Tensor p0 = torch::randn({n});
  at::Tensor g = torch::randn({n}) * 1e-3;
  zs::OptimizerOptions oc;
  oc.type = zs::OptimizerOptions::Type::kAdamW;
  auto time_steps = [&](zs::ShardedOptimizer& opt, at::Tensor& p) {
    std::vector<zs::ParamShard> shards{{p, g, "bench"}};
    opt.step(shards);  // first step: state created (NVMe: files initialised)
    double best = 1e30;
    for (int i = 0; i < std::max(2, args.passes); ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      opt.step(shards);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  at::Tensor pd = p0.clone(), pc = p0.clone(), pn = p0.clone();
  auto dev_opt = zs::make_optimizer(oc);
  const double t_device = time_steps(*dev_opt, pd);
  zs::OffloadOptions co;
  co.target = zs::OffloadTarget::kCpu;
  zs::OffloadedOptimizer cpu_opt(oc, co, 0);
  const double t_cpu = time_steps(cpu_opt, pc);
  zs::OffloadOptions no;
  no.target = zs::OffloadTarget::kNvme;
  no.nvme_path = args.dir;
  no.block_size = args.block_size;
  no.queue_depth = args.queue_depth;
  zs::OffloadedOptimizer nvme_opt(oc, no, 0);
  const auto before = nvme_opt.io_stats();
  const double t_nvme = time_steps(nvme_opt, pn);
  const auto after = nvme_opt.io_stats();
  const int steps = std::max(2, args.passes) + 1;
  const double rd = static_cast<double>(after.bytes_read - before.bytes_read) / steps;
  const double wr = static_cast<double>(after.bytes_written - before.bytes_written) / steps;
  const double ideal = rd / drive.best_read_bps + wr / drive.best_write_bps;
  const bool same = pd.equal(pc) && pd.equal(pn);
  std::printf("\npart 2: AdamW step of %lld fp32 parameters (state %.0f MiB), best of %d\n", static_cast<long long>(n),
              12.0 * n / 1048576.0, std::max(2, args.passes));
  std::printf("%-34s %10s %12s\n", "optimizer state on", "step s", "x device");
  std::printf("%-34s %10.3f %12s\n", "device (torch ops, in memory)", t_device, "1.00");
  std::printf("%-34s %10.3f %12.2f\n", "cpu (pinned, fused kernel)", t_cpu, t_cpu / t_device);
  std::printf("%-34s %10.3f %12.2f\n", "nvme (swapper)", t_nvme, t_nvme / t_device);
  std::printf("swapper: %s\n", nvme_opt.describe().c_str());
  std::printf("swapper during the step, reading and writing at once: read %.3f GB/s (%.2f x raw read), write "
              "%.3f GB/s (%.2f x raw write); the step's I/O at part 1's best rates, one direction after the other, "
              "takes %.3f s -> disk time ratio %.2f (goal >= 0.90)\n",
              rd / t_nvme / 1e9, rd / t_nvme / drive.best_read_bps, wr / t_nvme / 1e9, wr / t_nvme / drive.best_write_bps,
              ideal, ideal / t_nvme);
  std::printf("results equal across device/cpu/nvme: %s\n", same ? "yes (bitwise)" : "NO");
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "{\"params\": %lld, \"step_s_device\": %.4f, \"step_s_cpu\": %.4f, \"step_s_nvme\": %.4f, "
                "\"read_bps\": %.4g, \"write_bps\": %.4g, \"read_x_raw\": %.3f, \"write_x_raw\": %.3f, "
                "\"disk_time_ratio\": %.3f, \"bitwise_equal\": %s}",
                static_cast<long long>(n), t_device, t_cpu, t_nvme, rd / t_nvme, wr / t_nvme, rd / t_nvme / drive.best_read_bps,
                wr / t_nvme / drive.best_write_bps, ideal / t_nvme,
                same ? "true" : "false");
  json.emplace_back("swapper", buf);
}

void print_drive(const Args& a, const DriveFigures& d) {
  utsname u{};
  ::uname(&u);
  std::printf("CPU:        %s (%ld cores online)\n", cpu_model().c_str(), ::sysconf(_SC_NPROCESSORS_ONLN));
  std::printf("kernel:     %s %s\n", u.sysname, u.release);
  std::printf("dir:        %s (filesystem %s, device %s)\n", a.dir.c_str(), d.filesystem.c_str(),
              block_device(a.dir).c_str());
  std::printf("O_DIRECT:   %s\n", d.direct ? "honoured" : "REFUSED: buffered I/O, figures include the page cache");
  std::printf("file:       %.0f MiB, block %lld KiB, queue depth %d, best of %d pass(es), "
              "file preallocated, write includes fdatasync\n", a.size / 1048576.0,
              static_cast<long long>(a.block_size >> 10), a.queue_depth, a.passes);
  std::printf("%-24s %12s %12s %12s %12s\n", "", "write GB/s", "read GB/s", "write x ref", "read x ref");
  const Figures& ref = d.reference;
  std::printf("%-24s %12.3f %12.3f %12s %12s\n", ref.name.c_str(), ref.write_bps / 1e9,
              ref.read_bps / 1e9, "1.00", "1.00");
  for (const Figures& f : d.engine) {
    if (!f.skipped.empty()) {
      std::printf("%-24s skipped: %s\n", f.name.c_str(), f.skipped.c_str());
      continue;
    }
    std::printf("%-24s %12.3f %12.3f %12.2f %12.2f\n", f.name.c_str(), f.write_bps / 1e9,
                f.read_bps / 1e9, f.write_bps / ref.write_bps, f.read_bps / ref.read_bps);
  }
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

JsonFields drive_json(const Args& a, const DriveFigures& d) {
  char buf[128];
  auto num = [&](double v) {
    std::snprintf(buf, sizeof(buf), "%.4g", v);
    return std::string(buf);
  };
  JsonFields j = {{"bench", json_string("nvme")},
                  {"cpu", json_string(cpu_model())},
                  {"dir", json_string(a.dir)},
                  {"filesystem", json_string(d.filesystem)},
                  {"o_direct", d.direct ? "true" : "false"},
                  {"size", std::to_string(a.size)},
                  {"block_size", std::to_string(a.block_size)},
                  {"queue_depth", std::to_string(a.queue_depth)},
                  {"ref_write_gbps", num(d.reference.write_bps / 1e9)},
                  {"ref_read_gbps", num(d.reference.read_bps / 1e9)}};
  for (const Figures& f : d.engine) {
    j.emplace_back(f.name + "_write_gbps", f.skipped.empty() ? num(f.write_bps / 1e9) : "null");
    j.emplace_back(f.name + "_read_gbps", f.skipped.empty() ? num(f.read_bps / 1e9) : "null");
  }
  j.emplace_back("best_write_gbps", num(d.best_write_bps / 1e9));
  j.emplace_back("best_read_gbps", num(d.best_read_bps / 1e9));
  return j;
}

}  // namespace

int main(int argc, char** argv) try {
  const std::optional<Args> parsed = parse_args(argc, argv);
  if (!parsed) return 0;  // --help, --version
  const Args& args = *parsed;
  const DriveFigures drive = measure_drive(args);
  print_drive(args, drive);
  JsonFields json = drive_json(args, drive);
  measure_swapper_during_step(args, drive, json);
  std::string line = "{";
  for (size_t i = 0; i < json.size(); ++i) {
    line += (i ? ", " : "") + json_string(json[i].first) + ": " + json[i].second;
  }
  std::printf("%s}\n", line.c_str());
  return 0;
} catch (const zs::UsageError& e) {
  std::fprintf(stderr, "bench_nvme: usage error: %s\n", e.message().c_str());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_nvme: error: %s\n", e.what());
  return 1;
}
