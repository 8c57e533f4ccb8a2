// SPDX-License-Identifier: Apache-2.0
// replace_file.h: sync, rename, sync the directory.

#include "zeroshard/io/replace_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "zeroshard/base/error.h"

namespace zeroshard {

std::string temp_name_for(const std::string& path) { return path + ".tmp"; }

void replace_with_temp(const std::string& tmp, const std::string& path) {
  auto fail = [&](const char* step, int err) {
    ::unlink(tmp.c_str());
    ZS_THROW(IoError, step, " of '", tmp, "' (to replace '", path, "') failed: ", detail::errno_string(err));
  };
  const int fd = ::open(tmp.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("open", errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) fail("fsync", err);
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("rename", errno);
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const int dfd = ZS_CHECK_ERRNO(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC), "open of directory '", dir,
                                 "' (to sync the rename to '", path, "')");
  const int drc = ::fsync(dfd);
  const int derr = errno;
  ::close(dfd);
  ZS_REQUIRE(drc == 0, IoError, "fsync of directory '", dir, "' (the rename to '", path,
             "') failed: ", detail::errno_string(derr));
}

}  // namespace zeroshard
