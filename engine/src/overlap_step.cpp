// SPDX-License-Identifier: Apache-2.0
// The thread that runs the shard updates of a step during backward (overlap_step.h).

#include "overlap_step.h"

#include <ATen/ops/eq.h>

#include <utility>

namespace zeroshard::detail {

ShardStepWorker::~ShardStepWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ShardStepWorker::post(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(task));
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
  }
  cv_.notify_all();
}

std::exception_ptr ShardStepWorker::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
  return std::exchange(failure_, nullptr);
}

void ShardStepWorker::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    // Stopping: what is still queued is dropped, not run (the engine is being destroyed after a
    // backward that threw; the optimizer the tasks name may be gone already).
    if (stop_) return;
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    if (failure_) {  // an earlier task failed: the step is abandoned, the rest are not run
      cv_.notify_all();
      continue;
    }
    busy_ = true;
    lock.unlock();
    std::exception_ptr failed;
    try {
      task();
    } catch (...) {
      failed = std::current_exception();
    }
    lock.lock();
    busy_ = false;
    if (failed && !failure_) failure_ = failed;
    cv_.notify_all();
  }
}

bool OverlappedStep::gradients_unchanged() const {
  if (changed) return false;
  for (const at::Tensor& f : factors) {
    if (!at::eq(f, 1.0).all().item<bool>()) return false;
  }
  return true;
}

}  // namespace zeroshard::detail
