// SPDX-License-Identifier: Apache-2.0
// zeroshard-data shards against the drive: the corpus-to-shards pipeline (build_shards, what the
// tool runs) should be bound by reading the input, not by the CPU. Measures, on the same input in
// the same run: a plain sequential read() of the input (the dd-style reference, and dd itself),
// then build_shards with --threads workers; each once with the input evicted from the page cache
// (posix_fadvise DONTNEED: cold, from the drive) and once cached (warm: the CPU-side ceiling).
// Prints a table and a final JSON line with MB/s, tokens/s and the ratios to the plain read.
//
//   bench_data_shards [--dir D (default: the build directory)] [--size BYTES (256M)]
//                     [--threads N (0: one per core)] [--tokenizer DIR|bytes (bytes)] [--input FILE...]
// Without --input it writes a JSONL corpus of --size bytes (text and prompt/completion records of
// pseudo-random words) into --dir. With a tokenizer that has no EOS (bytes) documents get none.

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <string>
#include <vector>

#include "zeroshard/base/cli.h"
#include "zeroshard/base/error.h"
#include "zeroshard/data/corpus_builder.h"
#include "zeroshard/text/tokenizer.h"

#ifndef ZS_BENCH_DEFAULT_DIR
#define ZS_BENCH_DEFAULT_DIR "."
#endif

namespace zs = zeroshard;
namespace zd = zeroshard::data;
namespace fs = std::filesystem;

