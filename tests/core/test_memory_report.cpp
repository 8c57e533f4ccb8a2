// SPDX-License-Identifier: Apache-2.0
// Host memory accounting and out-of-memory reports (zeroshard/core/host_memory.h,
// memory_report.h): allocations are recorded with the phase that made them, a limit refuses with
// c10::OutOfMemoryError naming the request, the report is taken at the failing allocation (while
// what was live still is), and the snapshot file is JSON that names the same figures.
// The test main's Session installed the tracking allocator (memory.track_allocations defaults on).

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <new>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/host_cache_guard.h"
#include "zeroshard/base/error.h"
#include "zeroshard/core/host_memory.h"
#include "zeroshard/core/memory_report.h"

namespace zeroshard {
namespace {

constexpr int64_t kMiB = 1 << 20;

// Removes any limit when a test ends, whatever happened in it.
struct LimitGuard {
  ~LimitGuard() { set_host_memory_limit(0, ""); }
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(HostMemory, CountsAndRecordsAllocationsWithTheirPhase) {
  ASSERT_TRUE(host_memory_tracking_installed());
  const HostMemoryStats before = host_memory_stats();
  at::Tensor t;
  {
    MemoryPhase phase("test: three MiB in phase A");
    t = at::empty({3 * kMiB}, at::kByte);
  }
  const HostMemoryStats during = host_memory_stats();
  EXPECT_EQ(during.current - before.current, 3 * kMiB);
  EXPECT_EQ(during.allocations - before.allocations, 1);
  EXPECT_GE(during.peak, during.current);
  EXPECT_EQ(current_memory_phase(), 0) << "the scope restores the previous phase";

  bool found = false;
  for (const HostAllocation& a : largest_host_allocations(100)) {
    if (a.bytes == 3 * kMiB && memory_phase_label(a.phase) == "test: three MiB in phase A") found = true;
  }
  EXPECT_TRUE(found) << "the 3 MiB allocation is listed with its phase";
  bool phase_total = false;
  for (const HostPhaseTotal& p : host_allocations_by_phase()) {
    if (memory_phase_label(p.phase) == "test: three MiB in phase A") {
      EXPECT_EQ(p.bytes, 3 * kMiB);
      EXPECT_EQ(p.count, 1);
      phase_total = true;
    }
  }
  EXPECT_TRUE(phase_total);

  t.reset();
  const HostMemoryStats after = host_memory_stats();
  EXPECT_EQ(after.current, before.current);
  EXPECT_EQ(after.freed_total - during.freed_total, 3 * kMiB);
  EXPECT_EQ(memory_phase_id("test: three MiB in phase A"), memory_phase_id("test: three MiB in phase A"))
      << "labels are interned once";
}

// A window counts only what the section allocates: freeing an older storage inside it (as another
// thread may, at any moment) does not lower its peak.
TEST(HostMemory, WindowPeakIgnoresFreesOfOlderStorages) {
  at::Tensor old = at::empty({4 * kMiB}, at::kByte);
  begin_host_memory_window();
  old.reset();
  at::Tensor a = at::empty({1 * kMiB}, at::kByte);
  at::Tensor b = at::empty({2 * kMiB}, at::kByte);
  a.reset();
  at::Tensor c = at::empty({512 * 1024}, at::kByte);
  EXPECT_EQ(host_memory_window_peak(), 3 * kMiB) << "a and b were live together; old's free is not counted";
  begin_host_memory_window();
  EXPECT_EQ(host_memory_window_peak(), 0) << "a new window starts empty";
}

TEST(HostMemory, LargestAllocationsAreSortedLargestFirst) {
  at::Tensor a = at::empty({5 * kMiB}, at::kByte);
  at::Tensor b = at::empty({7 * kMiB}, at::kByte);
  const auto top = largest_host_allocations(2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].bytes, 7 * kMiB);
  EXPECT_EQ(top[1].bytes, 5 * kMiB);
  EXPECT_GT(top[0].sequence, top[1].sequence) << "b was allocated after a";
}

TEST(MemoryReport, SummaryShowsAllocatorSourcesAndTheRest) {
  const int source = add_memory_source("Test state", [] {
    MemoryRow held{"held in allocator", 2 * kMiB, 4 * kMiB, true, false};
    MemoryRow pinned{"pinned elsewhere", 1 * kMiB, 1 * kMiB, false, false};
    MemoryRow disk{"on disk", 9 * kMiB, 9 * kMiB, false, true};
    return std::vector<MemoryRow>{held, pinned, disk};
  });
  const std::string s = memory_summary();
  remove_memory_source(source);
  EXPECT_NE(s.find("zeroshard memory summary: rank 0 of 1"), std::string::npos) << s;
  EXPECT_NE(s.find("Host allocated memory"), std::string::npos) << s;
  EXPECT_NE(s.find("; block cache of 256.00 MiB ("), std::string::npos) << s;
  EXPECT_NE(s.find("| Host cached free blocks    |"), std::string::npos) << s;
  EXPECT_NE(s.find("| Test state"), std::string::npos) << s;
  EXPECT_NE(s.find("| held in allocator          |     2.00 MiB |     4.00 MiB |"), std::string::npos) << s;
  EXPECT_NE(s.find("| pinned elsewhere *"), std::string::npos) << s;
  EXPECT_NE(s.find("| on disk                    |     9.00 MiB |"), std::string::npos) << s;
  // The rest = the allocator's bytes beyond the rows held in it (2 MiB), never negative.
  const int64_t rest = std::max<int64_t>(0, host_memory_stats().current - 2 * kMiB);
  char expected[64];
  std::snprintf(expected, sizeof(expected), "| activations and other      | %12.2f MiB", rest / double(kMiB));
  EXPECT_NE(s.find(std::string(expected).substr(0, 30)), std::string::npos) << s;
  EXPECT_EQ(memory_summary().find("Test state"), std::string::npos) << "a removed source is gone";
}

TEST(MemoryReport, LimitRefusesWithOutOfMemoryErrorAndTheReportIsTakenAtTheFailure) {
  LimitGuard guard;
  char dir_template[] = "/tmp/zs-memreport-XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  MemoryReportOptions options = memory_report_options();
  options.snapshot_dir = dir;
  options.top_allocations = 3;
  set_memory_report_options(options);

  at::Tensor live = at::empty({6 * kMiB}, at::kByte);  // live at the failure, freed by unwinding below
  set_host_memory_limit(host_memory_stats().current + 4 * kMiB, "memory.limit_mib = test");
  const int phase = memory_phase_id("test: the failing phase");
  bool thrown = false;
  std::string report;
  try {
    MemoryPhase in(phase);
    at::Tensor held = at::empty({2 * kMiB}, at::kByte);  // fits
    at::Tensor too_big = at::empty({3 * kMiB}, at::kByte);  // 2 + 3 > 4: refused
  } catch (const c10::OutOfMemoryError& e) {
    thrown = true;
    const std::string what = e.what_without_backtrace();
    EXPECT_NE(what.find("tried to allocate 3.00 MiB of host memory"), std::string::npos) << what;
    EXPECT_NE(what.find("set by memory.limit_mib = test"), std::string::npos) << what;
    EXPECT_NE(what.find("(during test: the failing phase)"), std::string::npos) << what;
    EXPECT_TRUE(is_out_of_memory(e));
    // By now `held` was freed by the unwinding; the report still shows it (taken at the failure).
    report = out_of_memory_report(e);
  }
  ASSERT_TRUE(thrown) << "an allocation over the limit must throw c10::OutOfMemoryError";
  EXPECT_NE(report.find("out of memory on rank 0 of 1"), std::string::npos) << report;
  EXPECT_NE(report.find("during test: the failing phase"), std::string::npos) << report;
  EXPECT_NE(report.find("Memory when the allocation failed"), std::string::npos) << report;
  EXPECT_NE(report.find("refused allocations: 1"), std::string::npos) << report;
  EXPECT_NE(report.find("Largest live host allocations (2 of 2,"), std::string::npos) << report;
  EXPECT_NE(report.find("6.00 MiB"), std::string::npos) << report;
  EXPECT_NE(report.find("2.00 MiB"), std::string::npos) << report;
  const std::string path = dir + "/zeroshard-oom-rank0.json";
  EXPECT_NE(report.find("Memory snapshot (JSON): " + path), std::string::npos) << report;
  EXPECT_NE(report.find("Exit status 3"), std::string::npos) << report;

  const std::string text = read_file(path);
  const nlohmann::ordered_json snap = nlohmann::ordered_json::parse(text);
  EXPECT_EQ(text.rfind("{\"format\":\"zeroshard-memory-snapshot\",\"version\":1,\"rank\":0,\"world_size\":1,", 0), 0u)
      << text.substr(0, 200);
  EXPECT_EQ(snap.at("phase").get<std::string>(), "test: the failing phase");
  const nlohmann::ordered_json& refused = snap.at("refused");
  EXPECT_TRUE(refused.at("requested").is_number_integer()) << "bytes are integers";
  EXPECT_EQ(refused.at("requested").get<int64_t>(), 3 * kMiB);
  EXPECT_EQ(refused.at("phase").get<std::string>(), "test: the failing phase");
  const nlohmann::ordered_json& largest = snap.at("host_largest");
  ASSERT_TRUE(largest.is_array());
  ASSERT_GE(largest.size(), 2u);
  EXPECT_EQ(largest[0].at("bytes").get<int64_t>(), 6 * kMiB);
  EXPECT_EQ(largest[1].at("bytes").get<int64_t>(), 2 * kMiB);
  EXPECT_EQ(largest[1].at("phase").get<std::string>(), "test: the failing phase");
  EXPECT_EQ(snap.at("host_allocator").at("refused").get<int64_t>(), 1);
  EXPECT_EQ(::access((path + ".tmp").c_str(), F_OK), -1) << "no temporary file is left";
  ::unlink(path.c_str());
  ::rmdir(dir.c_str());

  set_host_memory_limit(0, "");
  EXPECT_NO_THROW(at::empty({8 * kMiB}, at::kByte)) << "no limit: the same request succeeds";
}

TEST(MemoryReport, OutOfMemoryKinds) {
  EXPECT_TRUE(is_out_of_memory(std::bad_alloc()));
  const c10::OutOfMemoryError oom(c10::SourceLocation{"f", "file.cpp", 1}, "CUDA out of memory");
  EXPECT_TRUE(is_out_of_memory(oom));
}

TEST(MemoryReport, SnapshotToAnUnwritablePathIsAnIoErrorNamingIt) {
  try {
    write_memory_snapshot("/nonexistent/zs-dir/snap.json", "");
    FAIL() << "expected an IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot create the memory snapshot '/nonexistent/zs-dir/snap.json.tmp'"),
              std::string::npos)
        << e.what();
  }
}

