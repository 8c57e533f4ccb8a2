#pragma once
// MetricsWriter: training metrics as JSON lines, one object per line, for zeroshard-plot
// (docs/tools.md) and any other reader. Per step:
//   {"step":12,"loss":2.31,"lr":0.0006,"tokens_per_s":5120.5,"mem":{"sharded params":1048576,...},
//    "comm_bytes":4194304, ...extra keys}
// and at the end one line with "summary": true plus whatever the program reports.
//
// The file is opened (created or truncated) when the writer is constructed, so a path that
// cannot be written is an IoError before training starts, not after the first step. Each line is
// written with one write(2) call as soon as it is complete: a crashed run keeps every finished
// line, and `tail -f` shows steps as they happen. Write from one rank (rank 0), or give each rank
// its own path. Thread-safe (a mutex per writer).
//
// Memory by category from a ShardingEngine:
//   for (int c = 0; c < int(MemCategory::kCount); ++c)
//     m.mem.emplace_back(to_string(MemCategory(c)), engine.memory().current(MemCategory(c)));

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "zeroshard/base/json.h"

namespace zeroshard {

struct StepMetrics {
  int64_t step = 0;
  double loss = 0;                      // non-finite (a diverged run) is written as null
  std::optional<double> lr;
  std::optional<double> tokens_per_s;   // language models
  std::optional<double> samples_per_s;  // others
  std::vector<std::pair<std::string, int64_t>> mem;  // category -> bytes, written as "mem":{...}
  std::optional<int64_t> comm_bytes;    // bytes this rank sent/received in collectives this step
  JsonObject extra;                     // further keys, written after the ones above
};

class MetricsWriter {
 public:
  // Creates or truncates `path` (not its directory). Throws IoError naming the path.
  explicit MetricsWriter(const std::string& path);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  void write_step(const StepMetrics& m);
  // {"summary":true, ...fields}. `fields` must not hold "summary" itself.
  void write_summary(const JsonObject& fields);
  // Any object as one line.
  void write_line(const JsonObject& object);

  const std::string& path() const { return path_; }
  int64_t lines_written() const;

  // The JSON object of one step line (without the newline), as write_step writes it.
  static JsonObject step_object(const StepMetrics& m);

 private:
  std::string path_;
  int fd_ = -1;
  mutable std::mutex mu_;
  int64_t lines_ = 0;
};

}  // namespace zeroshard
