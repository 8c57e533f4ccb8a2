// SPDX-License-Identifier: Apache-2.0
// Reading a metrics JSON-lines file (zeroshard/train/metrics.h) into columns, and the charts of a run.
// The line kinds and what each chart shows: plot.h and docs/tools.md.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "plot.h"
#include "zeroshard/base/error.h"
#include "zeroshard/base/format.h"

namespace zeroshard::plot {
namespace {

using Json = nlohmann::ordered_json;  // members in file order: categories keep the writer's order

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The member `key` of the object `line`, or nullptr.
const Json* find(const Json& line, const char* key) {
  const auto it = line.find(key);
  return it == line.end() ? nullptr : &*it;
}

// A number, null (a non-finite value the writer could not spell), or absent (NaN both).
double number_or_nan(const Json& line, const char* key, const std::string& where) {
  const Json* v = find(line, key);
  if (v == nullptr || v->is_null()) return kNaN;
  ZS_REQUIRE(v->is_number(), Error, where, ": \"", key, "\" is a ", v->type_name(), "; expected a number");
  return v->get<double>();
}

// One step line's "mem" or "mem_peak" object into `columns` (category -> bytes per step).
void add_memory(MetricsLog& log, std::map<std::string, std::vector<double>>& columns, const char* key,
                const Json& mem, const std::string& where) {
  ZS_REQUIRE(mem.is_object(), Error, where, ": \"", key, "\" is a ", mem.type_name(),
             "; expected an object of category -> bytes");
  const size_t row = log.step.size() - 1;
  for (const auto& [category, bytes] : mem.items()) {
    ZS_REQUIRE(bytes.is_number() || bytes.is_null(), Error, where, ": \"", key, "\".\"", category, "\" is a ",
               bytes.type_name(), "; expected a number of bytes");
    if (std::find(log.mem_categories.begin(), log.mem_categories.end(), category) == log.mem_categories.end()) {
      log.mem_categories.push_back(category);
    }
    std::vector<double>& column = columns[category];
    column.resize(row, kNaN);
    column.push_back(bytes.is_null() ? kNaN : bytes.get<double>());
  }
}

// A finite number under `key`, or the error naming the line kind.
double required_number(const Json& line, const char* key, const char* kind, const std::string& where) {
  const Json* v = find(line, key);
  ZS_REQUIRE(v != nullptr, Error, where, ": no \"", key, "\" key in ", kind);
  ZS_REQUIRE(v->is_number() && std::isfinite(v->get<double>()), Error, where, ": \"", key, "\" is a ",
             v->type_name(), "; expected a number");
  return v->get<double>();
}

void add_step(MetricsLog& log, const Json& v, const std::string& where, int& last_step_line, int number) {
  const char* kind = "a step line (a step line has \"step\" and \"loss\"; the last line may be {\"summary\": true, ...})";
  const double step = required_number(v, "step", kind, where);
  ZS_REQUIRE(log.step.empty() || step > log.step.back(), Error, where, ": step ", step, " does not follow step ",
             log.step.empty() ? 0 : log.step.back(), " (line ", last_step_line, "); steps must increase");
  const bool tokens = v.contains("tokens_per_s"), samples = v.contains("samples_per_s");
  ZS_REQUIRE(!(tokens && samples), Error, where, ": both \"tokens_per_s\" and \"samples_per_s\"; log one");
  if (tokens || samples) {
    const std::string key = tokens ? "tokens_per_s" : "samples_per_s";
    ZS_REQUIRE(log.throughput_key.empty() || log.throughput_key == key, Error, where, ": \"", key,
               "\" but earlier lines have \"", log.throughput_key, "\"; a run logs one of them");
    log.throughput_key = key;
  }
  log.step.push_back(step);
  log.loss.push_back(number_or_nan(v, "loss", where));
  log.lr.push_back(number_or_nan(v, "lr", where));
  log.throughput.push_back(log.throughput_key.empty() ? kNaN : number_or_nan(v, log.throughput_key.c_str(), where));
  log.comm_bytes.push_back(number_or_nan(v, "comm_bytes", where));
  if (const Json* mem = find(v, "mem")) add_memory(log, log.mem, "mem", *mem, where);
  if (const Json* peak = find(v, "mem_peak")) add_memory(log, log.mem_peak, "mem_peak", *peak, where);
  last_step_line = number;
}

void add_eval(MetricsLog& log, const Json& v, const std::string& where) {
  const char* kind = "an evaluation line ({\"eval\": NAME, \"step\": S, \"value\": V})";
  const Json& eval = v.at("eval");
  ZS_REQUIRE(eval.is_string() && !eval.get_ref<const std::string&>().empty(), Error, where, ": \"eval\" is a ",
             eval.type_name(), "; expected the evaluation's name");
  const std::string& name = eval.get_ref<const std::string&>();
  const double step = required_number(v, "step", kind, where);
  ZS_REQUIRE(v.contains("value"), Error, where, ": no \"value\" key in ", kind);
  const double value = number_or_nan(v, "value", where);
  auto it = std::find_if(log.evals.begin(), log.evals.end(), [&](const EvalSeries& e) { return e.name == name; });
  if (it == log.evals.end()) it = log.evals.insert(log.evals.end(), EvalSeries{name, {}, {}});
  ZS_REQUIRE(it->step.empty() || step > it->step.back(), Error, where, ": evaluation \"", name, "\" at step ",
             step, " does not follow its step ", it->step.empty() ? 0 : it->step.back(), "; steps must increase");
  it->step.push_back(step);
  it->value.push_back(value);
}

// A line of a kind this reader does not know: counted; the first few named in a note.
void skip_unknown(MetricsLog& log, const Json& v, const std::string& where) {
  constexpr size_t kMaxNotes = 3;
  ++log.skipped_lines;
  if (log.notes.size() >= kMaxNotes) return;
  std::string keys;
  for (const auto& [key, value] : v.items()) keys += (keys.empty() ? "" : ", ") + key;
  log.notes.push_back(where + ": skipped a line of a kind this zeroshard-plot does not know (keys: " +
                      (keys.empty() ? "none" : keys) + "); it reads step, eval and summary lines");
}

// One line as JSON; a malformed line is an Error "WHERE: column C: what was wrong".
Json parse_line(const std::string& line, const std::string& where) {
  try {
    return Json::parse(line);
  } catch (const Json::parse_error& e) {
    ZS_THROW(Error, where, ": column ", e.byte, ": ", json_error_reason(e.what()));
  } catch (const Json::exception& e) {  // a number out of range ("1e999")
    ZS_THROW(Error, where, ": ", json_error_reason(e.what()));
  }
}

}  // namespace

MetricsLog parse_metrics(const std::string& text, const std::string& path) {
  MetricsLog log;
  log.path = path;
  std::istringstream in(text);
  std::string line;
  int summary_line = 0, last_step_line = 0;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(number);
    const Json v = parse_line(line, where);
    ZS_REQUIRE(v.is_object(), Error, where, ": a metrics line is a JSON object, this is a ", v.type_name());
    ZS_REQUIRE(summary_line == 0, Error, where, ": a line after the summary line (line ", summary_line,
               "); the summary is the last line of a run");
    if (const Json* s = find(v, "summary"); s != nullptr && s->is_boolean() && s->get<bool>()) {
      summary_line = number;
      log.has_summary = true;
    } else if (v.contains("eval")) {
      add_eval(log, v, where);
    } else if (v.contains("loss")) {
      add_step(log, v, where, last_step_line, number);
    } else {
      skip_unknown(log, v, where);
    }
  }
  ZS_REQUIRE(!log.step.empty(), Error, path, ": no step lines (lines like {\"step\": 1, \"loss\": 2.3, ...})");
  for (auto* columns : {&log.mem, &log.mem_peak}) {
    for (auto& [category, values] : *columns) values.resize(log.step.size(), kNaN);
  }
  return log;
}

