// SPDX-License-Identifier: Apache-2.0
// reserve_space.h: posix_fallocate, or a free-space check where the filesystem cannot allocate.

#include "zeroshard/io/reserve_space.h"

#include <fcntl.h>
#include <sys/statvfs.h>

#include <atomic>
#include <cerrno>

#include "zeroshard/base/error.h"
#include "zeroshard/base/logging.h"

namespace zeroshard {

int reserve_space(int fd, int64_t bytes, const std::string& path) {
  if (bytes <= 0) return 0;
  const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
  if (rc != EOPNOTSUPP && rc != EINVAL) return rc;
  struct statvfs st {};
  if (::fstatvfs(fd, &st) != 0) return errno;
  const auto free_bytes = static_cast<unsigned long long>(st.f_bavail) * st.f_frsize;
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) {
    ZS_LOG(kInfo) << "the filesystem of '" << path << "' cannot reserve space (fallocate: "
                  << detail::errno_string(rc) << "): checking its free space instead (" << free_bytes
                  << " bytes free); the space is not held, so other writers can still fill the drive";
  }
  return free_bytes < static_cast<unsigned long long>(bytes) ? ENOSPC : 0;
}

}  // namespace zeroshard
