// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/base/error.h"

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>

namespace zeroshard {
namespace {

struct Identity {
  std::atomic<int> rank{-1};
  std::atomic<int> world_size{-1};
  std::string host;
  std::once_flag host_once;
};

Identity& identity() {
  static Identity id;
  return id;
}

std::string local_hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

std::string format_what(const char* kind, int rank, const std::string& host, const char* file,
                        int line, const std::string& message) {
  std::ostringstream os;
  os << "zeroshard " << kind << " [";
  if (rank >= 0) {
    os << "rank " << rank;
  } else {
    os << "rank ?";
  }
  os << " on " << host << ", " << file << ":" << line << "]: " << message;
  return os.str();
}

}  // namespace

Error::Error(std::string message, const char* file, int line)
    : Error("error", std::move(message), file, line) {}

Error::Error(const char* kind, std::string message, const char* file, int line)
    : std::runtime_error(format_what(kind, detail::process_rank(), detail::process_host(), file,
                                     line, message)),
      rank_(detail::process_rank()),
      host_(detail::process_host()),
      file_(file),
      line_(line),
      message_(std::move(message)) {}

namespace detail {

void set_process_identity(int rank, int world_size, std::string host) {
  Identity& id = identity();
  std::call_once(id.host_once, [&] { id.host = std::move(host); });
  id.rank = rank;
  id.world_size = world_size;
}

int process_rank() noexcept { return identity().rank; }
int process_world_size() noexcept { return identity().world_size; }

const std::string& process_host() noexcept {
  Identity& id = identity();
  std::call_once(id.host_once, [&] { id.host = local_hostname(); });
  return id.host;
}

std::string errno_string(int err) {
  char buf[256] = {0};
  // GNU strerror_r may return a static string instead of filling buf.
  const char* s = strerror_r(err, buf, sizeof(buf));
  return concat(s, " (errno ", err, ")");
}

}  // namespace detail
}  // namespace zeroshard