MetricsLog read_metrics(const std::string& path) {
  const int fd = ZS_CHECK_ERRNO(::open(path.c_str(), O_RDONLY | O_CLOEXEC), "cannot read metrics file '", path, "'");
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    ZS_THROW(IoError, "metrics file '", path, "' is a directory");
  }
  std::string text;
  char buf[65536];
  ssize_t n = 0;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) text.append(buf, static_cast<size_t>(n));
  const int err = errno;
  ::close(fd);
  ZS_REQUIRE(n == 0, IoError, "error while reading metrics file '", path, "': ", detail::errno_string(err));
  return parse_metrics(text, path);
}

namespace {

bool any_finite(const std::vector<double>& v) {
  return std::any_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
}

double max_finite(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) {
    if (std::isfinite(x)) m = std::max(m, x);
  }
  return m;
}

// Bytes as MiB or GiB, whichever reads better for the largest value.
std::pair<double, std::string> byte_unit(double max_bytes) {
  if (max_bytes >= 10.0 * (1 << 30)) return {1.0 / (1 << 30), "GiB"};
  return {1.0 / (1 << 20), "MiB"};
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Training loss and the evaluations: losses share its axis, other results (accuracy) get the
// right-hand one.
Chart loss_chart(const MetricsLog& log) {
  Chart c;
  c.title = "loss";
  c.y_label = "loss";
  c.series.push_back({"train loss", log.step, log.loss});
  std::string right_names;
  for (const EvalSeries& e : log.evals) {
    if (!any_finite(e.value)) continue;
    const bool right = !ends_with(e.name, "loss");
    c.series.push_back({e.name, e.step, e.value, right, /*markers=*/true});
    if (right) right_names += (right_names.empty() ? "" : ", ") + e.name;
  }
  c.y2_label = right_names;
  if (!log.evals.empty()) c.title = "loss and evaluation";
  return c;
}

// Memory by category, stacked (categories of equal size would hide each other as lines): each
// step's peak when logged ("mem_peak"; the top of the stack is then the sum of the categories'
// peaks, at least the step's peak), else the bytes after each step. Categories that are zero (or
// absent) throughout are left out.
Chart memory_chart(const MetricsLog& log) {
  const bool peaks = !log.mem_peak.empty();
  const auto& columns = peaks ? log.mem_peak : log.mem;
  std::vector<double> sum(log.steps(), 0.0);
  for (const auto& [category, v] : columns) {
    for (size_t i = 0; i < v.size() && i < sum.size(); ++i) sum[i] += std::isfinite(v[i]) ? v[i] : 0;
  }
  const auto [factor, unit] = byte_unit(max_finite(sum));
  Chart c;
  c.title = peaks ? "peak memory per step" : "memory after each step";
  c.y_label = unit;
  c.y_from_zero = true;
  c.stacked = true;
  for (const std::string& category : log.mem_categories) {
    auto it = columns.find(category);
    if (it == columns.end() || max_finite(it->second) <= 0) continue;
    std::vector<double> y = it->second;
    for (double& x : y) x *= factor;
    c.series.push_back({category, log.step, y});
  }
  if (c.series.empty()) c.series.push_back({"all categories", log.step, std::vector<double>(log.steps(), 0.0)});
  return c;
}

}  // namespace

