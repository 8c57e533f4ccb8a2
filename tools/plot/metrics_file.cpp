// Reading a metrics JSON-lines file (zeroshard/train/metrics.h) into columns, and the charts of a run.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <limits>
#include <sstream>

#include "plot.h"
#include "zeroshard/base/error.h"
#include "zeroshard/base/json.h"

namespace zeroshard::plot {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A number, null (a non-finite value the writer could not spell), or absent (NaN both).
double number_or_nan(const JsonValue& line, const char* key, const std::string& where) {
  const JsonValue* v = line.find(key);
  if (v == nullptr || v->is_null()) return kNaN;
  ZS_REQUIRE(v->is_number(), Error, where, ": \"", key, "\" is a ", JsonValue::type_name(v->type),
             "; expected a number");
  return v->number;
}

void add_memory(MetricsLog& log, const JsonValue& mem, const std::string& where) {
  ZS_REQUIRE(mem.is_object(), Error, where, ": \"mem\" is a ", JsonValue::type_name(mem.type),
             "; expected an object of category -> bytes");
  const size_t row = log.step.size() - 1;
  for (const auto& [category, bytes] : mem.members) {
    ZS_REQUIRE(bytes.is_number() || bytes.is_null(), Error, where, ": \"mem\".\"", category, "\" is a ",
               JsonValue::type_name(bytes.type), "; expected a number of bytes");
    auto it = log.mem.find(category);
    if (it == log.mem.end()) {
      log.mem_categories.push_back(category);
      it = log.mem.emplace(category, std::vector<double>(row, kNaN)).first;
    }
    it->second.resize(row, kNaN);
    it->second.push_back(bytes.is_null() ? kNaN : bytes.number);
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
    const JsonValue v = parse_json(line, where);
    ZS_REQUIRE(v.is_object(), Error, where, ": a metrics line is a JSON object, this is a ",
               JsonValue::type_name(v.type));
    ZS_REQUIRE(summary_line == 0, Error, where, ": a line after the summary line (line ", summary_line,
               "); the summary is the last line of a run");
    if (const JsonValue* s = v.find("summary"); s != nullptr && s->type == JsonValue::Type::kBool && s->boolean) {
      summary_line = number;
      log.has_summary = true;
      continue;
    }
    const JsonValue* step = v.find("step");
    ZS_REQUIRE(step != nullptr, Error, where, ": no \"step\" key; a step line has \"step\" and \"loss\" (the last "
               "line may be {\"summary\": true, ...})");
    ZS_REQUIRE(step->is_number() && std::isfinite(step->number), Error, where, ": \"step\" is a ",
               JsonValue::type_name(step->type), "; expected a number");
    ZS_REQUIRE(v.find("loss") != nullptr, Error, where, ": no \"loss\" key in a step line");
    ZS_REQUIRE(log.step.empty() || step->number > log.step.back(), Error, where, ": step ", step->number,
               " does not follow step ", log.step.empty() ? 0 : log.step.back(), " (line ", last_step_line,
               "); steps must increase");
    const bool tokens = v.find("tokens_per_s") != nullptr, samples = v.find("samples_per_s") != nullptr;
    ZS_REQUIRE(!(tokens && samples), Error, where, ": both \"tokens_per_s\" and \"samples_per_s\"; log one");
    if (tokens || samples) {
      const std::string key = tokens ? "tokens_per_s" : "samples_per_s";
      ZS_REQUIRE(log.throughput_key.empty() || log.throughput_key == key, Error, where, ": \"", key,
                 "\" but earlier lines have \"", log.throughput_key, "\"; a run logs one of them");
      log.throughput_key = key;
    }
    log.step.push_back(step->number);
    log.loss.push_back(number_or_nan(v, "loss", where));
    log.lr.push_back(number_or_nan(v, "lr", where));
    log.throughput.push_back(log.throughput_key.empty() ? kNaN : number_or_nan(v, log.throughput_key.c_str(), where));
    log.comm_bytes.push_back(number_or_nan(v, "comm_bytes", where));
    if (const JsonValue* mem = v.find("mem")) add_memory(log, *mem, where);
    last_step_line = number;
  }
  ZS_REQUIRE(!log.step.empty(), Error, path, ": no step lines (lines like {\"step\": 1, \"loss\": 2.3, ...})");
  for (auto& [category, values] : log.mem) values.resize(log.step.size(), kNaN);
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
  for (double x : v) {
    if (std::isfinite(x)) return true;
  }
  return false;
}

// Bytes as MiB or GiB, whichever reads better for the largest value.
std::pair<double, std::string> byte_unit(double max_bytes) {
  if (max_bytes >= 10.0 * (1 << 30)) return {1.0 / (1 << 30), "GiB"};
  return {1.0 / (1 << 20), "MiB"};
}

}  // namespace

std::vector<std::string> plot_metrics(const MetricsLog& log, const std::string& out_dir, const std::string& prefix,
                                      int width, int height) {
  std::vector<std::string> written;
  auto emit = [&](const std::string& name, Chart chart) {
    chart.width = width;
    chart.height = height;
    chart.x_label = "step";
    const std::string path = (out_dir.empty() ? std::string(".") : out_dir) + "/" + prefix + "_" + name + ".png";
    write_png(render(chart), path);
    written.push_back(path);
  };
  auto single = [&](const std::string& title, const std::string& y_label, const std::vector<double>& y, bool zero) {
    Chart c;
    c.title = title;
    c.y_label = y_label;
    c.y_from_zero = zero;
    c.series.push_back({title, log.step, y});
    return c;
  };
  ZS_REQUIRE(any_finite(log.loss), Error, log.path, ": every \"loss\" is null (non-finite); nothing to plot");
  emit("loss", single("loss", "loss", log.loss, false));
  if (any_finite(log.lr)) emit("lr", single("learning rate", "lr", log.lr, true));
  if (any_finite(log.throughput)) {
    const bool tokens = log.throughput_key == "tokens_per_s";
    emit("throughput", single(tokens ? "throughput (tokens/s)" : "throughput (samples/s)",
                              tokens ? "tokens/s" : "samples/s", log.throughput, true));
  }
  double max_mem = 0;
  for (const auto& [category, v] : log.mem) {
    for (double x : v) {
      if (std::isfinite(x)) max_mem = std::max(max_mem, x);
    }
  }
  if (!log.mem_categories.empty()) {
    const auto [factor, unit] = byte_unit(max_mem);
    Chart c;
    c.title = "memory by category";
    c.y_label = unit;
    c.y_from_zero = true;
    for (const std::string& category : log.mem_categories) {
      std::vector<double> y = log.mem.at(category);
      for (double& x : y) x *= factor;
      c.series.push_back({category, log.step, y});
    }
    emit("memory", c);
  }
  if (any_finite(log.comm_bytes)) {
    double max_comm = 0;
    for (double x : log.comm_bytes) {
      if (std::isfinite(x)) max_comm = std::max(max_comm, x);
    }
    const auto [factor, unit] = byte_unit(max_comm);
    std::vector<double> y = log.comm_bytes;
    for (double& x : y) x *= factor;
    emit("comm", single("communication per step", unit, y, true));
  }
  return written;
}

}  // namespace zeroshard::plot
