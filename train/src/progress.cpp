// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/train/progress.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "zeroshard/base/error.h"

namespace zeroshard {
namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

}  // namespace

ProgressBar::ProgressBar(ProgressOptions options) : options_(std::move(options)) {
  ZS_REQUIRE(options_.log_every >= 1, UsageError, "ProgressBar: log_every = ", options_.log_every, " must be >= 1");
  ZS_REQUIRE(options_.window >= 1, UsageError, "ProgressBar: window = ", options_.window, " must be >= 1");
  ZS_REQUIRE(options_.total_steps >= 0, UsageError, "ProgressBar: total_steps = ", options_.total_steps,
             " must be >= 0");
  if (!options_.clock) options_.clock = steady_seconds;
  if (options_.out == nullptr) options_.enabled = false;
  tty_ = options_.tty >= 0 ? options_.tty == 1 : auto_tty(options_.out);
  start_ = options_.clock();
  last_update_ = start_;
  window_.push_back({0, 0, 0});
}

ProgressBar::~ProgressBar() { finish(); }

double ProgressBar::elapsed_s() const { return options_.clock() - start_; }

double ProgressBar::items_per_second() const {
  if (window_.size() < 2) return 0;
  const double dt = window_.back().busy - window_.front().busy;
  return dt > 0 ? static_cast<double>(window_.back().items - window_.front().items) / dt : 0;
}

std::string ProgressBar::format_duration(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return "?";
  const auto s = static_cast<int64_t>(std::llround(seconds));
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof(buf), "%llds", static_cast<long long>(s));
  } else if (s < 3600) {
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>((s % 3600) / 60));
  }
  return buf;
}

std::string ProgressBar::format_count(double v) {
  const char* suffix[] = {"", "k", "M", "G", "T"};
  int i = 0;
  while (std::fabs(v) >= 999.5 && i < 4) v /= 1000, ++i;
  if (i == 0) return fixed(v, v == std::floor(v) ? 0 : 1);
  return fixed(v, std::fabs(v) < 10 ? 2 : (std::fabs(v) < 100 ? 1 : 0)) + suffix[i];
}

std::string ProgressBar::format_bytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (b >= 1024.0 * 1024 * 1024) return fixed(b / (1024.0 * 1024 * 1024), 2) + " GiB";
  if (b >= 1024.0 * 1024) return fixed(b / (1024.0 * 1024), 1) + " MiB";
  if (b >= 1024.0) return fixed(b / 1024.0, 1) + " KiB";
  return std::to_string(bytes) + " B";
}

bool ProgressBar::auto_tty(FILE* out) {
  return out != nullptr && isatty(fileno(out)) == 1 && std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr;
}

int64_t ProgressBar::resident_bytes() {
  std::ifstream in("/proc/self/statm");
  long long size = 0, resident = 0;
  if (!(in >> size >> resident)) return -1;
  const long page = sysconf(_SC_PAGESIZE);
  return page > 0 ? static_cast<int64_t>(resident) * page : -1;
}

std::string ProgressBar::format(const ProgressUpdate& u) const {
  std::ostringstream os;
  const int64_t total = options_.total_steps;
  os << "step " << u.step;
  if (total > 0) {
    os << "/" << total;
    const double frac = std::min(1.0, static_cast<double>(u.step) / static_cast<double>(total));
    if (tty_) {
      const int filled = static_cast<int>(frac * options_.bar_width);
      os << " [" << std::string(static_cast<size_t>(filled), '#')
         << (filled < options_.bar_width ? ">" : "")
         << std::string(static_cast<size_t>(std::max(0, options_.bar_width - filled - 1)), ' ') << "]";
    }
    char pct[16];
    std::snprintf(pct, sizeof(pct), " %3d%%", static_cast<int>(frac * 100));
    os << pct;
  }
  os << " loss " << fixed(u.loss, 4);
  if (u.lr >= 0) {
    char lr[32];
    std::snprintf(lr, sizeof(lr), "%.2e", u.lr);
    os << " lr " << lr;
  }
  const double rate = items_per_second();
  if (rate > 0) os << " | " << format_count(rate) << " " << options_.items_name << "/s";
  if (total > 0 && window_.size() >= 2) {
    const double dt = window_.back().busy - window_.front().busy;
    const int64_t steps = window_.back().step - window_.front().step;
    if (steps > 0 && u.step < total) os << " | ETA " << format_duration(dt / steps * (total - u.step));
  }
  os << " | elapsed " << format_duration(elapsed_s());
  const int64_t rss = resident_bytes();
  if (u.memory_bytes >= 0 || rss >= 0) os << " |";
  if (u.memory_bytes >= 0) os << " mem " << format_bytes(u.memory_bytes);
  if (rss >= 0) os << " rss " << format_bytes(rss);
  return os.str();
}

void ProgressBar::write(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), options_.out);
  std::fflush(options_.out);
}

void ProgressBar::update(const ProgressUpdate& u) {
  total_items_ += u.items;
  const double now = options_.clock();
  busy_ += u.seconds >= 0 ? u.seconds : now - last_update_;
  last_update_ = now;
  window_.push_back({busy_, total_items_, u.step});
  while (static_cast<int>(window_.size()) > options_.window + 1) window_.pop_front();
  last_step_ = u.step;
  if (!options_.enabled) return;
  const std::string line = format(u);
  if (tty_) {
    write("\r" + line + "\x1b[K");  // erase what a longer previous line left
    last_line_ = line;
    open_line_ = true;
  } else if (u.step % options_.log_every == 0 || u.step == options_.total_steps || u.step == 1) {
    write(line + "\n");
  }
}

void ProgressBar::println(const std::string& line) {
  if (!options_.enabled) return;
  if (tty_ && open_line_) {
    write("\r\x1b[K" + line + "\n" + last_line_);
  } else {
    write(line + "\n");
  }
}

void ProgressBar::finish() {
  if (options_.enabled && tty_ && open_line_) write("\n");
  open_line_ = false;
}

}  // namespace zeroshard
