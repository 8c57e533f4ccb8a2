// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/base/logging.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

#include "zeroshard/base/error.h"

namespace zeroshard {
namespace {

std::mutex& settings_mutex() {
  static std::mutex m;
  return m;
}
LogSettings& settings_storage() {
  static LogSettings s = apply_log_env(LogSettings{});
  return s;
}
// Cached effective threshold for this process (depends on rank); recomputed on every change.
std::atomic<int> g_threshold{static_cast<int>(LogLevel::kInfo)};
std::atomic<int> g_identity_rank_seen{-2};

int compute_threshold(const LogSettings& s) {
  int rank = detail::process_rank();
  bool listed = s.all_ranks || rank < 0 ||  // before init every process speaks
                std::find(s.ranks.begin(), s.ranks.end(), rank) != s.ranks.end();
  if (s.level == LogLevel::kOff) return static_cast<int>(LogLevel::kOff);
  if (listed) return static_cast<int>(s.level);
  // Unlisted ranks still print warnings and errors (if the level lets them through at all).
  return std::max(static_cast<int>(s.level), static_cast<int>(LogLevel::kWarn));
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

const char kLevelLetters[] = {'T', 'D', 'I', 'W', 'E', 'O'};

}  // namespace

const char* to_string(LogLevel level) {
  static const char* names[] = {"trace", "debug", "info", "warn", "error", "off"};
  return names[static_cast<int>(level)];
}

LogLevel parse_log_level(const std::string& text, const std::string& where) {
  std::string t = lower(text);
  for (int i = 0; i <= static_cast<int>(LogLevel::kOff); ++i) {
    if (t == to_string(static_cast<LogLevel>(i))) return static_cast<LogLevel>(i);
  }
  if (t == "warning") return LogLevel::kWarn;
  ZS_THROW(ConfigError, where, ": unknown log level '", text,
           "'; allowed: trace, debug, info, warn, error, off");
}

LogSettings parse_log_ranks(const std::string& text, LogSettings base, const std::string& where) {
  std::string t = lower(text);
  if (t == "all" || t == "*") {
    base.all_ranks = true;
    return base;
  }
  base.all_ranks = false;
  base.ranks.clear();
  size_t pos = 0;
  while (pos <= t.size()) {
    size_t comma = t.find(',', pos);
    std::string item = t.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    long r = std::strtol(item.c_str(), &end, 10);
    ZS_REQUIRE(!item.empty() && end && *end == '\0' && r >= 0, ConfigError, where,
               ": bad rank list '", text, "'; allowed: 'all' or comma-separated ranks like '0,3'");
    base.ranks.push_back(static_cast<int>(r));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return base;
}

LogSettings apply_log_env(LogSettings s) {
  if (const char* lvl = std::getenv("ZS_LOG_LEVEL"); lvl && *lvl) {
    s.level = parse_log_level(lvl, "environment variable ZS_LOG_LEVEL");
  }
  if (const char* r = std::getenv("ZS_LOG_RANKS"); r && *r) {
    s = parse_log_ranks(r, s, "environment variable ZS_LOG_RANKS");
  }
  return s;
}

void set_log_settings(const LogSettings& settings) {
  std::lock_guard<std::mutex> lock(settings_mutex());
  settings_storage() = settings;
  g_threshold = compute_threshold(settings);
  g_identity_rank_seen = detail::process_rank();
}

LogSettings log_settings() {
  std::lock_guard<std::mutex> lock(settings_mutex());
  return settings_storage();
}

bool log_enabled(LogLevel level) noexcept {
  // The threshold depends on the rank, which becomes known after MPI init: refresh once it changes.
  if (g_identity_rank_seen.load(std::memory_order_relaxed) != detail::process_rank()) {
    std::lock_guard<std::mutex> lock(settings_mutex());
    g_threshold = compute_threshold(settings_storage());
    g_identity_rank_seen = detail::process_rank();
  }
  return static_cast<int>(level) >= g_threshold.load(std::memory_order_relaxed) &&
         level != LogLevel::kOff;
}

namespace detail {

LogLine::LogLine(LogLevel level, const char* file, int line) : level_(level), file_(file), line_(line) {}

LogLine::~LogLine() {
  using clock = std::chrono::system_clock;
  auto now = clock::now();
  std::time_t t = clock::to_time_t(now);
  int ms = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char stamp[32];
  std::snprintf(stamp, sizeof(stamp), "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  std::ostringstream out;
  out << "[zs " << stamp << " r";
  int rank = process_rank();
  if (rank >= 0) {
    out << rank << "/" << process_world_size();
  } else {
    out << "?";
  }
  out << " " << kLevelLetters[static_cast<int>(level_)];
  if (level_ <= LogLevel::kDebug) out << " " << file_ << ":" << line_;
  out << "] " << os_.str() << "\n";
  std::string s = out.str();
  static std::mutex write_mutex;
  std::lock_guard<std::mutex> lock(write_mutex);
  FILE* f = level_ >= LogLevel::kWarn ? stderr : stdout;
  std::fwrite(s.data(), 1, s.size(), f);
  std::fflush(f);
}

}  // namespace detail
}  // namespace zeroshard
