// SPDX-License-Identifier: Apache-2.0
// The portable backend: a pool of threads doing one blocking pread/pwrite per piece. Used where
// io_uring and libaio cannot start (seccomp profiles, old kernels, libraries missing).

#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "aio_engine.h"
#include "zeroshard/base/error.h"

namespace zeroshard::aio_detail {

namespace {

class ThreadBackend final : public Backend {
 public:
  explicit ThreadBackend(int threads) {
    try {
      for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { run(); });
    } catch (const std::exception& e) {
      stop_workers();
      ZS_THROW(IoError, "threads backend: cannot start ", threads, " I/O threads: ", e.what());
    }
  }
  ~ThreadBackend() override { stop_workers(); }

  void start(Piece* const* pieces, int n, std::vector<Piece*>& /*failed*/) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      todo_.insert(todo_.end(), pieces, pieces + n);
    }
    if (n == 1) {
      todo_cv_.notify_one();
    } else {
      todo_cv_.notify_all();
    }
  }

  void reap(std::vector<Piece*>& done) override {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return !done_.empty(); });
    done.insert(done.end(), done_.begin(), done_.end());
    done_.clear();
  }

 private:
  void run() {
    for (;;) {
      Piece* p = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu_);
        todo_cv_.wait(lock, [&] { return stop_ || !todo_.empty(); });
        if (todo_.empty()) return;  // stop_ and nothing left
        p = todo_.front();
        todo_.pop_front();
      }
      const auto n = static_cast<size_t>(p->bytes);
      const ssize_t r = p->write ? ::pwrite(p->fd, p->buf, n, p->offset)
                                 : ::pread(p->fd, p->buf, n, p->offset);
      p->result = r < 0 ? -errno : r;
      {
        std::lock_guard<std::mutex> lock(mu_);
        done_.push_back(p);
      }
      done_cv_.notify_one();
    }
  }

  void stop_workers() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    todo_cv_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
  }

  std::mutex mu_;
  std::condition_variable todo_cv_, done_cv_;
  std::deque<Piece*> todo_;
  std::vector<Piece*> done_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace

std::unique_ptr<Backend> make_thread_backend(const IoOptions& options) {
  return std::make_unique<ThreadBackend>(options.threads);
}

}  // namespace zeroshard::aio_detail