namespace {

struct Args {
  std::string dir = ZS_BENCH_DEFAULT_DIR;
  int64_t size = int64_t{256} << 20;
  int threads = 0;
  std::string tokenizer = "bytes";
  std::vector<std::string> inputs;
};

// CPU seconds (user + system) this process has used so far, all threads.
double cpu_seconds() {
  struct rusage u {};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A JSONL corpus of about `bytes`: records of 20..400 pseudo-random words from a fixed list.
std::string write_corpus(const std::string& dir, int64_t bytes) {
  const std::string path = dir + "/bench_data_corpus.jsonl";
  static const char* words[] = {"the", "model", "shard", "token", "of", "data", "and", "a", "training", "rank",
                                "memory", "step", "gradient", "is", "to", "parameter", "loss", "in", "batch", "on"};
  std::mt19937_64 rng(1234);
  std::ofstream out(path, std::ios::binary);
  int64_t written = 0;
  for (int64_t i = 0; written < bytes; ++i) {
    std::string text;
    const int n = 20 + static_cast<int>(rng() % 380);
    for (int w = 0; w < n; ++w) text += std::string(w ? " " : "") + words[rng() % 20];
    const std::string line = i % 4 == 3 ? "{\"prompt\": \"Q: " + text.substr(0, 40) + "\", \"completion\": \"" +
                                              text.substr(40) + "\"}\n"
                                        : "{\"text\": \"" + text + "\"}\n";
    out << line;
    written += static_cast<int64_t>(line.size());
  }
  ZS_REQUIRE(out.good(), zs::IoError, "cannot write the corpus '", path, "'");
  return path;
}

// Drops the files' pages from the page cache (written back first), so the next read comes from the drive.
void evict(const std::vector<std::string>& files) {
  for (const std::string& f : files) {
    const int fd = ::open(f.c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// Seconds to read every input sequentially in 4 MiB read() calls (the dd-style reference).
double plain_read(const std::vector<std::string>& files, int64_t* bytes) {
  std::vector<char> buf(size_t{4} << 20);
  *bytes = 0;
  const double t0 = now();
  for (const std::string& f : files) {
    const int fd = ::open(f.c_str(), O_RDONLY);
    ZS_REQUIRE(fd >= 0, zs::IoError, "cannot open '", f, "'");
    for (ssize_t n; (n = ::read(fd, buf.data(), buf.size())) > 0;) *bytes += n;
    ::close(fd);
  }
  return now() - t0;
}

// Seconds `dd if=F of=/dev/null bs=4M` takes over every input.
double dd_read(const std::vector<std::string>& files) {
  const double t0 = now();
  for (const std::string& f : files) {
    const std::string cmd = "dd if='" + f + "' of=/dev/null bs=4M status=none";
    ZS_REQUIRE(std::system(cmd.c_str()) == 0, zs::IoError, "'", cmd, "' failed");
  }
  return now() - t0;
}

struct Build {
  double seconds;
  double cpu;  // CPU seconds, all threads
  zd::BuildResult result;
};

Build build(const Args& a, const zd::RecordEncoder& enc, int32_t vocab, const std::string& out) {
  fs::remove_all(out);
  zd::BuildOptions o;
  o.inputs = a.inputs;
  o.writer = {out, "bench", vocab, 100'000'000};
  o.threads = a.threads;
  const double t0 = now(), c0 = cpu_seconds();
  Build b{0, 0, zd::build_shards(o, enc)};
  b.seconds = now() - t0;
  b.cpu = cpu_seconds() - c0;
  return b;
}

void row(const char* name, int64_t bytes, double seconds, int64_t tokens, double reference) {
  const double mbps = static_cast<double>(bytes) / 1e6 / seconds;
  std::printf("%-26s %8.2f s %9.1f MB/s %12.0f tok/s %7.2f x\n", name, seconds, mbps,
              tokens > 0 ? static_cast<double>(tokens) / seconds : 0.0, reference > 0 ? mbps / reference : 1.0);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Args a;
    zs::cli::App app("bench_data_shards", "The corpus-to-shards pipeline against a plain read of the same input.");
    app.add_text("--dir", &a.dir, "folder for the generated corpus and the shards", "DIR");
    app.add_size("--size", &a.size, "bytes of generated corpus (default 256M)");
    app.add_int("--threads", &a.threads, "build_shards workers (default: one per core)", 0, 4096);
    app.add_text("--tokenizer", &a.tokenizer, "tokenizer folder, or 'bytes' (default)", "DIR");
    app.add_list("--input", &a.inputs, "input files instead of a generated corpus", "FILE");
    if (!app.parse(argc, argv)) return 0;
    if (a.inputs.empty()) a.inputs = {write_corpus(a.dir, a.size)};
    const auto tok = a.tokenizer == "bytes" ? zs::text::byte_tokenizer() : zs::text::load_tokenizer(a.tokenizer);
    zd::EncodeOptions eo;
    eo.eos_id = tok->eos_id();
    const zd::RecordEncoder enc(*tok, {}, eo);
    const std::string out = a.dir + "/bench_data_shards.out";
    std::printf("bench_data_shards: %zu input file(s) in %s, tokenizer %s, %u cores\n", a.inputs.size(),
                a.dir.c_str(), a.tokenizer.c_str(), std::thread::hardware_concurrency());
    std::printf("%-26s %10s %14s %18s %9s\n", "", "time", "input", "tokens", "vs read");
    int64_t bytes = 0;
    evict(a.inputs);
    const double cold_read = plain_read(a.inputs, &bytes);
    const double ref_cold = static_cast<double>(bytes) / 1e6 / cold_read;
    row("read() cold", bytes, cold_read, 0, 0);
    evict(a.inputs);
    row("dd bs=4M cold", bytes, dd_read(a.inputs), 0, ref_cold);
    evict(a.inputs);
    const Build cold = build(a, enc, tok->vocab_size(), out);
    row("build_shards cold", bytes, cold.seconds, cold.result.tokens, ref_cold);
    const double warm_read = plain_read(a.inputs, &bytes);
    const double ref_warm = static_cast<double>(bytes) / 1e6 / warm_read;
    row("read() warm", bytes, warm_read, 0, 0);
    const Build warm = build(a, enc, tok->vocab_size(), out);
    row("build_shards warm", bytes, warm.seconds, warm.result.tokens, ref_warm);
    std::printf("threads %d; build_shards cold reaches %.0f%% of the cold read, warm %.0f%% of the warm read\n",
                cold.result.threads, 100 * cold_read / cold.seconds, 100 * warm_read / warm.seconds);
    const double per_cpu = static_cast<double>(bytes) / 1e6 / warm.cpu;
    std::printf("warm build: %.2f CPU-s over %.2f s (%.2f cores busy): %.1f MB of input per CPU-second; "
                "%.0f such cores would match the cold read\n",
                warm.cpu, warm.seconds, warm.cpu / warm.seconds, per_cpu, std::ceil(ref_cold / per_cpu));
    const nlohmann::ordered_json j = {
        {"bench", "data_shards"},
        {"bytes", bytes},
        {"tokens", cold.result.tokens},
        {"threads", cold.result.threads},
        {"read_cold_mbps", ref_cold},
        {"read_warm_mbps", ref_warm},
        {"build_cold_mbps", static_cast<double>(bytes) / 1e6 / cold.seconds},
        {"build_warm_mbps", static_cast<double>(bytes) / 1e6 / warm.seconds},
        {"build_cold_tokens_per_s", static_cast<double>(cold.result.tokens) / cold.seconds},
        {"ratio_cold", cold_read / cold.seconds},
        {"ratio_warm", warm_read / warm.seconds},
        {"build_mb_per_cpu_second", per_cpu}};
    std::printf("%s\n", j.dump().c_str());
    fs::remove_all(out);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_data_shards: %s\n", e.what());
    return 1;
  }
}
