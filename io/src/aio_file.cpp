// SPDX-License-Identifier: Apache-2.0
// AioFile (open with O_DIRECT and the fallback when the filesystem refuses it), the texts of the
// engines' IoErrors, and the filesystem-type lookup.

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <iomanip>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "zeroshard/base/error.h"
#include "zeroshard/base/logging.h"
#include "zeroshard/io/aio.h"

namespace zeroshard {

namespace {

std::string parent_dir(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

const char* fs_name(uint64_t magic) {
  switch (magic) {
    case 0xEF53: return "ext4";  // ext2, ext3 and ext4 share the magic
    case 0x58465342: return "xfs";
    case 0x9123683E: return "btrfs";
    case 0x01021994: return "tmpfs";
    case 0x858458F6: return "ramfs";
    case 0x6969: return "nfs";
    case 0x794C7630: return "overlay";
    case 0x65735546: return "fuse";
    case 0x2FC12FC1: return "zfs";
    case 0xF2F52010: return "f2fs";
    case 0xFF534D42: return "cifs";
    case 0xFE534D42: return "smb2";
    case 0x01021997: return "9p";
    case 0x4D44: return "vfat";
    case 0x2011BAB0: return "exfat";
    case 0x00C36400: return "ceph";
    case 0x0BD00BD0: return "lustre";
    case 0x47504653: return "gpfs";
    case 0x73717368: return "squashfs";
    default: return nullptr;
  }
}

std::string fs_type_of(const struct statfs& st) {
  const auto magic = static_cast<uint64_t>(static_cast<uint32_t>(st.f_type));
  if (const char* name = fs_name(magic)) return name;
  std::ostringstream os;
  os << "unknown (f_type 0x" << std::hex << magic << ")";
  return os.str();
}

// One warning per path per process: a swapper reopening its files every step must not flood
// the log.
void warn_direct_refused(const std::string& path, int fd) {
  static std::mutex mu;
  static std::set<std::string> warned;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!warned.insert(path).second) return;
  }
  struct statfs st {};
  const std::string fs = ::fstatfs(fd, &st) == 0 ? fs_type_of(st) : "unknown (fstatfs failed)";
  ZS_LOG(kWarn) << "O_DIRECT refused (EINVAL) for " << path << " on a " << fs
                << " filesystem: using buffered I/O through the page cache for it (slower, and "
                   "the data is copied through host memory); for NVMe offload put the files on a "
                   "filesystem with direct I/O, such as ext4 or xfs on the NVMe drive";
}

[[noreturn]] void throw_open_error(const std::string& path, int flags, int err) {
  const char* mode = (flags & AioFile::kReadWrite) ? "reading and writing" : "reading";
  std::string hint;
  if (err == ENOENT) {
    const std::string dir = parent_dir(path);
    if (!is_directory(dir)) {
      hint = "; the directory " + dir + " does not exist (create it first)";
    } else if (!(flags & AioFile::kCreate)) {
      hint = "; the file does not exist (AioFile::kCreate was not given)";
    }
  }
  ZS_THROW(IoError, "cannot open ", path, " for ", mode, ": ", detail::errno_string(err), hint);
}

}  // namespace

AioFile::AioFile(std::string path, int flags, bool direct) : path_(std::move(path)), flags_(flags) {
  const bool rd = flags & kRead, rw = flags & kReadWrite;
  ZS_REQUIRE((flags & ~(kRead | kReadWrite | kCreate | kTruncate)) == 0 && rd != rw, UsageError,
             "AioFile(", path_, "): flags ", flags,
             " must hold exactly one of kRead, kReadWrite, plus optionally kCreate, kTruncate");
  ZS_REQUIRE(rw || !(flags & (kCreate | kTruncate)), UsageError, "AioFile(", path_,
             "): kCreate and kTruncate need kReadWrite");
  int oflags = O_CLOEXEC | (rw ? O_RDWR : O_RDONLY);
  if (flags & kCreate) oflags |= O_CREAT;
  if (flags & kTruncate) oflags |= O_TRUNC;
  if (direct) {
    fd_ = ::open(path_.c_str(), oflags | O_DIRECT, 0644);
    if (fd_ >= 0) {
      direct_ = true;
      return;
    }
    if (errno != EINVAL) throw_open_error(path_, flags, errno);
  }
  fd_ = ::open(path_.c_str(), oflags, 0644);
  if (fd_ < 0) throw_open_error(path_, flags, errno);
  if (direct) warn_direct_refused(path_, fd_);
}

AioFile::~AioFile() {
  if (fd_ >= 0 && ::close(fd_) != 0) {
    const int err = errno;
    ZS_LOG(kWarn) << "closing " << path_ << " failed: " << detail::errno_string(err);
  }
}

int64_t AioFile::size() const {
  struct stat st {};
  ZS_CHECK_ERRNO(::fstat(fd_, &st), "fstat(", path_, ")");
  return static_cast<int64_t>(st.st_size);
}

void AioFile::truncate(int64_t bytes) {
  ZS_REQUIRE(bytes >= 0, UsageError, "AioFile::truncate(", path_, "): size ", bytes, " < 0");
  ZS_CHECK_ERRNO(::ftruncate(fd_, static_cast<off_t>(bytes)), "ftruncate(", path_, ", ", bytes,
                 " bytes)");
}

void AioFile::allocate(int64_t bytes) {
  ZS_REQUIRE(bytes >= 0, UsageError, "AioFile::allocate(", path_, "): size ", bytes, " < 0");
  if (bytes == 0) return;
  if (::fallocate(fd_, 0, 0, static_cast<off_t>(bytes)) == 0) return;
  const int err = errno;
  const char* what = err == ENOSPC ? "disk full: " : "";
  const char* hint = (err == EOPNOTSUPP || err == ENOSYS)
                         ? " (this filesystem cannot preallocate; skip allocate() here)"
                         : "";
  ZS_THROW(IoError, what, "reserving ", bytes, " bytes for ", path_, " (fallocate) failed: ",
           detail::errno_string(err), hint);
}

void AioFile::sync() { ZS_CHECK_ERRNO(::fdatasync(fd_), "fdatasync(", path_, ")"); }

std::string io_failure_message(const AioFile& file, bool write, int64_t bytes, int64_t offset,
                               int err) {
  const std::string what = detail::concat(write ? "write" : "read", " of ", bytes,
                                          " bytes at offset ", offset, " in ", file.path(),
                                          " failed: ", detail::errno_string(err));
  switch (err) {
    case ENOSPC:
      return "disk full: " + what + "; free space there or move the files to a larger filesystem";
    case EDQUOT:
      return "disk quota exceeded: " + what;
    case EFBIG:
      return "file too large: " + what +
             " (the process file size limit, see ulimit -f, or the filesystem's maximum)";
    case EIO:
      return what + " (a device error: see dmesg)";
    case EINVAL:
      return file.direct() ? what + " (with O_DIRECT: the filesystem may not allow direct I/O for "
                                    "this file, or the device needs a larger alignment)"
                           : what;
    default:
      return what;
  }
}

std::string short_read_message(const AioFile& file, int64_t got, int64_t wanted, int64_t offset) {
  return detail::concat("file ", file.path(), " is shorter than expected: read ", got, " of ",
                        wanted, " bytes at offset ", offset, " (truncated?)");
}

std::string filesystem_type(const std::string& path) {
  struct statfs st {};
  ZS_CHECK_ERRNO(::statfs(path.c_str(), &st), "statfs(", path, ")");
  return fs_type_of(st);
}

}  // namespace zeroshard
