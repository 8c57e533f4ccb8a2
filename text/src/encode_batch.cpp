// SPDX-License-Identifier: Apache-2.0
// encode_batch on a small process-wide pool of worker threads.

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "zeroshard/text/tokenizer.h"

namespace zeroshard::text {

namespace {

// Workers that run one job at a time: each job is a function of the worker's index, run on
// `workers` threads (the caller's among them). Jobs from several callers take turns.
class Pool {
 public:
  static Pool& instance() {
    static Pool pool;
    return pool;
  }

  void run(int workers, const std::function<void()>& work) {
    std::lock_guard<std::mutex> one_job(job_mutex_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      while (static_cast<int>(threads_.size()) < workers - 1) threads_.emplace_back([this] { loop(); });
      job_ = &work;
      wanted_ = workers - 1;
      started_ = finished_ = 0;
      ++generation_;
    }
    wake_.notify_all();
    work();
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return finished_ == wanted_; });
    job_ = nullptr;
  }

  ~Pool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
  }

 private:
  void loop() {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
      wake_.wait(lock, [&] { return stop_ || (generation_ != seen && started_ < wanted_); });
      if (stop_) return;
      seen = generation_;
      ++started_;
      const std::function<void()>* job = job_;
      lock.unlock();
      (*job)();
      lock.lock();
      if (++finished_ == wanted_) done_.notify_all();
    }
  }

  std::mutex job_mutex_, mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> threads_;
  const std::function<void()>* job_ = nullptr;
  int wanted_ = 0, started_ = 0, finished_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace

std::vector<std::vector<int32_t>> encode_batch(const Tokenizer& tokenizer, const std::vector<std::string>& texts,
                                               bool add_special_tokens, int threads) {
  std::vector<std::vector<int32_t>> out(texts.size());
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), std::max<size_t>(1, texts.size())));
  std::atomic<size_t> next{0};
  std::mutex error_mutex;
  std::exception_ptr error;
  const std::function<void()> work = [&] {
    for (size_t i = next++; i < texts.size(); i = next++) {
      try {
        out[i] = tokenizer.encode(texts[i], add_special_tokens);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        next = texts.size();
      }
    }
  };
  if (threads == 1) {
    work();
  } else {
    Pool::instance().run(threads, work);
  }
  if (error) std::rethrow_exception(error);
  return out;
}

}  // namespace zeroshard::text