TEST(HostMemory, NegativeLimitIsAUsageError) { EXPECT_THROW(set_host_memory_limit(-1, "x"), UsageError); }

// ---- the cache of freed blocks ----

using zeroshard::test::CacheGuard;

TEST(HostMemoryCache, TheSessionSizesItFromMemoryHostCacheMib) {
  EXPECT_EQ(host_memory_stats().cache_limit, 256 * kMiB) << "the test main's Session applies the default, 256 MiB";
  try {
    set_host_memory_cache_limit(-1, "test");
    ADD_FAILURE() << "a negative cache limit must be refused";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("test: the host memory cache limit must be >= 0 bytes, got -1"),
              std::string::npos) << e.what();
  }
  MemoryOptions bad;
  bad.host_cache_mib = -1;
  try {
    apply_memory_options(bad, c10::Device(c10::kCPU), 0, 1);
    ADD_FAILURE() << "memory.host_cache_mib = -1 must be refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("memory.host_cache_mib = -1 is out of range [0, 1048576]"),
              std::string::npos) << e.what();
  }
  EXPECT_EQ(host_memory_stats().cache_limit, 256 * kMiB) << "a refused value changes nothing";
}

TEST(HostMemoryCache, AFreedBlockServesTheNextRequestOfExactlyItsSize) {
  CacheGuard guard(64 * kMiB);
  const HostMemoryStats before = host_memory_stats();
  at::Tensor t = at::empty({24 * kMiB}, at::kByte);
  void* const first = t.data_ptr();
  t.reset();
  HostMemoryStats s = host_memory_stats();
  EXPECT_EQ(s.current, before.current) << "a cached block is free to the accounting";
  EXPECT_EQ(s.cached, 24 * kMiB);

  at::Tensor again = at::empty({24 * kMiB}, at::kByte);
  EXPECT_EQ(again.data_ptr(), first) << "the same size gets the cached block back";
  s = host_memory_stats();
  EXPECT_EQ(s.cached, 0);
  EXPECT_EQ(s.cache_hits - before.cache_hits, 1);
  EXPECT_EQ(s.current - before.current, 24 * kMiB) << "a reused block is live again";

  again.reset();
  at::Tensor other = at::empty({24 * kMiB + 64}, at::kByte);
  EXPECT_NE(other.data_ptr(), first) << "another size does not take it";
  EXPECT_EQ(host_memory_stats().cached, 24 * kMiB);

  at::Tensor small = at::empty({kHostCacheMinBlock - 64}, at::kByte);
  small.reset();
  EXPECT_EQ(host_memory_stats().cached, 24 * kMiB) << "blocks under 128 KiB go back to the system at once";
  EXPECT_EQ(host_memory_stats().cache_hits - before.cache_hits, 1);
}

