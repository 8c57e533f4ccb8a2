// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/train/metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <nlohmann/json.hpp>

#include "zeroshard/base/error.h"

namespace zeroshard {
namespace {

using Json = nlohmann::ordered_json;

// Appends `fields` to `o`; a key `o` already has is a UsageError (a reader would keep one of them).
void append(Json& o, const MetricFields& fields, const char* what) {
  for (const auto& [key, value] : fields.fields()) {
    ZS_REQUIRE(!o.contains(key), UsageError, "metrics: ", what, " repeats the key '", key, "' of its line");
    std::visit([&o, &key = key](const auto& v) { o[key] = v; }, value);
  }
}

// One line of JSON; bytes that are not UTF-8 (in a name, a string value) become U+FFFD.
std::string line_of(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

}  // namespace

MetricFields& MetricFields::put(const std::string& key, Value v) {
  for (const auto& field : fields_) {
    ZS_REQUIRE(field.first != key, UsageError, "metrics: the key '", key, "' added twice to one line");
  }
  fields_.emplace_back(key, std::move(v));
  return *this;
}

MetricsWriter::MetricsWriter(const std::string& path) : path_(path) {
  ZS_REQUIRE(!path.empty(), UsageError, "MetricsWriter needs a file path");
  fd_ = ZS_CHECK_ERRNO(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644),
                       "cannot open metrics file '", path, "' for writing");
}

MetricsWriter::~MetricsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

std::string MetricsWriter::step_line(const StepMetrics& m) {
  Json o;
  o["step"] = m.step;
  o["loss"] = m.loss;
  if (m.lr) o["lr"] = *m.lr;
  if (m.tokens_per_s) o["tokens_per_s"] = *m.tokens_per_s;
  if (m.samples_per_s) o["samples_per_s"] = *m.samples_per_s;
  auto add_bytes = [&o](const char* key, const std::vector<std::pair<std::string, int64_t>>& by_category) {
    if (by_category.empty()) return;
    Json mem = Json::object();
    for (const auto& [category, bytes] : by_category) {
      ZS_REQUIRE(!mem.contains(category), UsageError, "metrics: the category '", category, "' twice in \"", key,
                 "\"");
      mem[category] = bytes;
    }
    o[key] = std::move(mem);
  };
  add_bytes("mem", m.mem);
  add_bytes("mem_peak", m.mem_peak);
  if (m.comm_bytes) o["comm_bytes"] = *m.comm_bytes;
  append(o, m.extra, "a step's extra field");
  return line_of(o);
}

void MetricsWriter::write_step(const StepMetrics& m) { write_line(step_line(m)); }

void MetricsWriter::write_eval(int64_t step, const std::string& name, double value) {
  ZS_REQUIRE(!name.empty(), UsageError, "an evaluation line needs a name (e.g. \"val_loss\")");
  Json o;
  o["eval"] = name;
  o["step"] = step;
  o["value"] = value;
  write_line(line_of(o));
}

void record_memory(StepMetrics& m, const MemoryStats& mem) {
  m.mem.clear();
  m.mem_peak.clear();
  for (int c = 0; c < static_cast<int>(MemCategory::kCount); ++c) {
    const auto category = static_cast<MemCategory>(c);
    m.mem.emplace_back(to_string(category), mem.current(category));
    m.mem_peak.emplace_back(to_string(category), mem.window_peak(category));
  }
  mem.restart_window();
}

void MetricsWriter::write_summary(const MetricFields& fields) {
  Json o;
  o["summary"] = true;
  append(o, fields, "the summary");
  write_line(line_of(o));
}

void MetricsWriter::write_line(const std::string& json) {
  const std::string line = json + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  size_t done = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ZS_CHECK_ERRNO(n, "cannot write metrics file '", path_, "' (line ", lines_ + 1, ")");
    done += static_cast<size_t>(n);
  }
  ++lines_;
}

int64_t MetricsWriter::lines_written() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lines_;
}

}  // namespace zeroshard
