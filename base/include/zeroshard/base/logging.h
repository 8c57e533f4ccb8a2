// SPDX-License-Identifier: Apache-2.0
#pragma once
// Rank-prefixed logging. Lines look like
//   [zs 14:03:07.412 r1/4 I] message
// By default rank 0 prints INFO and below-severity lines; WARN and ERROR print on every rank, since
// they are rare and usually rank-specific. Thread-safe: a line is written with one fwrite under a
// mutex. Level and rank filter come from the config's `logging` section, overridden by the
// environment variables ZS_LOG_LEVEL (trace|debug|info|warn|error|off) and ZS_LOG_RANKS
// ("0", "all", or a comma list such as "0,3").

#include <sstream>
#include <string>
#include <vector>

namespace zeroshard {

enum class LogLevel { kTrace = 0, kDebug = 1, kInfo = 2, kWarn = 3, kError = 4, kOff = 5 };

// Parses "trace".."off" (case-insensitive); throws ConfigError naming `where` and the choices.
LogLevel parse_log_level(const std::string& text, const std::string& where);
const char* to_string(LogLevel level);

struct LogSettings {
  LogLevel level = LogLevel::kInfo;
  bool all_ranks = false;     // when true, `ranks` is ignored
  std::vector<int> ranks{0};  // ranks that print levels below WARN
};

// Parses a rank filter ("all", "0", "0,2,5"); throws ConfigError naming `where`.
LogSettings parse_log_ranks(const std::string& text, LogSettings base, const std::string& where);

void set_log_settings(const LogSettings& settings);
LogSettings log_settings();
// Applies ZS_LOG_LEVEL / ZS_LOG_RANKS on top of `settings` (environment wins, as documented).
LogSettings apply_log_env(LogSettings settings);

bool log_enabled(LogLevel level) noexcept;

namespace detail {
class LogLine {
 public:
  LogLine(LogLevel level, const char* file, int line);
  ~LogLine();
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;
  std::ostringstream& stream() { return os_; }

 private:
  LogLevel level_;
  const char* file_;
  int line_;
  std::ostringstream os_;
};
}  // namespace detail
}  // namespace zeroshard

// ZS_LOG(kInfo) << "gathered " << n << " bytes";  The stream is not evaluated when filtered out.
#define ZS_LOG(level)                                                     \
  if (!::zeroshard::log_enabled(::zeroshard::LogLevel::level)) {          \
  } else                                                                  \
    ::zeroshard::detail::LogLine(::zeroshard::LogLevel::level, __FILE__, __LINE__).stream()
