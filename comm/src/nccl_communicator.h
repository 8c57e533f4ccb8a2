// SPDX-License-Identifier: Apache-2.0
#pragma once
// The NCCL backend: collectives on CUDA tensors, ordered with LibTorch's current CUDA stream.
//
// How a collective runs (NcclCommunicator::run_collective, the one place with the shared work):
//   1. the tensors were checked by the public call (Communicator, communicator.cpp: CUDA, this
//      communicator's device, contiguous, dtype, sizes, overlap);
//   2. an event recorded on the caller's current stream makes the communicator's own stream
//      (high priority, non-blocking) wait for the caller's queued work;
//   3. the NCCL call is enqueued on the communicator's stream, then a completion event;
//   4. the Work is tracked by the watchdog and kept in the communicator's in-flight list.
// The host never waits. Work::wait() makes the caller's current stream wait on the completion
// event. The tensors stay referenced (by the Work and by the in-flight list) until the completion
// event has been observed complete, so dropping a handle never frees a buffer that NCCL still
// reads or writes; no record_stream is involved.
//
// Failure: a collective the watchdog times out aborts the NCCL communicator (ncclCommAbort, once);
// an NCCL asynchronous error found while polling does the same. After that every call on this
// communicator throws CommError "communicator X was aborted after ...".
//
// Thread-safety: one thread issues collectives at a time (the Communicator contract). Work handles
// may be polled and waited on from any thread; the watchdog thread polls and aborts concurrently
// with the issuing thread (NcclCommHandle serialises use of the ncclComm_t against the abort).

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "work_base.h"
#include "zeroshard/comm/communicator.h"

namespace zeroshard::comm {

// Owns one ncclComm_t, shared by the communicator and its Works (a Work may outlive the
// communicator inside the watchdog). Destroys the comm when the last owner goes, unless aborted.
// Locking: `comm_mu_` is held around every use of the ncclComm_t (enqueue, async-error query,
// abort, destroy); the watchdog only ever waits for it a bounded time, so an enqueue stuck behind
// a hung collective cannot stop the watchdog. `reason_mu_` guards the abort reason only.
class NcclCommHandle {
 public:
  NcclCommHandle(ncclComm_t comm, std::string name);
  ~NcclCommHandle();
  NcclCommHandle(const NcclCommHandle&) = delete;
  NcclCommHandle& operator=(const NcclCommHandle&) = delete;

  // Runs fn(comm) with the comm protected against a concurrent abort. Throws CommError when the
  // comm was already aborted; `what` names the operation for that message.
  template <typename Fn>
  void with_comm(const char* what, Fn&& fn) {
    std::lock_guard<std::timed_mutex> lock(comm_mu_);
    throw_if_aborted(what);
    fn(comm_);
  }
  // Throws CommError "cannot run <what>: communicator X was aborted after <reason>" if aborted.
  void throw_if_aborted(const char* what) const;

  // ncclCommAbort, once; later calls do nothing. `reason` ends up in later errors. Never throws.
  // Waits a bounded time for an NCCL call running in with_comm() on another thread; if that call
  // is stuck (e.g. enqueueing behind a hung collective), aborts anyway, as NCCL's abort is what
  // unblocks it: the watchdog must never hang here.
  void abort(const std::string& reason) noexcept;
  bool aborted() const noexcept { return aborted_.load(); }
  std::string abort_reason() const;
  // When the comm reports an asynchronous error: aborts it and returns a description of the
  // error; otherwise (also when already aborted, or busy enqueueing) returns "". Never blocks.
  std::string take_async_error();
  const std::string& name() const { return name_; }

 private:
  void abort_locked(const std::string& reason) noexcept;

  mutable std::timed_mutex comm_mu_;
  ncclComm_t comm_;
  std::string name_;
  std::atomic<bool> aborted_{false};
  mutable std::mutex reason_mu_;
  std::string abort_reason_;
};

// One enqueued NCCL collective. Completion is observed by polling its CUDA event.
class NcclWork final : public WorkBase {
 public:
  // Takes ownership of `done_event` (recorded on the comm stream after the NCCL call).
  NcclWork(CollectiveSignature sig, std::vector<at::Tensor> keep_alive,
           std::chrono::milliseconds timeout, std::shared_ptr<NcclCommHandle> handle, int device,
           cudaEvent_t done_event);
  ~NcclWork() override;

