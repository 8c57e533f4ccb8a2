// SPDX-License-Identifier: Apache-2.0
// zeroshard-trace's reading and analysis (trace.h).

#include "trace.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "zeroshard/base/error.h"

namespace zeroshard::trace {
namespace {

namespace fs = std::filesystem;

// Ranks seen after a collective gap worth reporting as "late".
constexpr double kLateSeconds = 1.0;

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", s);
  return buf;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? "," : "") + std::to_string(ranks[i]);
  return out;
}

template <typename T>
T field(const nlohmann::json& j, const char* key, const std::string& where) {
  ZS_REQUIRE(j.contains(key), DataError, where, ": no '", key, "' (not a zeroshard flight record)");
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    ZS_THROW(DataError, where, ": '", key, "' has the wrong type (not a zeroshard flight record)");
  }
}

Record parse_record(const nlohmann::json& j, const std::string& where) {
  Record r;
  r.id = field<uint64_t>(j, "id", where);
  r.comm = field<std::string>(j, "comm", where);
  r.seq = field<uint64_t>(j, "seq", where);
  r.op = field<std::string>(j, "op", where);
  r.dtype = field<std::string>(j, "dtype", where);
  r.count = field<int64_t>(j, "count", where);
  r.reduce = field<std::string>(j, "reduce", where);
  r.root = field<int>(j, "root", where);
  r.tag = field<std::string>(j, "tag", where);
  r.state = field<std::string>(j, "state", where);
  r.issued = field<double>(j, "issued", where);
  r.started = field<double>(j, "started", where);
  r.ended = field<double>(j, "ended", where);
  return r;
}

// One communicator's records of one rank, by sequence number.
struct RankView {
  const RankDump* dump;
  std::map<uint64_t, const Record*> by_seq;
  uint64_t lo() const { return by_seq.begin()->first; }
  uint64_t hi() const { return by_seq.rbegin()->first; }
};

// What `d`'s rank is doing at its dump, for a rank that is behind on a communicator.
std::string doing(const RankDump& d) {
  for (auto it = d.records.rbegin(); it != d.records.rend(); ++it) {
    if (!it->finished()) {
      return "it is " + std::string(it->state == "started" ? "in " : "queued in ") + "#" + std::to_string(it->seq) +
             " " + it->describe() + " on '" + it->comm + "', issued " + seconds(d.time - it->issued) +
             " before its dump";
    }
  }
  if (d.records.empty()) return "it recorded no collective";
  const Record& last = d.records.back();
  return "it is in no collective: its last, #" + std::to_string(last.seq) + " " + last.describe() + " on '" +
         last.comm + "', " + last.state + " " + seconds(d.time - std::max(last.ended, last.issued)) +
         " before its dump (busy in its own code, stalled or hung outside the collectives)";
}

void analyze_comm(const std::string& comm, const std::vector<RankView>& views, std::vector<std::string>& out) {
  uint64_t window_lo = 0, hi = 0, common_hi = UINT64_MAX;
  for (const RankView& v : views) {
    window_lo = std::max(window_lo, v.lo());
    hi = std::max(hi, v.hi());
    common_hi = std::min(common_hi, v.hi());
  }
  const std::string where = "'" + comm + "'";
  // The first collective the ranks that issued it disagree on.
  for (uint64_t s = window_lo; s <= common_hi; ++s) {
    std::vector<std::pair<const Record*, std::vector<int>>> calls;
    for (const RankView& v : views) {
      auto it = v.by_seq.find(s);
      if (it == v.by_seq.end()) continue;
      auto same = std::find_if(calls.begin(), calls.end(), [&](const auto& c) { return c.first->same_call(*it->second); });
      if (same == calls.end()) {
        calls.push_back({it->second, {v.dump->rank}});
      } else {
        same->second.push_back(v.dump->rank);
      }
    }
    if (calls.size() <= 1) continue;
    std::string line = where + ": the ranks diverged at #" + std::to_string(s) + ":";
    for (size_t i = 0; i < calls.size(); ++i) {
      line += (i ? ";" : "") + std::string(" ") + rank_list(calls[i].second) + " ran " + calls[i].first->describe();
    }
    line += " (a rank that skipped a collective or ran another unit; what follows on " + where +
            " is a consequence)";
    out.push_back(line);
    return;
  }
  // Ranks that never issued the newest collective the others did.
  bool behind = false;
  for (const RankView& v : views) {
    if (v.hi() >= hi) continue;
    behind = true;
    const uint64_t next = v.hi() + 1;
    const Record* theirs = nullptr;
    std::vector<int> issuers;
    for (const RankView& w : views) {
      auto it = w.by_seq.find(next);
      if (it == w.by_seq.end()) continue;
      theirs = it->second;
      issuers.push_back(w.dump->rank);
    }
    std::string line = where + ": rank " + std::to_string(v.dump->rank) + " never issued #" + std::to_string(next);
    if (theirs != nullptr) line += " " + theirs->describe() + " (issued by " + rank_list(issuers) + ")";
    if (hi > next) line += " and is " + std::to_string(hi - v.hi()) + " collectives behind";
    line += "; " + doing(*v.dump);
    out.push_back(line);
  }
  // Collectives every rank issued that have not finished: who came late.
  for (uint64_t s = window_lo; s <= common_hi; ++s) {
    double first = 0, last = 0;
    int last_rank = -1;
    bool open = false;
    for (const RankView& v : views) {
      const Record& r = *v.by_seq.at(s);
      open = open || !r.finished();
      if (first == 0 || r.issued < first) first = r.issued;
      if (r.issued > last) {
        last = r.issued;
        last_rank = v.dump->rank;
      }
    }
    if (!open) continue;
    const Record& r = *views.front().by_seq.at(s);
    std::string line = where + ": #" + std::to_string(s) + " " + r.describe() + " is not complete on every rank";
    if (last - first > kLateSeconds) line += "; rank " + std::to_string(last_rank) + " issued it " + seconds(last - first) + " after the first rank";
    out.push_back(line);
    break;
  }
  if (!behind) {
    bool open = false;
    for (const RankView& v : views) open = open || !v.by_seq.rbegin()->second->finished();
    if (!open) {
      out.push_back(where + ": " + rank_list([&] {
                      std::vector<int> r;
                      for (const RankView& v : views) r.push_back(v.dump->rank);
                      return r;
                    }()) + " agree on #" + std::to_string(window_lo) + " to #" + std::to_string(hi) +
                    ", all completed");
    }
  }
}

}  // namespace

