// SPDX-License-Identifier: Apache-2.0
#pragma once
// MetricsWriter: training metrics as JSON lines, one object per line, for zeroshard-plot
// (docs/tools.md) and any other reader. The line kinds:
//   step     {"step":12,"loss":2.31,"lr":0.0006,"tokens_per_s":5120.5,
//             "mem":{"sharded params":1048576,...},"mem_peak":{"sharded params":1048576,...},
//             "comm_bytes":4194304, ...extra keys}
//   eval     {"eval":"val_loss","step":12,"value":2.40}     (any name; loss-like names end in "loss")
//   summary  {"summary":true, ...whatever the program reports}  (the last line)
// A reader tells them apart by "summary", then "eval", then "loss"; other lines are a later kind
// (zeroshard-plot skips them with a note). New keys may be added to any kind; none is removed.
//
// The file is opened (created or truncated) when the writer is constructed, so a path that
// cannot be written is an IoError before training starts, not after the first step. Each line is
// written with one write(2) call as soon as it is complete: a crashed run keeps every finished
// line, and `tail -f` shows steps as they happen. Write from one rank (rank 0), or give each rank
// its own path. Thread-safe (a mutex per writer).
//
// Memory by category from a ShardingEngine, current bytes and this step's peak:
//   record_memory(m, engine.memory());

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "zeroshard/base/json.h"
#include "zeroshard/core/memory_stats.h"

namespace zeroshard {

struct StepMetrics {
  int64_t step = 0;
  double loss = 0;                      // non-finite (a diverged run) is written as null
  std::optional<double> lr;
  std::optional<double> tokens_per_s;   // language models
  std::optional<double> samples_per_s;  // others
  std::vector<std::pair<std::string, int64_t>> mem;  // category -> bytes now (after the step), "mem":{...}
  std::vector<std::pair<std::string, int64_t>> mem_peak;  // category -> the step's peak bytes, "mem_peak":{...}
  std::optional<int64_t> comm_bytes;    // bytes this rank sent/received in collectives this step
  JsonObject extra;                     // further keys, written after the ones above
};

// Fills m.mem with each category's current bytes and m.mem_peak with its peak since the previous
// call (MemoryStats::window_peak), then restarts that window so the next step line holds the next
// step's peak. Call it once per recorded step, from one place (it owns the window); to keep work
// between steps (an evaluation) out of the next step's peak, call mem.restart_window() after it.
void record_memory(StepMetrics& m, const MemoryStats& mem);

class MetricsWriter {
 public:
  // Creates or truncates `path` (not its directory). Throws IoError naming the path.
  explicit MetricsWriter(const std::string& path);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  void write_step(const StepMetrics& m);
  // {"eval":name,"step":step,"value":value}; a non-finite value is written as null.
  void write_eval(int64_t step, const std::string& name, double value);
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
