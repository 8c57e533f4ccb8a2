// SPDX-License-Identifier: Apache-2.0
// Host memory accounting and out-of-memory reports (zeroshard/core/host_memory.h,
// memory_report.h): allocations are recorded with the phase that made them, a limit refuses with
// c10::OutOfMemoryError naming the request, the report is taken at the failing allocation (while
// what was live still is), and the snapshot file is JSON that names the same figures.
// The test main's Session installed the tracking allocator (memory.track_allocations defaults on).

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <new>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

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

}  // namespace
}  // namespace zeroshard
