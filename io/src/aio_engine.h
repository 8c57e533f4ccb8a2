// SPDX-License-Identifier: Apache-2.0
#pragma once
// The part of every IoEngine that does not depend on the kernel interface (aio_engine.cpp): split
// requests into pieces, keep at most queue_depth of them in flight, resubmit partial transfers,
// turn failures into IoErrors, and run the completion thread. A backend (io_uring, libaio, thread
// pool) only starts pieces and reaps finished ones.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "zeroshard/io/aio.h"

namespace zeroshard::aio_detail {

// One kernel request: at most block_size bytes of one IoEngine request.
struct Piece {
  int slot = 0;              // index in the engine's piece table (stable for the piece's life)
  uint64_t request = 0;      // the IoEngine::Handle it belongs to
  int fd = -1;
  bool write = false;
  char* buf = nullptr;       // where the not yet transferred part starts
  int64_t bytes = 0;         // not yet transferred
  int64_t offset = 0;
  int64_t result = 0;        // set by the backend on completion: bytes moved, or -errno
  int retries = 0;           // EINTR/EAGAIN resubmissions
};

// The kernel interface. start() is called under the engine lock, by any thread; reap() only from
// the completion thread, without the lock, and only while at least one started piece has not been
// returned by reap() yet, so it may block until one completes.
class Backend {
 public:
  virtual ~Backend() = default;
  // Hands pieces[0..n) to the kernel. A piece that cannot be started gets result = -errno and is
  // appended to `failed` (not to a later reap()). Throws IoError only when the backend itself is
  // broken (every later call would fail too).
  virtual void start(Piece* const* pieces, int n, std::vector<Piece*>& failed) = 0;
  // Blocks until at least one started piece completed; appends the completed ones (result set).
  virtual void reap(std::vector<Piece*>& done) = 0;
};

// Backend factories; each throws IoError naming the backend and why it cannot start here.
std::unique_ptr<Backend> make_uring_backend(const IoOptions& options);
std::unique_ptr<Backend> make_libaio_backend(const IoOptions& options);
std::unique_ptr<Backend> make_thread_backend(const IoOptions& options);

class PieceEngine final : public IoEngine {
 public:
  PieceEngine(const IoOptions& options, IoBackend kind, std::unique_ptr<Backend> backend);
  ~PieceEngine() override;

  Handle submit_read(AioFile& file, void* buf, int64_t bytes, int64_t offset) override;
  Handle submit_write(AioFile& file, const void* buf, int64_t bytes, int64_t offset) override;
  void wait(Handle h) override;
  void wait_all() override;
  IoBackend backend() const override { return kind_; }
  const IoOptions& options() const override { return options_; }

 private:
  struct Request {
    AioFile* file = nullptr;
    bool write = false;
    char* buf = nullptr;
    int64_t bytes = 0;
    int64_t offset = 0;
    int64_t split = 0;      // bytes already cut into pieces
    int in_flight = 0;      // pieces started and not yet finished
    bool claimed = false;   // a wait() or wait_all() is waiting for it
    // The failure at the lowest offset: errno (or 0 for end of file), where and how much.
    bool failed = false;
    int err = 0;
    int64_t fail_offset = 0;
    int64_t fail_bytes = 0;
    bool done() const { return split == bytes && in_flight == 0; }
  };

  Handle submit(AioFile& file, bool write, char* buf, int64_t bytes, int64_t offset);
  // Starts pieces while fewer than queue_depth are in flight and requests have unsplit bytes.
  void pump_locked();
  void start_locked(std::vector<Piece*>& batch);
  // A piece came back from the kernel: account it, resubmit the rest of a partial transfer, or
  // record the failure. Returns the piece for resubmission, or nullptr when it is finished.
  Piece* complete_locked(Piece* piece);
  void finish_piece_locked(Piece* piece);
  void record_failure_locked(Request& r, int err, int64_t offset, int64_t bytes);
  [[noreturn]] void throw_failure(const Request& r) const;
  void completion_loop();

  const IoOptions options_;
  const IoBackend kind_;
  std::unique_ptr<Backend> backend_;

  std::mutex mu_;
  std::condition_variable work_cv_;   // completion thread: pieces in flight, or stop
  std::condition_variable done_cv_;   // waiters: a request finished
  std::unordered_map<Handle, Request> requests_;
  std::deque<Handle> unsplit_;        // requests with bytes not yet cut into pieces, FIFO
  std::vector<Piece> pieces_;         // queue_depth slots
  std::vector<int> free_slots_;
  int in_flight_ = 0;
  Handle next_handle_ = 1;
  bool stop_ = false;
  std::string broken_;                // set when the backend failed for good
  std::thread completer_;
};

}  // namespace zeroshard::aio_detail
