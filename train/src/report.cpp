// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/train/report.h"

#include <c10/core/ScalarType.h>

#include <cctype>
#include <cmath>

#include "zeroshard/core/memory_stats.h"

namespace zeroshard {
namespace {

ProgressOptions progress_options(const Session& s, const ReportOptions& o) {
  ProgressOptions p;
  p.total_steps = o.total_steps;
  p.items_name = o.items_name;
  p.log_every = o.log_interval;
  p.enabled = s.rank() == 0;
  p.tty = o.progress == ProgressStyle::kBar ? 1 : (o.progress == ProgressStyle::kLines ? 0 : -1);
  return p;
}

// "on NVMe (disk)" -> "on_nvme_disk": lower-case letters, digits and single '_'.
std::string tag_name(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    } else if (!out.empty() && out.back() != '_') {
      out.push_back('_');
    }
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out;
}

}  // namespace

int64_t comm_bytes(const ShardingEngine& engine) {
  const CommCounters& c = engine.comm_counters();
  return c.all_gather_bytes + c.reduce_bytes;
}

TrainingReport::TrainingReport(Session& session, const ShardingEngine& engine, ReportOptions options)
    : session_(session),
      engine_(engine),
      options_(std::move(options)),
      bar_(progress_options(session, options_)),
      metrics_(session.rank() == 0 && !options_.metrics_path.empty()
                   ? std::make_unique<MetricsWriter>(options_.metrics_path)
                   : nullptr),
      tensorboard_(session.rank() == 0 && !options_.tensorboard_dir.empty()
                       ? std::make_unique<TensorBoardWriter>(options_.tensorboard_dir)
                       : nullptr) {
  last_comm_bytes_ = comm_bytes(engine_);
}

TrainingReport::~TrainingReport() = default;

void TrainingReport::step(int64_t step, double loss, double lr, int64_t items, double seconds,
                          const StepStats& stats) {
  const MemoryStats& mem = engine_.memory();
  bar_.update({step, loss, lr, items, mem.total_current(), seconds});
  const int64_t comm = comm_bytes(engine_);
  if (metrics_) {
    StepMetrics m;
    m.step = step;
    m.loss = loss;
    m.lr = lr;
    (options_.items_name == "tok" ? m.tokens_per_s : m.samples_per_s) = bar_.items_per_second();
    record_memory(m, mem);  // "mem" after the step, "mem_peak" during it
    m.comm_bytes = comm - last_comm_bytes_;
    metrics_->write_step(m);
  }
  if (tensorboard_) write_tensorboard_step(step, loss, lr, stats, comm - last_comm_bytes_);
  last_comm_bytes_ = comm;
}

// Tags: train/* (loss, lr, tokens_per_s or samples_per_s, grad_norm, loss_scale), memory_mib/* by
// category (memory_report's names as tags: "on NVMe (disk)" -> on_nvme_disk) and their total,
// comm_mib/per_step.
void TrainingReport::write_tensorboard_step(int64_t step, double loss, double lr, const StepStats& stats,
                                            int64_t comm) {
  constexpr double kMiB = 1024.0 * 1024.0;
  std::vector<std::pair<std::string, double>> v = {
      {"train/loss", loss},
      {"train/lr", lr},
      {options_.items_name == "tok" ? "train/tokens_per_s" : "train/samples_per_s", bar_.items_per_second()}};
  if (!std::isnan(stats.grad_norm)) v.emplace_back("train/grad_norm", stats.grad_norm);
  if (!std::isnan(stats.loss_scale)) v.emplace_back("train/loss_scale", stats.loss_scale);
  const MemoryStats& mem = engine_.memory();
  for (int c = 0; c < static_cast<int>(MemCategory::kCount); ++c) {
    const auto cat = static_cast<MemCategory>(c);
    v.emplace_back("memory_mib/" + tag_name(to_string(cat)), static_cast<double>(mem.current(cat)) / kMiB);
  }
  v.emplace_back("memory_mib/total", static_cast<double>(mem.total_current()) / kMiB);
  v.emplace_back("comm_mib/per_step", static_cast<double>(comm) / kMiB);
  tensorboard_->write_scalars(step, v);
}

void TrainingReport::note(const std::string& line) { bar_.println(line); }

void TrainingReport::eval(int64_t step, const std::string& name, double value, const std::string& text) {
  if (!text.empty()) bar_.println(text);
  last_comm_bytes_ = comm_bytes(engine_);  // the next step's count excludes evaluation
  if (metrics_) {
    metrics_->write_eval(step, name, value);
    engine_.memory().restart_window();  // the next step's peak excludes evaluation
  }
  if (tensorboard_) tensorboard_->write_scalar(step, "eval/" + name, value);
}

void TrainingReport::summary(const MetricFields& values, const std::string& text) {
  bar_.finish();
  bar_.println(text);
  if (metrics_) metrics_->write_summary(values);
}

void TrainingReport::finish_progress() { bar_.finish(); }

double TrainingReport::average_items_per_second() const {
  const double t = bar_.elapsed_s();
  return t > 0 ? static_cast<double>(bar_.total_items()) / t : 0;
}

double TrainingReport::elapsed_s() const { return bar_.elapsed_s(); }

}  // namespace zeroshard
