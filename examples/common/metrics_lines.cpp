// LOCAL STAND-IN, TO BE REPLACED by zeroshard/core/metrics.h's MetricsWriter (see the header).
#include "metrics_lines.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "zeroshard/core/error.h"

namespace zs_examples {

MetricsLines::MetricsLines(const std::string& path) : path_(path) {
  if (path.empty()) return;
  file_ = std::fopen(path.c_str(), "w");
  if (file_ == nullptr) {
    ZS_THROW(zeroshard::IoError, "cannot open --metrics-out file '", path,
             "': ", zeroshard::detail::errno_string(errno));
  }
}

MetricsLines::~MetricsLines() {
  if (file_ != nullptr) std::fclose(file_);
}

void MetricsLines::write(const Line& line) {
  if (file_ == nullptr) return;
  const std::string s = line.str() + "\n";
  if (std::fwrite(s.data(), 1, s.size(), file_) != s.size() || std::fflush(file_) != 0) {
    ZS_THROW(zeroshard::IoError, "cannot write --metrics-out file '", path_,
             "': ", zeroshard::detail::errno_string(errno));
  }
}

std::string MetricsLines::quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string MetricsLines::number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

void MetricsLines::Line::key(const std::string& k) {
  if (!body_.empty()) body_ += ",";
  body_ += quote(k) + ":";
}

MetricsLines::Line& MetricsLines::Line::num(const std::string& k, double v) {
  key(k);
  body_ += number(v);
  return *this;
}

MetricsLines::Line& MetricsLines::Line::integer(const std::string& k, int64_t v) {
  key(k);
  body_ += std::to_string(v);
  return *this;
}

MetricsLines::Line& MetricsLines::Line::text(const std::string& k, const std::string& v) {
  key(k);
  body_ += quote(v);
  return *this;
}

MetricsLines::Line& MetricsLines::Line::boolean(const std::string& k, bool v) {
  key(k);
  body_ += v ? "true" : "false";
  return *this;
}

MetricsLines::Line& MetricsLines::Line::object(const std::string& k,
                                               const std::vector<std::pair<std::string, int64_t>>& fields) {
  key(k);
  body_ += "{";
  for (size_t i = 0; i < fields.size(); ++i) {
    body_ += (i ? "," : "") + quote(fields[i].first) + ":" + std::to_string(fields[i].second);
  }
  body_ += "}";
  return *this;
}

}  // namespace zs_examples
