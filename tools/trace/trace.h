// SPDX-License-Identifier: Apache-2.0
#pragma once
// zeroshard-trace: reads the flight recorder's files of every rank (flight-rank<R>.jsonl,
// zeroshard/comm/flight_recorder.h) and says where the ranks parted: per communicator, the first
// collective at which they ran different things, the ranks that never issued a collective the
// others did (and what each of those is doing instead), the ranks that issued one late, and the
// ranks whose file is missing. No LibTorch, no MPI: it runs on a login node.

#include <cstdint>
#include <string>
#include <vector>

namespace zeroshard::trace {

struct Record {
  uint64_t id = 0;
  std::string comm;
  uint64_t seq = 0;
  std::string op, dtype, reduce, tag, state;
  int64_t count = 0;
  int root = -1;
  double issued = 0, started = 0, ended = 0;
  // "all_reduce(Float, count=1, op=sum) tag='zs.step'"
  std::string describe() const;
  // The same collective as `other` (op, dtype, count, reduce, root, tag).
  bool same_call(const Record& other) const;
  bool finished() const { return state == "completed" || state == "failed"; }
};

struct RankDump {
  std::string path;
  int rank = 0;
  int world_size = 0;
  std::string host, reason;
  int64_t pid = 0;
  double time = 0;
  int64_t entries = 0, recorded = 0;
  std::vector<Record> records;  // oldest first
};

// One file; DataError naming the file and line for anything that is not a flight record.
RankDump read_dump(const std::string& path);
// Every flight-rank<R>.jsonl in `dir`, by rank; IoError when there is none.
std::vector<RankDump> read_dumps(const std::string& dir);

// The report, one finding per line (the summary of the dumps first).
std::vector<std::string> analyze(const std::vector<RankDump>& dumps);

}  // namespace zeroshard::trace