TEST(HostMemoryCache, ItKeepsWithinItsLimitAndGivesTheOldestBlocksBackFirst) {
  CacheGuard guard(50 * kMiB);
  const int64_t hits = host_memory_stats().cache_hits;
  at::Tensor a = at::empty({20 * kMiB}, at::kByte);
  at::Tensor b = at::empty({20 * kMiB}, at::kByte);
  at::Tensor c = at::empty({20 * kMiB}, at::kByte);
  void* const pb = b.data_ptr();
  void* const pc = c.data_ptr();
  a.reset();
  b.reset();
  c.reset();  // 60 MiB freed, 50 may stay: a (the oldest) goes back
  EXPECT_EQ(host_memory_stats().cached, 40 * kMiB);
  at::Tensor x = at::empty({20 * kMiB}, at::kByte);
  at::Tensor y = at::empty({20 * kMiB}, at::kByte);
  EXPECT_EQ(x.data_ptr(), pc) << "the most recently freed block of the size comes first";
  EXPECT_EQ(y.data_ptr(), pb);
  at::Tensor z = at::empty({20 * kMiB}, at::kByte);
  EXPECT_EQ(host_memory_stats().cache_hits - hits, 2) << "a's block was given back, not kept";
  EXPECT_EQ(host_memory_stats().cached, 0);

  at::Tensor big = at::empty({60 * kMiB}, at::kByte);
  big.reset();
  EXPECT_EQ(host_memory_stats().cached, 0) << "a block over the whole limit is never kept";
  x.reset();
  EXPECT_EQ(host_memory_stats().cached, 20 * kMiB);
  set_host_memory_cache_limit(0, "test");
  EXPECT_EQ(host_memory_stats().cached, 0) << "turning the cache off gives back what it holds";
  y.reset();
  EXPECT_EQ(host_memory_stats().cached, 0);
}

