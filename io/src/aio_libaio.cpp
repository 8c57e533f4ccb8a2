// SPDX-License-Identifier: Apache-2.0
// The libaio backend (Linux native AIO: io_setup / io_submit / io_getevents). Asynchronous only
// with O_DIRECT: on a buffered file the kernel does the I/O inside io_submit.

#include <libaio.h>
#include <time.h>

#include <cerrno>
#include <chrono>
#include <memory>
#include <vector>

#include "aio_engine.h"
#include "zeroshard/base/error.h"

namespace zeroshard::aio_detail {

namespace {

// io_submit answering EAGAIN (kernel short of resources) is retried this long before the pieces
// fail with EAGAIN.
constexpr std::chrono::seconds kSubmitPatience{10};

class LibaioBackend final : public Backend {
 public:
  explicit LibaioBackend(int queue_depth)
      : iocbs_(queue_depth), events_(queue_depth), queue_depth_(queue_depth) {
    const int rc = io_setup(queue_depth, &ctx_);  // libaio returns -errno
    if (rc < 0) {
      const char* hint = rc == -EAGAIN ? " (the system-wide limit /proc/sys/fs/aio-max-nr is used up)"
                         : rc == -ENOSYS ? " (kernel built without AIO)"
                         : rc == -EPERM  ? " (forbidden here, e.g. by a seccomp profile)"
                                         : "";
      ZS_THROW(IoError, "libaio backend: io_setup(", queue_depth, ") failed: ",
               detail::errno_string(-rc), hint);
    }
  }
  ~LibaioBackend() override { io_destroy(ctx_); }

  void start(Piece* const* pieces, int n, std::vector<Piece*>& failed) override {
    std::vector<iocb*> list(n);
    for (int i = 0; i < n; ++i) {
      Piece* p = pieces[i];
      iocb* cb = &iocbs_[p->slot];
      if (p->write) {
        io_prep_pwrite(cb, p->fd, p->buf, static_cast<size_t>(p->bytes), p->offset);
      } else {
        io_prep_pread(cb, p->fd, p->buf, static_cast<size_t>(p->bytes), p->offset);
      }
      cb->data = p;
      list[i] = cb;
    }
    const auto deadline = std::chrono::steady_clock::now() + kSubmitPatience;
    int next = 0;
    while (next < n) {
      const int rc = io_submit(ctx_, n - next, list.data() + next);
      if (rc > 0) {
        next += rc;
        continue;
      }
      const bool transient = rc == 0 || rc == -EAGAIN || rc == -EINTR;
      if (transient && std::chrono::steady_clock::now() < deadline) {
        const timespec pause{0, 100 * 1000};
        nanosleep(&pause, nullptr);
        continue;
      }
      // The first piece not accepted fails with the error; the rest are tried again.
      Piece* p = static_cast<Piece*>(list[next]->data);
      p->result = rc < 0 ? rc : -EAGAIN;
      failed.push_back(p);
      ++next;
    }
  }

  void reap(std::vector<Piece*>& done) override {
    int rc;
    do {
      rc = io_getevents(ctx_, 1, queue_depth_, events_.data(), nullptr);
    } while (rc == -EINTR);
    if (rc < 0) ZS_THROW(IoError, "libaio backend: io_getevents failed: ", detail::errno_string(-rc));
    for (int i = 0; i < rc; ++i) {
      Piece* p = static_cast<Piece*>(events_[i].data);
      p->result = static_cast<long>(events_[i].res);  // bytes, or -errno
      done.push_back(p);
    }
  }

 private:
  io_context_t ctx_ = nullptr;
  std::vector<iocb> iocbs_;      // one per piece slot
  std::vector<io_event> events_;
  int queue_depth_;
};

}  // namespace

std::unique_ptr<Backend> make_libaio_backend(const IoOptions& options) {
  return std::make_unique<LibaioBackend>(options.queue_depth);
}

}  // namespace zeroshard::aio_detail
