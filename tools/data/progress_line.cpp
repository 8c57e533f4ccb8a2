// SPDX-License-Identifier: Apache-2.0
// zeroshard-data's progress line (progress_line.h).

#include "progress_line.h"

#include <unistd.h>

#include <chrono>
#include <cmath>

#include "zeroshard/base/format.h"

namespace zeroshard::data_tool {

ProgressLine::ProgressLine(FILE* out, int tty, double log_seconds, std::function<double()> clock)
    : out_(out), tty_(tty < 0 ? isatty(fileno(out)) != 0 : tty != 0), log_seconds_(log_seconds),
      clock_(std::move(clock)) {
  if (!clock_) {
    clock_ = [] { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); };
  }
  start_ = clock_();
}

double ProgressLine::elapsed() const { return clock_() - start_; }

std::string ProgressLine::count(double v) {
  char buf[32];
  if (v >= 1e9) std::snprintf(buf, sizeof(buf), "%.2fG", v / 1e9);
  else if (v >= 1e6) std::snprintf(buf, sizeof(buf), "%.2fM", v / 1e6);
  else if (v >= 1e3) std::snprintf(buf, sizeof(buf), "%.1fk", v / 1e3);
  else std::snprintf(buf, sizeof(buf), "%.0f", v);
  return buf;
}

std::string ProgressLine::format(const data::BuildProgress& p, double seconds, bool bar) {
  const double frac = p.bytes_total > 0 ? static_cast<double>(p.bytes_done) / static_cast<double>(p.bytes_total) : 1;
  std::string out;
  if (bar) {
    constexpr int kWidth = 20;
    const int filled = static_cast<int>(std::floor(frac * kWidth));
    out = "[" + std::string(static_cast<size_t>(filled), '#') + (filled < kWidth ? ">" : "") +
          std::string(static_cast<size_t>(std::max(0, kWidth - filled - 1)), ' ') + "] ";
  }
  char buf[224];
  const double mbps = seconds > 0 ? static_cast<double>(p.bytes_done) / 1e6 / seconds : 0;
  const double tps = seconds > 0 ? static_cast<double>(p.tokens) / seconds : 0;
  std::snprintf(buf, sizeof(buf), "%3.0f%% %s of %s | %.1f MB/s | %s tokens, %s tok/s", 100 * frac,
                format_bytes(p.bytes_done).c_str(), format_bytes(p.bytes_total).c_str(), mbps,
                count(static_cast<double>(p.tokens)).c_str(), count(tps).c_str());
  out += buf;
  if (frac > 0 && frac < 1 && seconds > 0) {
    std::snprintf(buf, sizeof(buf), " | ETA %.0fs", seconds * (1 - frac) / frac);
    out += buf;
  }
  return out;
}

void ProgressLine::update(const data::BuildProgress& p) {
  const double now = clock_();
  const bool last = p.bytes_done >= p.bytes_total;
  if (tty_) {
    if (!last && last_ >= 0 && now - last_ < 0.1) return;
    std::fprintf(out_, "\r%s\x1b[K", format(p, now - start_, true).c_str());
    open_ = true;
  } else {
    if (!last && (last_ >= 0 ? now - last_ : now - start_) < log_seconds_) return;
    std::fprintf(out_, "%s\n", format(p, now - start_, false).c_str());
  }
  last_ = now;
  std::fflush(out_);
}

void ProgressLine::finish() {
  if (open_) std::fputc('\n', out_);
  open_ = false;
  std::fflush(out_);
}

}  // namespace zeroshard::data_tool