// With memory.limit_mib in force, live and cached bytes together stay within it: cached blocks are
// given back (the oldest first) before a fresh allocation would pass it.
TEST(HostMemoryCache, LiveAndCachedBytesStayWithinTheMemoryLimit) {
  CacheGuard guard(256 * kMiB);
  set_host_memory_limit(host_memory_stats().current + 40 * kMiB, "memory.limit_mib = test");
  at::Tensor a = at::empty({30 * kMiB}, at::kByte);
  a.reset();
  EXPECT_EQ(host_memory_stats().cached, 30 * kMiB);
  at::Tensor b = at::empty({20 * kMiB}, at::kByte);  // 20 live + 30 cached would pass 40
  HostMemoryStats s = host_memory_stats();
  EXPECT_EQ(s.cached, 0) << "the cached block went back to make room";
  EXPECT_LE(s.current + s.cached, s.limit);
  at::Tensor c = at::empty({15 * kMiB}, at::kByte);
  c.reset();  // 20 live + 15 cached fits
  EXPECT_EQ(host_memory_stats().cached, 15 * kMiB);
  at::Tensor d = at::empty({4 * kMiB}, at::kByte);
  d.reset();  // 20 live + 19 cached fits
  EXPECT_EQ(host_memory_stats().cached, 19 * kMiB);
  at::Tensor e = at::empty({3 * kMiB}, at::kByte);  // 23 live + 19 cached would pass 40: the oldest goes
  s = host_memory_stats();
  EXPECT_EQ(s.cached, 4 * kMiB);
  EXPECT_LE(s.current + s.cached, s.limit);

}

