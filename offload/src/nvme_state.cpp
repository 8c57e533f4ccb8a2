#include "nvme_state.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

#include "zeroshard/base/error.h"
#include "zeroshard/base/logging.h"

namespace zeroshard::detail {
namespace {

bool is_state_file(const char* name) { return std::strstr(name, ".state.") != nullptr; }

std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.') ? c : '_';
  return out.empty() ? "unit" : out.substr(0, 80);
}

}  // namespace

NvmeRankDir::NvmeRankDir(const std::string& nvme_path, int rank) {
  ZS_REQUIRE(!nvme_path.empty(), ConfigError,
             "offload.nvme_path is empty; optimizer/params offload to NVME needs a directory on "
             "the NVMe drive");
  struct stat st{};
  if (::stat(nvme_path.c_str(), &st) != 0) {
    const int err = errno;
    ZS_THROW(IoError, "offload.nvme_path '", nvme_path, "' cannot be used: ", errno_string(err),
             "; create the directory (on the NVMe drive) or point nvme_path at one");
  }
  ZS_REQUIRE(S_ISDIR(st.st_mode), IoError, "offload.nvme_path '", nvme_path, "' is not a directory");
  ZS_REQUIRE(::access(nvme_path.c_str(), W_OK | X_OK) == 0, IoError, "offload.nvme_path '",
             nvme_path, "' is not writable by this process (rank ", rank, "): ",
             errno_string(errno));
  dir_ = nvme_path + "/zeroshard-rank" + std::to_string(rank);
  if (::mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST) {
    const int err = errno;
    ZS_THROW(IoError, "cannot create the rank directory '", dir_, "': ", errno_string(err));
  }
  lock_path_ = dir_ + "/lock";
  lock_fd_ = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd_ < 0) {
    const int err = errno;
    ZS_THROW(IoError, "cannot create '", lock_path_, "' in offload.nvme_path: ", errno_string(err));
  }
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(lock_fd_);
    lock_fd_ = -1;
    ZS_THROW(IoError, "the offload directory '", dir_, "' is in use by another process (",
             errno_string(err), "); give each job its own offload.nvme_path");
  }
  // State files of an earlier run that ended without cleaning up: they are never read back (the
  // state of a run is only resumed from checkpoints), so remove them now.
  if (DIR* d = ::opendir(dir_.c_str())) {
    int removed = 0;
    while (dirent* e = ::readdir(d)) {
      if (is_state_file(e->d_name) && ::unlink((dir_ + "/" + e->d_name).c_str()) == 0) ++removed;
    }
    ::closedir(d);
    if (removed > 0) {
      ZS_LOG(kInfo) << "offload: removed " << removed << " state file(s) an earlier run left in " << dir_;
    }
  }
}

NvmeRankDir::~NvmeRankDir() {
  if (lock_fd_ >= 0) {
    ::unlink(lock_path_.c_str());
    ::close(lock_fd_);
  }
  ::rmdir(dir_.c_str());  // fails (harmlessly) if something else lives there
}

NvmeShardFiles::NvmeShardFiles(const std::string& dir, size_t index, const std::string& unit,
                               int64_t numel_, int64_t chunk_elems_, int state_arrays, bool direct)
    : numel(numel_), chunk_elems(chunk_elems_) {
  chunks = (numel + chunk_elems - 1) / chunk_elems;
  record_bytes = (1 + state_arrays) * chunk_elems * static_cast<int64_t>(sizeof(float));
  for (int g = 0; g < 2; ++g) {
    paths[g] = dir + "/" + std::to_string(index) + "-" + sanitize(unit) + ".state." + std::to_string(g);
    files[g] = std::make_unique<AioFile>(paths[g], AioFile::kReadWrite | AioFile::kCreate | AioFile::kTruncate, direct);
    // Reserve the space now, so a disk too small for the state fails here, before training,
    // rather than in the middle of a step (filesystems without fallocate skip this).
    const int rc = ::posix_fallocate(files[g]->fd(), 0, chunks * record_bytes);
    if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL) {
      ZS_THROW(IoError, "cannot reserve ", chunks * record_bytes, " bytes for '", paths[g],
               "' (offload state of unit '", unit, "'): ", errno_string(rc),
               rc == ENOSPC ? " - the drive under offload.nvme_path is too small for the optimizer state" : "");
    }
    crc[g].assign(static_cast<size_t>(chunks), 0);
  }
}

NvmeShardFiles::~NvmeShardFiles() {
  for (int g = 0; g < 2; ++g) {
    files[g].reset();
    ::unlink(paths[g].c_str());
  }
}

}  // namespace zeroshard::detail
