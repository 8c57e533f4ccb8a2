// SPDX-License-Identifier: Apache-2.0
#pragma once
// zeroshard's error model: one exception family. Every error carries the rank and host of the
// process that raised it and the source location, so a message read from a 64-rank job log says
// where it came from. Thread-safe: errors are values; the process identity they read is set once
// by zeroshard::Session before any worker thread starts.

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace zeroshard {

class Error : public std::runtime_error {
 public:
  Error(std::string message, const char* file, int line);
  // `kind` names the subclass in the formatted text ("config error", "comm error", ...).
  Error(const char* kind, std::string message, const char* file, int line);

  int rank() const noexcept { return rank_; }
  const std::string& host() const noexcept { return host_; }
  const std::string& file() const noexcept { return file_; }
  int line() const noexcept { return line_; }
  // The message without the rank/host/location prefix.
  const std::string& message() const noexcept { return message_; }

 private:
  int rank_;
  std::string host_;
  std::string file_;
  int line_;
  std::string message_;
};

#define ZS_DECLARE_ERROR(Name, Base, kind)                                      \
  class Name : public Base {                                                    \
   public:                                                                      \
    Name(std::string message, const char* file, int line)                       \
        : Base(kind, std::move(message), file, line) {}                         \
                                                                                \
   protected:                                                                   \
    Name(const char* k, std::string message, const char* file, int line)        \
        : Base(k, std::move(message), file, line) {}                            \
  }

ZS_DECLARE_ERROR(ConfigError, Error, "config error");        // bad config file, key or value
ZS_DECLARE_ERROR(CommError, Error, "comm error");            // a collective failed or was misused
ZS_DECLARE_ERROR(CommTimeoutError, CommError, "comm timeout"); // the watchdog fired
ZS_DECLARE_ERROR(CudaError, Error, "CUDA error");
ZS_DECLARE_ERROR(IoError, Error, "I/O error");               // files, sockets, async I/O
ZS_DECLARE_ERROR(CheckpointError, Error, "checkpoint error");
ZS_DECLARE_ERROR(UsageError, Error, "usage error");          // API misuse or bad command line
ZS_DECLARE_ERROR(DataError, Error, "data error");            // a malformed data file or record, failed loading

// The exit status of a job that ran out of memory (MPI_Abort passes it to mpirun's status), so
// scripts and zeroshard-launch --find-batch-size can tell it from other failures (1).
inline constexpr int kOutOfMemoryExitCode = 3;

namespace detail {

template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
inline std::string concat() { return {}; }

// Who this process is, for error prefixes and log lines. Set by Session after MPI is up.
void set_process_identity(int rank, int world_size, std::string host);
int process_rank() noexcept;
int process_world_size() noexcept;
const std::string& process_host() noexcept;

// "<strerror(err)> (errno <err>)", thread-safe.
std::string errno_string(int err);

}  // namespace detail
}  // namespace zeroshard

// Throw `ErrType` (a zeroshard::Error subclass) with the streamed arguments as message.
#define ZS_THROW(ErrType, ...) throw ErrType(::zeroshard::detail::concat(__VA_ARGS__), __FILE__, __LINE__)

// Internal invariant or precondition; the message should say what to do about it.
#define ZS_CHECK(cond, ...)                                                               \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      ZS_THROW(::zeroshard::Error, "check failed (" #cond "): ", ##__VA_ARGS__);         \
    }                                                                                     \
  } while (0)

// Like ZS_CHECK but with a chosen error type and no "check failed" text: for user-facing checks.
#define ZS_REQUIRE(cond, ErrType, ...)    \
  do {                                    \
    if (!(cond)) {                        \
      ZS_THROW(ErrType, __VA_ARGS__);     \
    }                                     \
  } while (0)

// For calls that return -1 and set errno (open, write, fsync, ...). Evaluates to the result.
#define ZS_CHECK_ERRNO(expr, ...)                                                          \
  ([&]() {                                                                                 \
    auto zs_rc_ = (expr);                                                                  \
    if (zs_rc_ < 0) {                                                                      \
      int zs_err_ = errno;                                                                 \
      ZS_THROW(::zeroshard::IoError, ::zeroshard::detail::concat(__VA_ARGS__), ": ",      \
               ::zeroshard::detail::errno_string(zs_err_));                                \
    }                                                                                      \
    return zs_rc_;                                                                         \
  }())