// Threads allocating and freeing blocks of a few sizes at once (as the training thread, intra-op
// workers and the communicator's thread do): every allocation is served, accounting returns to
// where it started, the cache never passes its limit, and blocks are reused.
TEST(HostMemoryCache, ThreadsAllocatingAndFreeingAtOnceKeepItConsistent) {
  CacheGuard guard(8 * kMiB);
  const HostMemoryStats before = host_memory_stats();
  std::atomic<int64_t> over_limit{0};
  auto work = [&](int seed) {
    for (int i = 0; i < 400; ++i) {
      const int64_t bytes = (int64_t{128} << 10) * (1 + (i * 7 + seed) % 5);  // 128 to 640 KiB
      at::Tensor t = at::empty({bytes}, at::kByte);
      t.data_ptr<uint8_t>()[0] = 1;
      t.data_ptr<uint8_t>()[bytes - 1] = 2;
      if (host_memory_stats().cached > 8 * kMiB) ++over_limit;
    }
  };
  std::vector<std::thread> threads;
  for (int k = 0; k < 3; ++k) threads.emplace_back(work, k);
  for (auto& t : threads) t.join();
  const HostMemoryStats after = host_memory_stats();
  EXPECT_EQ(over_limit.load(), 0);
  EXPECT_EQ(after.current, before.current);
  EXPECT_LE(after.cached, 8 * kMiB);
  EXPECT_GT(after.cache_hits - before.cache_hits, 600) << "of 1200 allocations of 5 sizes, most are reuses";
}

// ru_minflt: minor page faults of this process (every first touch of a fresh page).
int64_t minor_faults() {
  struct rusage u {};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// What the cache is for: a loop that allocates, fills and frees the same large buffers (as a
// training step does with its gradient buffers and gathered parameters) touches fresh pages every
// round without it (glibc's aligned allocations do not reuse the freed chunks, or return them to
// the kernel) and none with it.
TEST(HostMemoryCache, ARepeatedStepFaultsNoFreshPagesAfterTheFirst) {
  CacheGuard guard(256 * kMiB);
  auto round = [] {
    std::vector<at::Tensor> buffers;
    for (int i = 0; i < 3; ++i) {
      buffers.push_back(at::empty({24 * kMiB}, at::kByte));
      buffers.back().fill_(1);
      at::Tensor small = at::empty({1000}, at::kFloat);  // the small allocations a step makes beside them
      small.fill_(0);
    }
  };
  round();
  const int64_t before = minor_faults();
  for (int r = 0; r < 8; ++r) round();
  const int64_t faults = minor_faults() - before;
  const int64_t pages_per_round = 3 * 24 * kMiB / ::sysconf(_SC_PAGESIZE);
  EXPECT_LT(faults, pages_per_round / 10) << faults << " minor faults in 8 rounds of " << pages_per_round
                                          << " pages each";
}

}  // namespace
}  // namespace zeroshard
