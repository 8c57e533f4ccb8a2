#include "zeroshard/train/report.h"

#include "zeroshard/core/config.h"

#include <c10/core/ScalarType.h>

#include "zeroshard/core/memory_stats.h"

namespace zeroshard {
namespace {

ProgressOptions progress_options(const Session& s, const ReportOptions& o) {
  ProgressOptions p;
  p.total_steps = o.total_steps;
  p.items_name = o.items_name;
  p.log_every = o.log_interval;
  p.enabled = s.rank() == 0;
  using L = config::LoggingConfig;
  const L::Progress mode = s.config().logging().progress();
  p.tty = mode == L::BAR ? 1 : (mode == L::LINES ? 0 : -1);
  return p;
}

}  // namespace

int64_t comm_bytes(const ShardingEngine& engine, c10::ScalarType reduce_dtype) {
  const CommCounters& c = engine.comm_counters();
  return c.all_gather_elements * static_cast<int64_t>(c10::elementSize(engine.compute_dtype())) +
         c.reduce_elements * static_cast<int64_t>(c10::elementSize(reduce_dtype));
}

TrainingReport::TrainingReport(Session& session, const ShardingEngine& engine, ReportOptions options)
    : session_(session),
      engine_(engine),
      options_(std::move(options)),
      bar_(progress_options(session, options_)),
      metrics_(session.rank() == 0 && !options_.metrics_path.empty()
                   ? std::make_unique<MetricsWriter>(options_.metrics_path)
                   : nullptr) {
  last_comm_bytes_ = comm_bytes(engine_, options_.reduce_dtype);
}

TrainingReport::~TrainingReport() = default;

void TrainingReport::step(int64_t step, double loss, double lr, int64_t items, double seconds) {
  const MemoryStats& mem = engine_.memory();
  bar_.update({step, loss, lr, items, mem.total_current(), seconds});
  const int64_t comm = comm_bytes(engine_, options_.reduce_dtype);
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
  last_comm_bytes_ = comm;
}

void TrainingReport::note(const std::string& line) { bar_.println(line); }

void TrainingReport::eval(int64_t step, const std::string& name, double value, const std::string& text) {
  if (!text.empty()) bar_.println(text);
  last_comm_bytes_ = comm_bytes(engine_, options_.reduce_dtype);  // the next step's count excludes evaluation
  if (metrics_) {
    metrics_->write_eval(step, name, value);
    engine_.memory().restart_window();  // the next step's peak excludes evaluation
  }
}

void TrainingReport::summary(const std::vector<std::pair<std::string, double>>& values, const std::string& text) {
  bar_.finish();
  bar_.println(text);
  if (metrics_) {
    JsonObject fields;
    for (const auto& [k, v] : values) fields.add(k, v);
    metrics_->write_summary(fields);
  }
}

void TrainingReport::finish_progress() { bar_.finish(); }

double TrainingReport::average_items_per_second() const {
  const double t = bar_.elapsed_s();
  return t > 0 ? static_cast<double>(bar_.total_items()) / t : 0;
}

double TrainingReport::elapsed_s() const { return bar_.elapsed_s(); }

}  // namespace zeroshard
