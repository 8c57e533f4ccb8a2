// SPDX-License-Identifier: Apache-2.0
#pragma once
// TrainingReport: everything a training run shows and records, in one place: the progress bar
// (rank 0, zeroshard/train/progress.h), plain result lines, the --metrics-out JSON lines
// (zeroshard/train/metrics.h) and the --tensorboard event file (zeroshard/train/tensorboard.h).
// The Trainer uses it; programs with their own loop can too.
//
// Collective: no (it reads only this rank's engine counters); values passed in are expected to be
// the same on every rank already (all-reduced losses, accuracies). Rank 0 prints and writes.

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "zeroshard/config/run_options.h"  // ProgressStyle
#include "zeroshard/train/metrics.h"
#include "zeroshard/train/tensorboard.h"
#include "zeroshard/train/progress.h"
#include "zeroshard/core/session.h"
#include "zeroshard/engine/engine.h"

namespace zeroshard {

struct ReportOptions {
  int64_t total_steps = 0;
  std::string items_name = "samples";  // "tok" -> tokens_per_s, "samples" -> samples_per_s
  int log_interval = 10;
  std::string metrics_path;            // --metrics-out; empty: none
  std::string tensorboard_dir;         // --tensorboard / logging.tensorboard_dir; empty: none
  ProgressStyle progress = ProgressStyle::kAuto;  // logging.progress
};

// What a step reports besides its loss and learning rate (TensorBoard); NaN: not known.
struct StepStats {
  double grad_norm = std::numeric_limits<double>::quiet_NaN();   // global L2 norm before clipping
  double loss_scale = std::numeric_limits<double>::quiet_NaN();  // the loss scale the step used
};

class TrainingReport {
 public:
  TrainingReport(Session& session, const ShardingEngine& engine, ReportOptions options);
  ~TrainingReport();

  // After optimizer step `step` (1-based count) that took `seconds`: progress bar, one metrics
  // line and one TensorBoard event (throughput over the recent steps' own time, so evaluations do
  // not count).
  void step(int64_t step, double loss, double lr, int64_t items, double seconds, const StepStats& stats = {});
  // A line of text for the person watching (rank 0), above the progress bar.
  void note(const std::string& line);
  // An evaluation result: `text` is printed (unless empty); recorded as
  // {"eval":name,"step":step,"value":value} and as TensorBoard scalar "eval/<name>".
  void eval(int64_t step, const std::string& name, double value, const std::string& text);
  // The final summary line of the metrics file ({"summary":true, ...values}); `text` is printed.
  void summary(const MetricFields& values, const std::string& text);
  void finish_progress();

  // Items per second over the whole run so far (not the recent window).
  double average_items_per_second() const;
  double elapsed_s() const;

 private:
  Session& session_;
  const ShardingEngine& engine_;
  ReportOptions options_;
  ProgressBar bar_;
  void write_tensorboard_step(int64_t step, double loss, double lr, const StepStats& stats, int64_t comm);

  std::unique_ptr<MetricsWriter> metrics_;  // rank 0 with --metrics-out, else null
  std::unique_ptr<TensorBoardWriter> tensorboard_;  // rank 0 with a TensorBoard folder, else null
  int64_t last_comm_bytes_ = 0;
};

// Bytes the engine's collectives moved so far on this rank: what the parameter gathers delivered and
// what the gradient reductions sent (CommCounters; quantized collectives count their encoded bytes).
int64_t comm_bytes(const ShardingEngine& engine);

}  // namespace zeroshard
