// SPDX-License-Identifier: Apache-2.0
#pragma once
// Shared state of a Work handle: completion flag, error, start time, and the tensors kept alive
// until the collective has completed. Backends derive from it; the watchdog tracks it.
// Thread-safe: complete()/fail() may race (first wins); waiters block on a condition variable.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <vector>

#include "zeroshard/comm/communicator.h"

namespace zeroshard::comm {

class WorkBase : public Work {
 public:
  using Clock = std::chrono::steady_clock;

  WorkBase(CollectiveSignature sig, std::vector<at::Tensor> keep_alive,
           std::chrono::milliseconds comm_timeout);

  bool is_completed() override;
  std::exception_ptr exception() const override;
  const CollectiveSignature& signature() const override { return sig_; }

  // --- backend / watchdog side ---
  // The backend started the collective (MPI: worker issued it; NCCL: enqueued on the stream).
  void mark_started();
  bool started() const;
  Clock::time_point started_at() const;
  std::chrono::milliseconds comm_timeout() const { return comm_timeout_; }
  // Success: releases the kept tensors, then marks the Work done and wakes waiters (so a waiter
  // never sees it done while the communicator still holds its tensors). No effect after fail().
  void complete();
  // Failure: records the first error, releases the kept tensors and wakes waiters.
  void fail(std::exception_ptr error);
  // Backends whose completion is observed by polling (CUDA events) override this; it is called by
  // is_completed() and by the watchdog. Must not block.
  virtual void poll() {}
  // Called by the watchdog (before fail()) when the collective timed out, so a backend can abort
  // what is still running (NCCL: ncclCommAbort). Must not block for long.
  virtual void on_timeout() {}
  // True when complete() or fail() has been called (does not poll).
  bool done() const;

 protected:
  // Blocks until done or until `timeout` (zero: no limit) elapses; returns whether done. Polls for
  // up to `poll` first (see CommOptions::poll_before_sleep).
  bool block_until_done(std::chrono::milliseconds timeout,
                        std::chrono::microseconds poll = std::chrono::microseconds::zero());
  // Throws the stored error if any.
  void rethrow_if_failed() const;

 private:
  CollectiveSignature sig_;
  std::chrono::milliseconds comm_timeout_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::atomic<bool> done_flag_{false};  // mirrors done_ for the lock-free spin in block_until_done
  bool started_ = false;
  Clock::time_point started_at_{};
  std::exception_ptr error_;
  std::vector<at::Tensor> keep_alive_;
  uint64_t record_ = 0;  // its FlightRecorder entry
};

}  // namespace zeroshard::comm
