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
//
// Numbers: integers (counts, bytes, steps) are written as integers; doubles in the shortest form
// that reads back to the same double, always with a fraction or an exponent (2.0, 0.1, 1e-05);
// a non-finite double as null.

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "zeroshard/core/memory_stats.h"

namespace zeroshard {

// Keys a program adds to a line (a step line's `extra`, the summary), in the order added; a
// value is an integer, a double, true/false or a string. Adding a key twice is a UsageError.
class MetricFields {
 public:
  using Value = std::variant<int64_t, uint64_t, double, bool, std::string>;

  MetricFields& add(const std::string& key, double v) { return put(key, v); }
  MetricFields& add(const std::string& key, bool v) { return put(key, v); }
  MetricFields& add(const std::string& key, const std::string& v) { return put(key, v); }
  MetricFields& add(const std::string& key, const char* v) { return put(key, std::string(v)); }
  template <typename T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  MetricFields& add(const std::string& key, T v) {
    if constexpr (std::is_signed_v<T>) return put(key, static_cast<int64_t>(v));
    else return put(key, static_cast<uint64_t>(v));
  }

  bool empty() const { return fields_.empty(); }
  const std::vector<std::pair<std::string, Value>>& fields() const { return fields_; }

 private:
  MetricFields& put(const std::string& key, Value v);
  std::vector<std::pair<std::string, Value>> fields_;
};

struct StepMetrics {
  int64_t step = 0;
  double loss = 0;                      // non-finite (a diverged run) is written as null
  std::optional<double> lr;
  std::optional<double> tokens_per_s;   // language models
  std::optional<double> samples_per_s;  // others
  std::vector<std::pair<std::string, int64_t>> mem;  // category -> bytes now (after the step), "mem":{...}
  std::vector<std::pair<std::string, int64_t>> mem_peak;  // category -> the step's peak bytes, "mem_peak":{...}
  std::optional<int64_t> comm_bytes;    // bytes this rank sent/received in collectives this step
  MetricFields extra;                   // further keys, written after the ones above (none of theirs)
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
  // {"summary":true, ...fields}. `fields` must not hold "summary" itself (a UsageError).
  void write_summary(const MetricFields& fields);

  const std::string& path() const { return path_; }
  int64_t lines_written() const;

  // The JSON text of one step line (without the newline), as write_step writes it. A UsageError
  // when m.extra repeats a key of the line.
  static std::string step_line(const StepMetrics& m);

 private:
  // One complete line (JSON text without the newline), written with one write(2).
  void write_line(const std::string& line);

  std::string path_;
  int fd_ = -1;
  mutable std::mutex mu_;
  int64_t lines_ = 0;
};

}  // namespace zeroshard
