// SPDX-License-Identifier: Apache-2.0
#pragma once
// Asynchronous file I/O for NVMe offload and checkpoints: io_uring (liburing) first, libaio and a
// pread/pwrite thread pool as fallbacks, O_DIRECT with aligned buffers.
//
//   auto io = zeroshard::make_io_engine({.backend = IoBackend::kAuto, .queue_depth = 32});
//   zeroshard::AioFile f(path, AioFile::kReadWrite | AioFile::kCreate, /*direct=*/true);
//   auto h = io->submit_write(f, buf, bytes, offset);   // split into block_size requests
//   io->wait(h);                                         // throws IoError on any failure
//
// A request is split into block_size pieces, at most queue_depth of them in flight per engine;
// a handle completes when all its pieces have. Errors name the file, the offset of the failing
// piece and the errno text; a short read says the file is shorter than expected (truncated), and
// ENOSPC says the disk is full. With O_DIRECT, buffers, offsets and sizes must be multiples of
// kDirectAlignment (checked at submit: UsageError naming the value).
// A piece that completes with fewer bytes than asked (and no error) is resubmitted for the rest.
// The interface is virtual so tests can wrap an engine to inject faults (FaultInjectingIo,
// fault_io.h).
// Threads: each engine owns one completion thread that reaps finished pieces and starts the next
// ones, so a request larger than queue_depth pieces keeps the device busy while the caller
// computes; wait() only sleeps until its request is done. Thread-safety: submit/wait/wait_all may
// be called from any threads (each handle is waited once, by one thread); one engine per thread of
// use is still the cheapest arrangement. Destroying an engine waits for the pieces in flight
// (their buffers stay in use until then) and drops the pieces not yet started, with a warning.

#include <cstdint>
#include <memory>
#include <string>

namespace zeroshard {

enum class IoBackend { kAuto, kIoUring, kLibaio, kThreads };
// "auto", "io_uring", "libaio", "threads"
const char* to_string(IoBackend b);

inline constexpr int64_t kDirectAlignment = 4096;

struct IoOptions {
  IoBackend backend = IoBackend::kAuto;
  int queue_depth = 32;           // pieces in flight
  int64_t block_size = 1 << 20;   // bytes per piece (a multiple of kDirectAlignment)
  int threads = 4;                // kThreads: pool size
};

// An open file. direct=true asks for O_DIRECT; when the filesystem refuses it (EINVAL, e.g.
// tmpfs), the file is opened without it and a warning naming the path and the filesystem is
// logged once per path (direct() then says false). Throws IoError naming the path on failure
// (missing directory, permission, ...).
class AioFile {
 public:
  enum Flags : int { kRead = 1, kReadWrite = 2, kCreate = 4, kTruncate = 8 };
  AioFile(std::string path, int flags, bool direct);
  ~AioFile();
  AioFile(const AioFile&) = delete;
  AioFile& operator=(const AioFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  bool direct() const { return direct_; }
  int flags() const { return flags_; }  // as given to the constructor
  int64_t size() const;               // current size (fstat)
  void truncate(int64_t bytes);       // ftruncate
  // Reserves disk blocks for [0, bytes) (fallocate; the size becomes at least `bytes`). Later
  // writes there then neither find the disk full midway nor extend the file, which ext4 does
  // synchronously for O_DIRECT AIO (libaio's io_submit would block). Throws IoError naming the
  // path: "disk full" on ENOSPC, a clear message where the filesystem has no fallocate.
  void allocate(int64_t bytes);
  void sync();                        // fdatasync

 private:
  std::string path_;
  int flags_ = 0;
  int fd_ = -1;
  bool direct_ = false;
};

// The texts of the IoErrors the engines raise, shared with wrappers (FaultInjectingIo) so that
// injected failures read like real ones:
//   "disk full: write of 1048576 bytes at offset 3145728 in /nvme/zs/opt.bin failed: No space left
//    on device (errno 28)"
//   "file /nvme/zs/opt.bin is shorter than expected: read 4096 of 8192 bytes at offset 0 (truncated?)"
std::string io_failure_message(const AioFile& file, bool write, int64_t bytes, int64_t offset,
                               int err);
std::string short_read_message(const AioFile& file, int64_t got, int64_t wanted, int64_t offset);

// The type of the filesystem holding `path` (statfs): "ext4" (ext2/3/4 share one magic), "xfs",
// "btrfs", "tmpfs", "nfs", "overlay", "fuse", ..., or "unknown (f_type 0x...)". Throws IoError
// naming the path when statfs fails.
std::string filesystem_type(const std::string& path);

class IoEngine {
 public:
  using Handle = uint64_t;
  virtual ~IoEngine() = default;
  // Queue a read/write of `bytes` at `offset`; `file` and `buf` must stay valid until wait()
  // returns. Argument errors (negative sizes, a write to a file opened kRead, O_DIRECT alignment)
  // are UsageErrors thrown here; I/O failures are thrown by wait().
  virtual Handle submit_read(AioFile& file, void* buf, int64_t bytes, int64_t offset) = 0;
  virtual Handle submit_write(AioFile& file, const void* buf, int64_t bytes, int64_t offset) = 0;
  // Blocks until the request completed; throws IoError if any piece failed (the handle is then
  // consumed; other requests are unaffected). Each handle is waited at most once.
  virtual void wait(Handle h) = 0;
  // Waits for every outstanding request; throws the first error after all have finished.
  virtual void wait_all() = 0;
  virtual IoBackend backend() const = 0;
  virtual const IoOptions& options() const = 0;
};

// Builds the engine asked for. kAuto tries io_uring, then libaio, then threads, logging at info
// which one was picked and why the others were not (e.g. io_uring_queue_init: Operation not
// permitted, as under a seccomp profile). An explicit backend that cannot start is an IoError
// naming it and the reason (a backend compiled out for lack of its library: "built without
// liburing: install liburing-dev and reconfigure"). Bad options are UsageErrors naming the field.
// The engine's backend() and options().backend name the backend that runs (never kAuto).
std::unique_ptr<IoEngine> make_io_engine(const IoOptions& options);

}  // namespace zeroshard
