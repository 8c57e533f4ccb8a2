// SPDX-License-Identifier: Apache-2.0
// pread/pwrite helpers with file-naming errors (file_io.h).

#include "file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "zeroshard/base/error.h"

namespace zeroshard::data {

void read_at(int fd, int64_t offset, int64_t bytes, void* out, const std::string& path) {
  auto* p = static_cast<char*>(out);
  for (int64_t done = 0; done < bytes;) {
    const ssize_t n = ::pread(fd, p + done, static_cast<size_t>(bytes - done), offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ZS_THROW(IoError, "cannot read '", path, "' at byte ", offset + done, ": ", detail::errno_string(err));
    }
    ZS_REQUIRE(n > 0, DataError, "'", path, "' ends at byte ", offset + done, ", inside a read of bytes ", offset,
               "..", offset + bytes);
    done += n;
  }
}

void write_at(int fd, int64_t offset, int64_t bytes, const void* data, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  for (int64_t done = 0; done < bytes;) {
    const ssize_t n = ::pwrite(fd, p + done, static_cast<size_t>(bytes - done), offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ZS_THROW(IoError, "cannot write '", path, "' at byte ", offset + done, ": ", detail::errno_string(err));
    }
    done += n;
  }
}

int open_for_reading(const std::string& path, const char* what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    ZS_THROW(IoError, "cannot open ", what, " '", path, "': ", detail::errno_string(err));
  }
  return fd;
}

int64_t file_size(int fd, const std::string& path) {
  struct stat st {};
  ZS_CHECK_ERRNO(fstat(fd, &st), "cannot stat '", path, "'");
  return st.st_size;
}

}  // namespace zeroshard::data
