// SPDX-License-Identifier: Apache-2.0
// zeroshard-trace's analysis on made-up flight recorder files: a rank that skipped a collective, a
// rank that ran another unit's gather, a stalled rank, a missing file, ranks that agree; and its
// errors for files that are not flight records.

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "trace.h"
#include "zeroshard/base/error.h"

namespace zs = zeroshard;
namespace zt = zeroshard::trace;
namespace fs = std::filesystem;

namespace {

// One collective of a made-up file.
struct Call {
  uint64_t seq;
  std::string op, tag, state = "completed";
  double issued = 100;
  int64_t count = 4;
  std::string comm = "world";
};

zt::RankDump dump_of(int rank, int world, const std::vector<Call>& calls, double time = 200) {
  zt::RankDump d;
  d.rank = rank;
  d.world_size = world;
  d.host = "node" + std::to_string(rank);
  d.pid = 1000 + rank;
  d.reason = "test";
  d.time = time;
  d.entries = 64;
  d.recorded = static_cast<int64_t>(calls.size());
  uint64_t id = 1;
  for (const Call& c : calls) {
    zt::Record r;
    r.id = id++;
    r.comm = c.comm;
    r.seq = c.seq;
    r.op = c.op;
    r.dtype = "Float";
    r.count = c.op == "barrier" ? 0 : c.count;
    r.reduce = "sum";
    r.tag = c.tag;
    r.state = c.state;
    r.issued = c.issued;
    r.started = c.state == "issued" ? 0 : c.issued;
    r.ended = c.state == "completed" ? c.issued + 0.01 : 0;
    d.records.push_back(r);
  }
  return d;
}

std::string report(const std::vector<zt::RankDump>& dumps) {
  std::string out;
  for (const std::string& line : zt::analyze(dumps)) out += line + "\n";
  return out;
}

TEST(Trace, ARankThatSkippedACollectiveIsWhereTheRanksDiverged) {
  const std::string r = report({
      dump_of(0, 2, {{1, "all_reduce", "loss"}, {2, "barrier", "sync"}, {3, "all_reduce", "step", "started"}}),
      dump_of(1, 2, {{1, "all_reduce", "loss"}, {2, "all_reduce", "step", "started"}}),
  });
  EXPECT_TRUE(zs::test::contains(r, "'world': the ranks diverged at #2: rank 0 ran barrier tag='sync'; rank 1 ran "
                                    "all_reduce(Float, count=4, op=sum) tag='step'"))
      << r;
  EXPECT_FALSE(zs::test::contains(r, "never issued")) << "after a divergence the rest is a consequence:\n" << r;
}

TEST(Trace, ARankThatGatheredAnotherUnitIsNamedWithBothUnits) {
  const std::string r = report({
      dump_of(0, 3, {{1, "all_gather", "blocks.0", "started"}}),
      dump_of(1, 3, {{1, "all_gather", "blocks.0", "started"}}),
      dump_of(2, 3, {{1, "all_gather", "blocks.1", "started", 100, 8}}),
  });
  EXPECT_TRUE(zs::test::contains(r, "diverged at #1: ranks 0,1 ran all_gather(Float, count=4) tag='blocks.0'; rank 2 "
                                    "ran all_gather(Float, count=8) tag='blocks.1'"))
      << r;
}

TEST(Trace, AStalledRankNeverIssuedTheCollectiveTheOthersWaitIn) {
  const std::string r = report({
      dump_of(0, 3, {{1, "all_reduce", "a"}, {2, "all_reduce", "b"}, {3, "all_gather", "blocks.2", "started", 150}}),
      dump_of(1, 3, {{1, "all_reduce", "a"}, {2, "all_reduce", "b", "completed", 140}}),
      dump_of(2, 3, {{1, "all_reduce", "a"}, {2, "all_reduce", "b"}, {3, "all_gather", "blocks.2", "started", 151}}),
  });
  EXPECT_TRUE(zs::test::contains(r, "'world': rank 1 never issued #3 all_gather(Float, count=4) tag='blocks.2' "
                                    "(issued by ranks 0,2); it is in no collective: its last, #2 all_reduce(Float, "
                                    "count=4, op=sum) tag='b' on 'world', completed 60.0 s before its dump"))
      << r;
}

TEST(Trace, ARankBehindAndWaitingElsewhereSaysWhere) {
  const std::string r = report({
      dump_of(0, 2, {{1, "all_reduce", "a"}, {2, "all_reduce", "b"}, {3, "all_reduce", "c", "started"}}),
      dump_of(1, 2, {{1, "all_reduce", "a"}, {1, "barrier", "node.sync", "started", 180, 0, "node"}}),
  });
  EXPECT_TRUE(zs::test::contains(r, "'world': rank 1 never issued #2 all_reduce(Float, count=4, op=sum) tag='b' "
                                    "(issued by rank 0) and is 2 collectives behind; it is in #1 barrier "
                                    "tag='node.sync' on 'node', issued 20.0 s before its dump"))
      << r;
}

TEST(Trace, AMissingFileAndALateRankAreReported) {
  const std::string r = report({
      dump_of(0, 3, {{1, "all_reduce", "a", "started", 100}}),
      dump_of(1, 3, {{1, "all_reduce", "a", "started", 112.5}}),
  });
  EXPECT_TRUE(zs::test::contains(r, "no file from rank 2 of 3")) << r;
  EXPECT_TRUE(zs::test::contains(r, "#1 all_reduce(Float, count=4, op=sum) tag='a' is not complete on every rank; "
                                    "rank 1 issued it 12.5 s after the first rank"))
      << r;
}

TEST(Trace, RanksThatAgreeSaySo) {
  const std::vector<Call> calls = {{1, "all_reduce", "a"}, {2, "barrier", "b"}};
  const std::string r = report({dump_of(0, 2, calls), dump_of(1, 2, calls)});
  EXPECT_TRUE(zs::test::contains(r, "'world': ranks 0,1 agree on #1 to #2, all completed")) << r;
  EXPECT_FALSE(zs::test::contains(r, "never issued")) << r;
  EXPECT_FALSE(zs::test::contains(r, "diverged")) << r;
}

TEST(Trace, FilesThatAreNotFlightRecordsAreErrorsNamingFileAndLine) {
  const fs::path dir = fs::current_path() / "trace_bad_files";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string header =
      R"({"flight_recorder":1,"rank":0,"world_size":1,"host":"h","pid":1,"reason":"r","time":1,"entries":4,"recorded":1})";
  std::ofstream(dir / "flight-rank0.jsonl") << header << "\n{\"id\":1,\"comm\":\"world\"\n";
  std::string err = zs::test::error_text_of<zs::DataError>([&] { zt::read_dumps(dir.string()); });
  EXPECT_TRUE(zs::test::contains(err, "flight-rank0.jsonl:2: not JSON")) << err;
  std::ofstream(dir / "flight-rank0.jsonl") << header << "\n{\"id\":1,\"comm\":\"world\"}\n";
  err = zs::test::error_text_of<zs::DataError>([&] { zt::read_dumps(dir.string()); });
  EXPECT_TRUE(zs::test::contains(err, "flight-rank0.jsonl:2: no 'seq' (not a zeroshard flight record)")) << err;
  std::ofstream(dir / "flight-rank0.jsonl") << "{\"rank\":0}\n";
  err = zs::test::error_text_of<zs::DataError>([&] { zt::read_dumps(dir.string()); });
  EXPECT_TRUE(zs::test::contains(err, "flight-rank0.jsonl:1: the first line is not a flight recorder header")) << err;
  fs::remove(dir / "flight-rank0.jsonl");
  err = zs::test::error_text_of<zs::IoError>([&] { zt::read_dumps(dir.string()); });
  EXPECT_TRUE(zs::test::contains(err, "no flight-rank<R>.jsonl in")) << err;
  fs::remove_all(dir);
}

}  // namespace
