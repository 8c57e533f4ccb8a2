#include "report.h"

#include <c10/core/ScalarType.h>

#include "metrics_lines.h"  // LOCAL STAND-IN for zeroshard/core/metrics.h (MetricsWriter)
#include "zeroshard/sharding/memory.h"

namespace zs = zeroshard;

namespace zs_examples {
namespace {

zs::ProgressOptions progress_options(const zs::Session& s, const ReportOptions& o) {
  zs::ProgressOptions p;
  p.total_steps = o.total_steps;
  p.items_name = o.items_name;
  p.log_every = o.log_interval;
  p.enabled = s.rank() == 0;
  using L = zs::config::LoggingConfig;
  const L::Progress mode = s.config().logging().progress();
  p.tty = mode == L::BAR ? 1 : (mode == L::LINES ? 0 : -1);
  return p;
}

}  // namespace

int64_t comm_bytes(const zs::ShardingEngine& engine, c10::ScalarType reduce_dtype) {
  const zs::CommCounters& c = engine.comm_counters();
  return c.all_gather_elements * static_cast<int64_t>(c10::elementSize(engine.compute_dtype())) +
         c.reduce_elements * static_cast<int64_t>(c10::elementSize(reduce_dtype));
}

TrainingReport::TrainingReport(zs::Session& session, const zs::ShardingEngine& engine, ReportOptions options)
    : session_(session),
      engine_(engine),
      options_(std::move(options)),
      bar_(progress_options(session, options_)),
      metrics_(std::make_unique<MetricsLines>(session.rank() == 0 ? options_.metrics_path : std::string())) {
  last_comm_bytes_ = comm_bytes(engine_, options_.reduce_dtype);
}

TrainingReport::~TrainingReport() = default;

void TrainingReport::step(int64_t step, double loss, double lr, int64_t items, double seconds) {
  const zs::MemoryStats& mem = engine_.memory();
  bar_.update({step, loss, lr, items, mem.total_current(), seconds});
  const int64_t comm = comm_bytes(engine_, options_.reduce_dtype);
  if (metrics_->enabled()) {
    std::vector<std::pair<std::string, int64_t>> categories;
    for (int c = 0; c < static_cast<int>(zs::MemCategory::kCount); ++c) {
      const auto cat = static_cast<zs::MemCategory>(c);
      categories.emplace_back(zs::to_string(cat), mem.current(cat));
    }
    MetricsLines::Line line;
    line.integer("step", step).num("loss", loss).num("lr", lr);
    line.num(options_.items_name == "tok" ? "tokens_per_s" : "samples_per_s", bar_.items_per_second());
    line.object("mem", categories).integer("comm_bytes", comm - last_comm_bytes_);
    metrics_->write(line);
  }
  last_comm_bytes_ = comm;
}

void TrainingReport::note(const std::string& line) { bar_.println(line); }

void TrainingReport::eval(int64_t step, const std::string& name, double value, const std::string& text) {
  bar_.println(text);
  last_comm_bytes_ = comm_bytes(engine_, options_.reduce_dtype);  // the next step's count excludes evaluation
  if (metrics_->enabled()) {
    MetricsLines::Line line;
    line.text("eval", name).integer("step", step).num("value", value);
    metrics_->write(line);
  }
}

void TrainingReport::summary(const std::vector<std::pair<std::string, double>>& values, const std::string& text) {
  bar_.finish();
  bar_.println(text);
  if (metrics_->enabled()) {
    MetricsLines::Line line;
    line.boolean("summary", true);
    for (const auto& [k, v] : values) line.num(k, v);
    metrics_->write(line);
  }
}

void TrainingReport::finish_progress() { bar_.finish(); }

double TrainingReport::average_items_per_second() const {
  const double t = bar_.elapsed_s();
  return t > 0 ? static_cast<double>(bar_.total_items()) / t : 0;
}

double TrainingReport::elapsed_s() const { return bar_.elapsed_s(); }

}  // namespace zs_examples
