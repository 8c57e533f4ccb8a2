// SPDX-License-Identifier: Apache-2.0
#include "work_base.h"

#include <thread>

#include "zeroshard/comm/flight_recorder.h"

namespace zeroshard::comm {

WorkBase::WorkBase(CollectiveSignature sig, std::vector<at::Tensor> keep_alive,
                   std::chrono::milliseconds comm_timeout)
    : sig_(std::move(sig)), comm_timeout_(comm_timeout), keep_alive_(std::move(keep_alive)) {
  record_ = FlightRecorder::instance().issued(sig_);
}

bool WorkBase::is_completed() {
  if (!done()) poll();
  return done();
}

std::exception_ptr WorkBase::exception() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void WorkBase::mark_started() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!started_) {
    started_ = true;
    started_at_ = Clock::now();
    FlightRecorder::instance().started(record_);
  }
}

bool WorkBase::started() const {
  std::lock_guard<std::mutex> lock(mu_);
  return started_;
}

WorkBase::Clock::time_point WorkBase::started_at() const {
  std::lock_guard<std::mutex> lock(mu_);
  return started_at_;
}

void WorkBase::complete() {
  std::vector<at::Tensor> release;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    release.swap(keep_alive_);
  }
  // The tensors go before any waiter can see the collective done: once wait() returns, the
  // communicator holds none of them, so memory measured after a wait is the caller's own.
  release.clear();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;  // failed meanwhile (a watchdog timeout): the failure stands
    done_ = true;
    done_flag_.store(true, std::memory_order_release);
  }
  FlightRecorder::instance().ended(record_, true);
  cv_.notify_all();
}

void WorkBase::fail(std::exception_ptr error) {
  std::vector<at::Tensor> release;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    done_ = true;
    error_ = std::move(error);
    done_flag_.store(true, std::memory_order_release);
    // A failed collective may still be running inside MPI/NCCL (e.g. after a timeout); its buffers
    // must outlive it, so a failure keeps the tensors referenced by this Work.
  }
  FlightRecorder& recorder = FlightRecorder::instance();
  recorder.ended(record_, false);
  recorder.dump_failure("failed: " + sig_.to_string());
  cv_.notify_all();
}

bool WorkBase::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

bool WorkBase::block_until_done(std::chrono::milliseconds timeout, std::chrono::microseconds poll) {
  // Most waits end within microseconds of the call (the collective was nearly done): poll a
  // little, yielding the core, before paying a futex sleep and wake-up on both sides.
  const auto spin_until = Clock::now() + poll;
  while (!done_flag_.load(std::memory_order_acquire) && Clock::now() < spin_until) std::this_thread::yield();
  std::unique_lock<std::mutex> lock(mu_);
  if (timeout.count() <= 0) {
    cv_.wait(lock, [&] { return done_; });
    return true;
  }
  return cv_.wait_for(lock, timeout, [&] { return done_; });
}

void WorkBase::rethrow_if_failed() const {
  std::exception_ptr e = exception();
  if (e) std::rethrow_exception(e);
}

}  // namespace zeroshard::comm
