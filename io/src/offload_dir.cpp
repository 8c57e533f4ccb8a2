// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/io/offload_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include "zeroshard/base/error.h"
#include "zeroshard/base/logging.h"

namespace zeroshard {

std::string offload_file_stem(const std::string& name) {
  std::string out;
  for (char c : name) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.') ? c : '_';
  return out.empty() ? "unit" : out.substr(0, 80);
}

OffloadDir::OffloadDir(const std::string& nvme_path, const std::string& name, int rank,
                       const std::string& stale_marker, const std::string& what) {
  ZS_REQUIRE(!nvme_path.empty(), UsageError, "nvme_path is empty; offloading the ", what,
             " to NVME needs a directory on the NVMe drive");
  struct stat st{};
  if (::stat(nvme_path.c_str(), &st) != 0) {
    const int err = errno;
    ZS_THROW(IoError, "offload.nvme_path '", nvme_path, "' cannot be used: ", detail::errno_string(err),
             "; create the directory (on the NVMe drive) or point nvme_path at one");
  }
  ZS_REQUIRE(S_ISDIR(st.st_mode), IoError, "offload.nvme_path '", nvme_path, "' is not a directory");
  ZS_REQUIRE(::access(nvme_path.c_str(), W_OK | X_OK) == 0, IoError, "offload.nvme_path '", nvme_path,
             "' is not writable by this process (rank ", rank, "): ", detail::errno_string(errno));
  dir_ = nvme_path + "/" + name + std::to_string(rank);
  if (::mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST) {
    const int err = errno;
    ZS_THROW(IoError, "cannot create the rank directory '", dir_, "' for the offloaded ", what, ": ",
             detail::errno_string(err));
  }
  lock_path_ = dir_ + "/lock";
  lock_fd_ = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd_ < 0) {
    const int err = errno;
    ZS_THROW(IoError, "cannot create '", lock_path_, "' in offload.nvme_path: ", detail::errno_string(err));
  }
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(lock_fd_);
    lock_fd_ = -1;
    ZS_THROW(IoError, "the offload directory '", dir_, "' is in use by another process (", detail::errno_string(err),
             "); give each job its own offload.nvme_path");
  }
  // Files of an earlier run that ended without cleaning up: never read back (a run resumes only
  // from checkpoints), so remove them now.
  if (DIR* d = ::opendir(dir_.c_str())) {
    int removed = 0;
    while (dirent* e = ::readdir(d)) {
      if (std::strstr(e->d_name, stale_marker.c_str()) != nullptr && ::unlink((dir_ + "/" + e->d_name).c_str()) == 0) {
        ++removed;
      }
    }
    ::closedir(d);
    if (removed > 0) {
      ZS_LOG(kInfo) << "offload: removed " << removed << " file(s) of the " << what << " an earlier run left in "
                    << dir_;
    }
  }
}

OffloadDir::~OffloadDir() {
  if (lock_fd_ >= 0) {
    ::unlink(lock_path_.c_str());
    ::close(lock_fd_);
  }
  ::rmdir(dir_.c_str());  // fails (harmlessly) if something else lives there
}

}  // namespace zeroshard
