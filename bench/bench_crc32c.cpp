// SPDX-License-Identifier: Apache-2.0
// bench_crc32c: throughput of zeroshard's CRC-32C (zeroshard/base/crc32c.h), the checksum of every
// checkpoint file, offloaded state chunk and TensorBoard record, from a 64-byte record to a
// 64 MiB chunk. A micro-benchmark of one kernel, so it uses Google Benchmark (Debian's
// libbenchmark-dev): repetitions until the timing is stable, bytes/s per size, console or JSON.
// The other benchmarks each measure zeroshard against a reference in the same run and print the
// ratio, which Google Benchmark's one-function-per-case model does not fit.
//
//   build/bin/bench_crc32c [--benchmark_filter=REGEX] [--benchmark_format=json] ...
//
// The hardware path (SSE4.2 crc32, chosen at run time) runs at several GB/s on one core; the table
// path, on CPUs without it, at a few hundred MB/s.

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "zeroshard/base/cli.h"
#include "zeroshard/base/crc32c.h"
#include "zeroshard/base/error.h"

namespace {

void BM_Crc32c(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0));
  std::vector<unsigned char> buf(bytes);
  for (size_t i = 0; i < bytes; ++i) buf[i] = static_cast<unsigned char>(i * 131 + 7);
  uint32_t crc = 0;
  for (auto _ : state) {
    crc = zeroshard::crc32c(buf.data(), bytes, crc);
    benchmark::DoNotOptimize(crc);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}
BENCHMARK(BM_Crc32c)->RangeMultiplier(16)->Range(64, 64 << 20);

}  // namespace

int main(int argc, char** argv) {
  // --help and --version are zeroshard's; every --benchmark_* flag goes to Google Benchmark.
  zeroshard::cli::App app("bench_crc32c", "CRC-32C throughput, 64 B to 64 MiB, with Google Benchmark.");
  app.footer(
      "Google Benchmark's flags (as --flag=value): --benchmark_filter=REGEX, --benchmark_min_time=SECONDS,\n"
      "--benchmark_repetitions=N, --benchmark_format=console|json|csv, --benchmark_out=FILE,\n"
      "--benchmark_list_tests; an unknown flag is an error (exit 2).");
  app.cli().allow_extras();
  try {
    if (!app.parse(argc, argv)) return 0;
  } catch (const zeroshard::UsageError& e) {
    std::fprintf(stderr, "bench_crc32c: usage error: %s\n", e.message().c_str());
    return 2;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