  // Makes the caller's current CUDA stream (on the communicator's device) wait for this
  // collective; never blocks the host. `timeout` is not used: the watchdog enforces the
  // communicator's timeout. Throws the collective's error if it has already failed.
  void wait(std::chrono::milliseconds timeout) override;

  // cudaEventQuery on the completion event; checks the comm's async error while not finished.
  void poll() override;
  // Watchdog timeout: aborts the NCCL communicator so the stuck kernels exit.
  void on_timeout() override;

  // True once the GPU has passed the completion event (or CUDA reports the event broken), so
  // the buffers may be released. Never blocks.
  bool finished_on_device();
  cudaEvent_t done_event() const { return done_event_; }

 private:
  std::exception_ptr aborted_error() const;

  std::shared_ptr<NcclCommHandle> handle_;
  int device_;
  cudaEvent_t done_event_;
};

class NcclCommunicator final : public Communicator {
 public:
  // Takes ownership of `handle`'s comm; `bootstrap` is kept for split() and signature checks.
  NcclCommunicator(std::shared_ptr<NcclCommHandle> handle, std::shared_ptr<Communicator> bootstrap,
                   int device, CommOptions options);
  // Waits for the in-flight collectives by polling (so an NCCL error or a watchdog abort still
  // ends the wait; after an abort it waits at most 10 s for the kernels to exit), then releases
  // the stream and events; the NCCL comm goes with the last Work. Never throws.
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return options_.name; }
  const char* backend() const override { return "nccl"; }
  c10::Device device() const override {
    return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device_));
  }

  std::shared_ptr<Communicator> split(int color, int key) override;

 protected:
  // Contiguous CUDA tensors on this communicator's device, of a dtype NCCL reduces.
  std::string device_requirement(const at::Tensor& t) const override;
  bool supports_dtype(c10::ScalarType dtype) const override;
  const char* supported_dtypes() const override;
  std::shared_ptr<Work> run_all_gather(const at::Tensor& out_flat, const at::Tensor& in_shard, bool in_place,
                                       std::string_view tag) override;
  std::shared_ptr<Work> run_reduce_scatter(const at::Tensor& out_shard, const at::Tensor& in_flat, ReduceOp op,
                                           std::string_view tag) override;
  std::shared_ptr<Work> run_all_reduce(const at::Tensor& tensor, ReduceOp op, std::string_view tag) override;
  std::shared_ptr<Work> run_broadcast(const at::Tensor& tensor, int root, std::string_view tag) override;
  std::shared_ptr<Work> run_barrier(std::string_view tag) override;


 private:
  // The shared path of every collective: sequence number, optional signature check, stream
  // ordering, NCCL call `launch(comm, stream)`, completion event, tracking.
  template <typename LaunchFn>
  std::shared_ptr<Work> run_collective(CollectiveSignature sig, std::vector<at::Tensor> tensors,
                                       LaunchFn&& launch);

  CollectiveSignature make_signature(CollectiveKind kind, c10::ScalarType dtype, int64_t count,
                                     ReduceOp op, int root, std::string_view tag) const;

  // to_nccl_op, or a CommError naming `call` for a dtype NCCL cannot reduce (Short).
  ncclRedOp_t nccl_op(ReduceOp op, c10::ScalarType dtype, const char* call) const;
  std::string where(const char* op) const;  // "all_gather_into on nccl communicator 'world' ..."
  // Drops in-flight Works whose completion event the GPU has passed.
  void prune_completed();
  // Destructor helper: waits for the in-flight Works (bounded once the comm is aborted).
  void drain_inflight() noexcept;
  void release_cuda_objects() noexcept;

  std::shared_ptr<NcclCommHandle> handle_;
  std::shared_ptr<Communicator> bootstrap_;
  int device_;
  CommOptions options_;
  int rank_;
  int size_;
  uint64_t seq_ = 0;
  cudaStream_t stream_ = nullptr;      // the communicator's own stream
  cudaEvent_t ready_event_ = nullptr;  // re-recorded on the caller's stream for each collective
  at::Tensor barrier_buf_;             // one int32 on the device, all-reduced by barrier()
  std::vector<std::shared_ptr<NcclWork>> inflight_;
};

}  // namespace zeroshard::comm
