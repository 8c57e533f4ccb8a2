// SPDX-License-Identifier: Apache-2.0
// The watchdog: a rank that never joins a collective makes it fail within the timeout with a
// message naming rank, collective, tag and sequence number, and what the other ranks are doing.

#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/test_util.h"
#include "trace.h"
#include "zeroshard/comm/factory.h"
#include "zeroshard/comm/flight_recorder.h"
#include "zeroshard/config/run_options.h"
#include "zeroshard/base/error.h"

namespace zs = zeroshard;
using Clock = std::chrono::steady_clock;

namespace {

zs::CommOptions short_timeout(const std::string& name, int ms) {
  zs::CommOptions o = zs::test::test_comm_options(name);
  o.timeout = std::chrono::milliseconds(ms);
  return o;
}

std::string wait_for_error(const std::shared_ptr<zs::Work>& w, double* seconds) {
  auto t0 = Clock::now();
  try {
    w->wait();
  } catch (const zs::CommTimeoutError& e) {
    *seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return e.what();
  }
  *seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return "";
}

}  // namespace

TEST(Watchdog, RankThatNeverJoinsIsNamed) {
  ZS_REQUIRE_RANKS(2);
  auto world = zs::test::world();
  auto c = zs::make_mpi_world_communicator(short_timeout("wd", 1000));
  at::Tensor t = at::ones({4});
  if (c->rank() == 0) {
    double secs = 0;
    std::string msg = wait_for_error(c->all_reduce(t, zs::ReduceOp::kSum, "wd.hang"), &secs);
    EXPECT_NE(msg.find("comm timeout"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("#1 all_reduce(Float, count=4, op=sum) tag='wd.hang' on wd"), std::string::npos) << msg;
    // Rank 1 already waits in the world barrier below: the report says so.
    EXPECT_NE(msg.find("rank 1: in #"), std::string::npos) << msg;
    EXPECT_NE(msg.find("barrier tag='wd.sync' on world"), std::string::npos) << msg;
    // Fires after the timeout, not before; and well before a hang would end (peer query <= 1 s).
    EXPECT_GE(secs, 0.9);
    EXPECT_LT(secs, 10.0);
    // The communicator is broken now: new collectives are refused at once, naming why.
    try {
      c->barrier("after");
      ADD_FAILURE() << "a broken communicator accepted a collective";
    } catch (const zs::CommError& e) {
      EXPECT_NE(std::string(e.what()).find("timed out"), std::string::npos) << e.what();
    }
  }
  // Rank 1 joins late, after rank 0 saw the error, so the stuck MPI collective drains.
  world->barrier("wd.sync")->wait();
  if (c->rank() != 0) c->all_reduce(t, zs::ReduceOp::kSum, "wd.hang")->wait();
  else std::this_thread::sleep_for(std::chrono::milliseconds(200));
}

TEST(Watchdog, ReportsWhatOtherRanksAreWaitingIn) {
  ZS_REQUIRE_RANKS(2);
  auto world = zs::test::world();
  // Ranks 0 and 1 each wait in a collective the other never calls: a classic cross-wait.
  // Rank 0's timeout fires first (commA), while rank 1 still waits in commB; rank 1's fires later,
  // when rank 0 has moved on to the barrier below. Distinct timeouts keep the order deterministic.
  auto a = zs::make_mpi_world_communicator(short_timeout("commA", 1500));
  auto b = zs::make_mpi_world_communicator(short_timeout("commB", 3500));
  const int me = world->rank();
  at::Tensor t = at::ones({8});
  if (me <= 1) {
    auto& mine = me == 0 ? a : b;
    double secs = 0;
    std::string msg = wait_for_error(mine->all_reduce(t, zs::ReduceOp::kSum, me == 0 ? "unit.A" : "unit.B"), &secs);
    if (me == 0) {
      EXPECT_NE(msg.find("tag='unit.A' on commA"), std::string::npos) << msg;
      EXPECT_NE(msg.find("rank 1: in #1 all_reduce(Float, count=8, op=sum) tag='unit.B' on commB"), std::string::npos)
          << msg;
    } else {
      EXPECT_NE(msg.find("tag='unit.B' on commB"), std::string::npos) << msg;
      EXPECT_NE(msg.find("rank 0: in #"), std::string::npos) << msg;
      EXPECT_NE(msg.find("barrier tag='wd.cross.sync' on world"), std::string::npos) << msg;
    }
  }
  world->barrier("wd.cross.sync")->wait();
  // Drain: everyone who did not yet call a collective joins it now (ranks >= 2 join both).
  std::vector<std::shared_ptr<zs::Work>> late;
  if (me != 0) late.push_back(a->all_reduce(t, zs::ReduceOp::kSum, "unit.A"));
  if (me != 1) late.push_back(b->all_reduce(t, zs::ReduceOp::kSum, "unit.B"));
  for (auto& w : late) w->wait();
}

TEST(Watchdog, ExplicitWaitTimeoutLeavesCollectiveRunning) {
  ZS_REQUIRE_RANKS(2);
  auto world = zs::test::world();
  auto c = zs::make_mpi_world_communicator(short_timeout("wd.wait", 60000));
  at::Tensor t = at::ones({4});
  if (c->rank() == 0) {
    auto w = c->all_reduce(t, zs::ReduceOp::kSum, "slow");
    EXPECT_THROW(w->wait(std::chrono::milliseconds(200)), zs::CommTimeoutError);
    EXPECT_FALSE(w->is_completed());
    world->barrier("wd.wait.go")->wait();  // now let the others join
    w->wait();
    EXPECT_TRUE(at::equal(t, at::full({4}, float(c->size()))));
  } else {
    world->barrier("wd.wait.go")->wait();
    c->all_reduce(t, zs::ReduceOp::kSum, "slow")->wait();
  }
}

// The flight recorder: rank 0 times out in a collective rank 1 skipped; rank 0's watchdog writes
// its file and names it in the error, rank 1 writes its own on SIGUSR2, and zeroshard-trace's
// analysis of the two files names rank 1 as the rank that never issued the collective.
TEST(FlightRecorder, TimeoutAndSigusr2DumpsAndTheTraceNamesTheRankThatSkipped) {
  ZS_REQUIRE_RANKS(2);
  auto world = zs::test::world();
  const int me = world->rank();
  const zs::test::SharedDir dir("flight_records");
  zs::FlightRecorder& recorder = zs::FlightRecorder::instance();
  recorder.configure(64, dir.path, me, world->size());
  auto c = zs::make_mpi_world_communicator(short_timeout("fr", 1000));
  at::Tensor t = at::ones({4});
  c->all_reduce(t, zs::ReduceOp::kSum, "fr.both")->wait();
  const std::string mine = dir.path + "/flight-rank" + std::to_string(me) + ".jsonl";
  if (me == 0) {
    double secs = 0;
    const std::string msg = wait_for_error(c->all_reduce(t, zs::ReduceOp::kSum, "fr.skipped"), &secs);
    EXPECT_NE(msg.find("last collectives are in " + mine), std::string::npos) << msg;
  } else {
    std::raise(SIGUSR2);  // the watchdog thread writes the file within its poll interval
    for (int i = 0; i < 100 && !std::filesystem::exists(mine); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_TRUE(std::filesystem::exists(mine)) << "SIGUSR2 wrote no " << mine;
  }
  world->barrier("fr.sync")->wait();
  if (me == 0) {
    const std::vector<zs::trace::RankDump> dumps = zs::trace::read_dumps(dir.path);
    ASSERT_EQ(dumps.size(), static_cast<size_t>(world->size()));
    EXPECT_EQ(dumps[1].reason, "SIGUSR2");
    std::string report;
    for (const std::string& line : zs::trace::analyze(dumps)) report += line + "\n";
    EXPECT_NE(report.find("'fr': rank 1 never issued #2 all_reduce(Float, count=4, op=sum) tag='fr.skipped' (issued "
                          "by rank 0); it is in no collective"),
              std::string::npos)
        << report;
  }
  // Rank 1 joins late, after rank 0 saw the error, so the stuck MPI collective drains.
  world->barrier("fr.sync2")->wait();
  if (me != 0) c->all_reduce(t, zs::ReduceOp::kSum, "fr.skipped")->wait();
  else std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const zs::SessionOptions& so = zs::test::run_options().session;
  recorder.configure(static_cast<size_t>(so.flight_recorder_entries), so.flight_recorder_dir, me, world->size());
}

// A broken communicator fails every collective pending on it at once: the first failure's file is
// the one kept; the failures after it (within FlightRecorder::kFailureDumpInterval) write nothing
// and are counted in the next file written (here: a SIGUSR2 dump).
TEST(FlightRecorder, OnlyTheFirstOfABurstOfFailuresIsWritten) {
  const int me = zs::test::rank();
  const std::string dir = (std::filesystem::current_path() / ("flight_burst_" + std::to_string(me))).string();
  std::filesystem::remove_all(dir);
  zs::FlightRecorder& recorder = zs::FlightRecorder::instance();
  recorder.configure(16, dir, me, 1);
  const std::string path = recorder.dump_failure("failed: first");
  ASSERT_EQ(path, dir + "/flight-rank" + std::to_string(me) + ".jsonl");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(recorder.dump_failure("failed: later"), "");
  EXPECT_EQ(zs::trace::read_dump(path).reason, "failed: first");
  EXPECT_EQ(recorder.dump("SIGUSR2"), path);
  EXPECT_EQ(zs::trace::read_dump(path).reason, "SIGUSR2");
  std::ifstream in(path);
  std::string head;
  std::getline(in, head);
  EXPECT_NE(head.find("\"failures_not_written\":3"), std::string::npos) << head;
  EXPECT_EQ(recorder.dump_failure("failed: again"), "") << "a SIGUSR2 file does not restart the interval";
  const zs::SessionOptions& so = zs::test::run_options().session;
  recorder.configure(static_cast<size_t>(so.flight_recorder_entries), so.flight_recorder_dir, me,
                     zs::test::world()->size());
  std::filesystem::remove_all(dir);
}
