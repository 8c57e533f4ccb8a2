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
// The interface is virtual so tests can wrap an engine to inject faults (FaultInjectingIo).
// Thread-safety: one engine per thread of use (submit/wait from one thread); completions are
// reaped inside wait().

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
  int64_t size() const;               // current size (fstat)
  void truncate(int64_t bytes);       // ftruncate
  void sync();                        // fdatasync

 private:
  std::string path_;
  int fd_ = -1;
  bool direct_ = false;
};

class IoEngine {
 public:
  using Handle = uint64_t;
  virtual ~IoEngine() = default;
  // Queue a read/write of `bytes` at `offset`; `buf` must stay valid until wait() returns.
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
// naming it and the reason. Bad options are UsageErrors naming the field.
std::unique_ptr<IoEngine> make_io_engine(const IoOptions& options);

}  // namespace zeroshard
