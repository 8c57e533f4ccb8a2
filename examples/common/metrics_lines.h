#pragma once
// LOCAL STAND-IN, TO BE REPLACED: a minimal JSON-lines metrics writer for the examples'
// --metrics-out FILE, until zeroshard/core/metrics.h (MetricsWriter, written in another branch)
// is merged. Only examples/common/report.cpp uses it; when MetricsWriter lands, report.cpp calls
// it instead and this file goes away.
//
// Lines written (one JSON object each), with the keys MetricsWriter is specified to write:
//   {"step":12,"loss":2.31,"lr":0.0003,"tokens_per_s":15234.2,"mem":{"sharded params":1234,...},"comm_bytes":4096}
//   {"eval":"val_loss","step":12,"value":2.05}
//   {"summary":true,"steps":100,"final_val_loss":1.92,...}
// Non-finite numbers are written as null. Thread-safety: one thread per writer.

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace zs_examples {

class MetricsLines {
 public:
  // Opens (truncates) `path`; IoError naming it when it cannot be opened. Empty path: disabled.
  explicit MetricsLines(const std::string& path);
  ~MetricsLines();
  MetricsLines(const MetricsLines&) = delete;
  MetricsLines& operator=(const MetricsLines&) = delete;

  bool enabled() const { return file_ != nullptr; }

  // One JSON object built field by field; write() appends it as a line and flushes.
  class Line {
   public:
    Line& num(const std::string& key, double v);
    Line& integer(const std::string& key, int64_t v);
    Line& text(const std::string& key, const std::string& v);
    Line& boolean(const std::string& key, bool v);
    Line& object(const std::string& key, const std::vector<std::pair<std::string, int64_t>>& fields);
    std::string str() const { return "{" + body_ + "}"; }

   private:
    void key(const std::string& k);
    std::string body_;
  };
  void write(const Line& line);

  // JSON string literal of `s` (quotes, backslashes and control characters escaped).
  static std::string quote(const std::string& s);
  // Shortest text that reads back as `v`; "null" for inf/nan.
  static std::string number(double v);

 private:
  std::string path_;
  FILE* file_ = nullptr;
};

}  // namespace zs_examples
