// SPDX-License-Identifier: Apache-2.0
// The io_uring backend (liburing). The engine lock serialises the submission side (get_sqe,
// submit); only the completion thread touches the completion queue (wait_cqe, cq_advance), which
// is the split liburing allows without further locking.

#include <liburing.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <memory>
#include <utility>
#include <vector>

#include "aio_engine.h"
#include "zeroshard/base/error.h"

namespace zeroshard::aio_detail {

namespace {

// A submission the kernel answers with EAGAIN/EBUSY/EINTR is retried this long before the
// pieces fail with that error.
constexpr std::chrono::seconds kSubmitPatience{10};

const char* init_hint(int err) {
  switch (err) {
    case EPERM: return " (io_uring is forbidden here: a seccomp profile such as Docker's default, "
                       "or /proc/sys/kernel/io_uring_disabled)";
    case ENOSYS: return " (kernel without io_uring: Linux 5.1 or newer, built with it, is needed)";
    case ENOMEM: return " (locked-memory limit too small for the rings: see ulimit -l)";
    default: return "";
  }
}

class UringBackend final : public Backend {
 public:
  explicit UringBackend(int queue_depth) {
    unsigned entries = 1;
    while (entries < static_cast<unsigned>(queue_depth)) entries <<= 1;
    const int rc = io_uring_queue_init(entries, &ring_, 0);
    if (rc < 0) {
      ZS_THROW(IoError, "io_uring backend: io_uring_queue_init(", entries, ") failed: ",
               detail::errno_string(-rc), init_hint(-rc));
    }
    // IORING_OP_READ/WRITE (plain buffers) arrived in Linux 5.6, with the probe interface.
    io_uring_probe* probe = io_uring_get_probe_ring(&ring_);
    const bool ok = probe != nullptr && io_uring_opcode_supported(probe, IORING_OP_READ) &&
                    io_uring_opcode_supported(probe, IORING_OP_WRITE);
    if (probe != nullptr) io_uring_free_probe(probe);
    if (!ok) {
      io_uring_queue_exit(&ring_);
      ZS_THROW(IoError, "io_uring backend: the kernel lacks IORING_OP_READ/WRITE (Linux 5.6 or "
                        "newer is needed)");
    }
  }
  ~UringBackend() override { io_uring_queue_exit(&ring_); }

  void start(Piece* const* pieces, int n, std::vector<Piece*>& failed) override {
    std::vector<std::pair<Piece*, io_uring_sqe*>> prepared;
    prepared.reserve(n);
    for (int i = 0; i < n; ++i) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) {  // only after a failed submission left entries behind: flush them
        io_uring_submit(&ring_);
        sqe = io_uring_get_sqe(&ring_);
      }
      Piece* p = pieces[i];
      if (sqe == nullptr) {
        p->result = -EBUSY;
        failed.push_back(p);
        continue;
      }
      const auto len = static_cast<unsigned>(p->bytes);
      if (p->write) {
        io_uring_prep_write(sqe, p->fd, p->buf, len, static_cast<__u64>(p->offset));
      } else {
        io_uring_prep_read(sqe, p->fd, p->buf, len, static_cast<__u64>(p->offset));
      }
      io_uring_sqe_set_data(sqe, p);
      prepared.emplace_back(p, sqe);
    }
    submit_all(prepared, failed);
  }

  void reap(std::vector<Piece*>& done) override {
    io_uring_cqe* cqe = nullptr;
    int rc;
    do {
      rc = io_uring_wait_cqe(&ring_, &cqe);
    } while (rc == -EINTR);
    if (rc < 0) {
      ZS_THROW(IoError, "io_uring backend: io_uring_wait_cqe failed: ", detail::errno_string(-rc));
    }
    unsigned head = 0, count = 0;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      // Entries whose piece was failed after a refused submission carry no piece (see below).
      if (auto* p = static_cast<Piece*>(io_uring_cqe_get_data(cqe))) {
        p->result = cqe->res;  // bytes, or -errno
        done.push_back(p);
      }
      ++count;
    }
    io_uring_cq_advance(&ring_, count);
  }

 private:
  // Submits until the kernel has taken every prepared entry. If it keeps refusing, the entries
  // it has not taken become no-ops without a piece (they still go to the kernel with the next
  // submission, and their completions are ignored) and their pieces fail with the error.
  void submit_all(const std::vector<std::pair<Piece*, io_uring_sqe*>>& prepared,
                  std::vector<Piece*>& failed) {
    const auto deadline = std::chrono::steady_clock::now() + kSubmitPatience;
    for (;;) {
      int rc = io_uring_submit(&ring_);
      const unsigned left = io_uring_sq_ready(&ring_);
      if (left == 0) return;
      const bool transient = rc >= 0 || rc == -EAGAIN || rc == -EBUSY || rc == -EINTR;
      if (transient && std::chrono::steady_clock::now() < deadline) {
        if (rc <= 0) {
          const timespec pause{0, 50 * 1000};
          nanosleep(&pause, nullptr);
        }
        continue;
      }
      if (rc >= 0) rc = -EAGAIN;
      // The entries not taken are the last `left` prepared ones (the queue is FIFO).
      const size_t n = prepared.size();
      for (size_t i = n - std::min<size_t>(left, n); i < n; ++i) {
        auto [piece, sqe] = prepared[i];
        io_uring_prep_nop(sqe);
        io_uring_sqe_set_data(sqe, nullptr);
        piece->result = rc;
        failed.push_back(piece);
      }
      return;
    }
  }

  io_uring ring_{};
};

}  // namespace

std::unique_ptr<Backend> make_uring_backend(const IoOptions& options) {
  return std::make_unique<UringBackend>(options.queue_depth);
}

}  // namespace zeroshard::aio_detail