std::vector<PlotFile> plot_metrics(const MetricsLog& log, const std::string& out_dir, const std::string& prefix,
                                   int width, int height) {
  std::vector<PlotFile> written;
  auto emit = [&](const std::string& name, Chart chart) {
    chart.width = width;
    chart.height = height;
    chart.x_label = "step";
    chart.x_integer = true;
    PlotFile file{(out_dir.empty() ? std::string(".") : out_dir) + "/" + prefix + "_" + name + ".png", {}, {}};
    write_png(render(chart, &file.layout), file.path);
    for (const Series& s : chart.series) {
      size_t points = 0;
      for (double y : s.y) points += std::isfinite(y) ? 1 : 0;
      file.series.push_back(s.name + ": " + std::to_string(points) + " points" + (s.right_axis ? ", right axis" : ""));
    }
    written.push_back(std::move(file));
  };
  auto single = [&](const std::string& title, const std::string& y_label, const std::string& name,
                    const std::vector<double>& y, bool zero) {
    Chart c;
    c.title = title;
    c.y_label = y_label;
    c.y_from_zero = zero;
    c.series.push_back({name, log.step, y});
    return c;
  };
  ZS_REQUIRE(any_finite(log.loss), Error, log.path, ": every \"loss\" is null (non-finite); nothing to plot");
  emit("loss", loss_chart(log));
  if (any_finite(log.lr)) emit("lr", single("learning rate", "learning rate", "lr", log.lr, true));
  if (any_finite(log.throughput)) {
    const bool tokens = log.throughput_key == "tokens_per_s";
    emit("throughput", single("throughput", tokens ? "tokens/s" : "samples/s", log.throughput_key, log.throughput,
                              true));
  }
  if (!log.mem_categories.empty()) emit("memory", memory_chart(log));
  if (any_finite(log.comm_bytes)) {
    const auto [factor, unit] = byte_unit(max_finite(log.comm_bytes));
    std::vector<double> y = log.comm_bytes;
    for (double& x : y) x *= factor;
    emit("comm", single("communication per step", unit + " per step", "comm_bytes", y, true));
  }
  return written;
}

}  // namespace zeroshard::plot
