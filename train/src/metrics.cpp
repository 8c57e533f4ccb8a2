// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/train/metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "zeroshard/base/error.h"

namespace zeroshard {

MetricsWriter::MetricsWriter(const std::string& path) : path_(path) {
  ZS_REQUIRE(!path.empty(), UsageError, "MetricsWriter needs a file path");
  fd_ = ZS_CHECK_ERRNO(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644),
                       "cannot open metrics file '", path, "' for writing");
}

MetricsWriter::~MetricsWriter() {
  if (fd_ >= 0) ::close(fd_);
}

JsonObject MetricsWriter::step_object(const StepMetrics& m) {
  JsonObject o;
  o.add("step", m.step).add("loss", m.loss);
  if (m.lr) o.add("lr", *m.lr);
  if (m.tokens_per_s) o.add("tokens_per_s", *m.tokens_per_s);
  if (m.samples_per_s) o.add("samples_per_s", *m.samples_per_s);
  auto add_bytes = [&o](const char* key, const std::vector<std::pair<std::string, int64_t>>& by_category) {
    if (by_category.empty()) return;
    JsonObject mem;
    for (const auto& [category, bytes] : by_category) mem.add(category, bytes);
    o.add(key, mem);
  };
  add_bytes("mem", m.mem);
  add_bytes("mem_peak", m.mem_peak);
  if (m.comm_bytes) o.add("comm_bytes", *m.comm_bytes);
  return o.merge(m.extra);
}

void MetricsWriter::write_step(const StepMetrics& m) { write_line(step_object(m)); }

void MetricsWriter::write_eval(int64_t step, const std::string& name, double value) {
  ZS_REQUIRE(!name.empty(), UsageError, "an evaluation line needs a name (e.g. \"val_loss\")");
  write_line(JsonObject().add("eval", name).add("step", step).add("value", value));
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

void MetricsWriter::write_summary(const JsonObject& fields) {
  JsonObject o;
  o.add("summary", true);
  write_line(o.merge(fields));
}

void MetricsWriter::write_line(const JsonObject& object) {
  const std::string line = object.str() + "\n";
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