std::string Record::describe() const {
  std::ostringstream os;
  os << op;
  if (op != "barrier") {
    os << "(" << dtype << ", count=" << count;
    if (op == "all_reduce" || op == "reduce_scatter" || op == "reduce_scatter_int8") os << ", op=" << reduce;
    if (op == "broadcast") os << ", root=" << root;
    os << ")";
  }
  os << " tag='" << tag << "'";
  return os.str();
}

bool Record::same_call(const Record& o) const {
  return op == o.op && dtype == o.dtype && count == o.count && reduce == o.reduce && root == o.root && tag == o.tag;
}

RankDump read_dump(const std::string& path) {
  std::ifstream in(path);
  ZS_REQUIRE(in, IoError, "cannot open '", path, "'");
  RankDump d;
  d.path = path;
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    const std::string where = path + ":" + std::to_string(n);
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      ZS_THROW(DataError, where, ": not JSON (", e.what(), ")");
    }
    ZS_REQUIRE(j.is_object(), DataError, where, ": not a JSON object");
    if (n == 1) {
      ZS_REQUIRE(j.contains("flight_recorder"), DataError, where,
                 ": the first line is not a flight recorder header (no 'flight_recorder')");
      d.rank = field<int>(j, "rank", where);
      d.world_size = field<int>(j, "world_size", where);
      d.host = field<std::string>(j, "host", where);
      d.pid = field<int64_t>(j, "pid", where);
      d.reason = field<std::string>(j, "reason", where);
      d.time = field<double>(j, "time", where);
      d.entries = field<int64_t>(j, "entries", where);
      d.recorded = field<int64_t>(j, "recorded", where);
      continue;
    }
    d.records.push_back(parse_record(j, where));
  }
  ZS_REQUIRE(n > 0, DataError, path, ": empty (not a flight recorder file)");
  return d;
}

std::vector<RankDump> read_dumps(const std::string& dir) {
  ZS_REQUIRE(fs::is_directory(dir), IoError, "'", dir, "' is not a folder (zeroshard-trace takes the folder of the "
             "flight-rank<R>.jsonl files, comm.flight_recorder_dir)");
  static const std::regex name("flight-rank[0-9]+\\.jsonl");
  std::vector<RankDump> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (std::regex_match(e.path().filename().string(), name)) out.push_back(read_dump(e.path().string()));
  }
  ZS_REQUIRE(!out.empty(), IoError, "no flight-rank<R>.jsonl in '", dir, "'");
  std::sort(out.begin(), out.end(), [](const RankDump& a, const RankDump& b) { return a.rank < b.rank; });
  return out;
}

std::vector<std::string> analyze(const std::vector<RankDump>& dumps) {
  std::vector<std::string> out;
  int world = 0;
  std::set<int> seen;
  for (const RankDump& d : dumps) {
    world = std::max(world, d.world_size);
    seen.insert(d.rank);
    std::string line = "rank " + std::to_string(d.rank) + " (" + d.host + ", pid " + std::to_string(d.pid) + "): " +
                       std::to_string(d.records.size()) + " collective(s) recorded, dumped for '" + d.reason + "'";
    if (d.recorded > static_cast<int64_t>(d.records.size())) {
      line += "; the " + std::to_string(d.recorded - static_cast<int64_t>(d.records.size())) +
              " before them were dropped (comm.flight_recorder_entries = " + std::to_string(d.entries) + ")";
    }
    out.push_back(line);
  }
  std::vector<int> missing;
  for (int r = 0; r < world; ++r) {
    if (!seen.count(r)) missing.push_back(r);
  }
  if (!missing.empty()) {
    out.push_back("no file from " + rank_list(missing) + " of " + std::to_string(world) +
                  ": a rank that died, or was killed before its watchdog fired, writes none; its files may be on "
                  "another host's comm.flight_recorder_dir");
  }
  // By communicator, each with the ranks that recorded something on it.
  std::map<std::string, std::vector<RankView>> comms;
  for (const RankDump& d : dumps) {
    std::map<std::string, RankView> mine;
    for (const Record& r : d.records) {
      RankView& v = mine.try_emplace(r.comm, RankView{&d, {}}).first->second;
      v.by_seq[r.seq] = &r;
    }
    for (auto& [name, v] : mine) comms[name].push_back(std::move(v));
  }
  for (const auto& [name, views] : comms) analyze_comm(name, views, out);
  return out;
}

}  // namespace zeroshard::trace
