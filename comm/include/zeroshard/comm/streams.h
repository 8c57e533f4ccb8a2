// SPDX-License-Identifier: Apache-2.0
#pragma once
// Side streams, stream ordering and stream-ordered buffer lifetimes for device work, through
// LibTorch's device-generic stream and event API (c10::Stream, c10::Event): no CUDA header is
// needed, and the same code compiles against a CPU-only LibTorch.
//
// DeviceStreams, for a CUDA device: besides the caller's current ("compute") stream, an
// all-gather and a reduce-scatter stream (high priority) and a copy stream for host<->device
// copies, all from LibTorch's stream pool. For any other device it is disabled: wait() does
// nothing, Use changes nothing and marks are complete at once, so CPU code runs the same ATen
// ops, in the same order, on the calling thread as it would without it.
//
// Ordering: wait(a, b) makes the work queued on stream `a` from now on run after the work queued
// on `b` so far (an event recorded on b, waited on by a). The host never waits.
//
// Memory, with LibTorch's caching allocator: a block allocated while stream S is current is
// handed only to later allocations made while S is current. Dropping a buffer that another
// stream T still reads or writes is therefore safe only if S is ordered after T before its next
// allocation. Two ways, both used by the engine, neither is record_stream (which keeps blocks
// until the allocator next happens to poll, often far longer than needed):
//   - every use of S starts with wait(S, T) for the streams that used its blocks; or
//   - ReleaseQueue keeps the buffer referenced until a mark recorded on T after its last use
//     has completed (polled, never waited on by the host), or until S is made to wait on it.
//
// Thread-safety: DeviceStreams is immutable after construction; the current stream is per
// thread (LibTorch). ReleaseQueue is not thread-safe.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/core/StreamGuard.h>
#include <c10/util/Optional.h>

#include <cstddef>
#include <deque>
#include <memory>
#include <vector>

namespace zeroshard {

// A point in a stream's queue: done() once the device has passed it.
class StreamMark {
 public:
  virtual ~StreamMark() = default;
  // True once the work queued on the stream before the mark has completed. Never blocks.
  virtual bool done() const = 0;
  // Makes `stream` wait (on the device) for the mark.
  virtual void block(const c10::Stream& stream) const = 0;
};

class DeviceStreams {
 public:
  // CUDA device: takes the side streams from LibTorch's pool for that device. Anything else:
  // disabled.
  explicit DeviceStreams(c10::Device device);

  bool enabled() const { return enabled_; }
  c10::Device device() const { return device_; }

  // The calling thread's current stream on the device (where LibTorch ops are queued).
  c10::Stream current() const;
  c10::Stream all_gather() const { return all_gather_; }
  c10::Stream reduce_scatter() const { return reduce_scatter_; }
  c10::Stream copy() const { return copy_; }

  // Work queued on `waiter` from now on runs after the work queued on `producer` so far.
  // Nothing when disabled or when both are the same stream. Never blocks the host.
  void wait(const c10::Stream& waiter, const c10::Stream& producer) const;

  // A mark at the current end of `stream`'s queue (disabled: one that is done at once).
  std::unique_ptr<StreamMark> mark(const c10::Stream& stream) const;

  // Copies `src` into `dst` (same size and dtype, contiguous; one of them on the host, the other
  // on this device) on the copy stream, after the work queued on the current stream so far, and
  // returns a mark after the copy. The host side must be pinned (page-locked: PinnedPool), or the
  // copy would block the host: UsageError naming the tensor. The caller keeps both tensors alive
  // until the mark is done (ReleaseQueue), and before reading `dst` on the device makes that
  // stream wait for the mark (mark->block(stream)); on the host, waits until mark->done().
  // Disabled: a plain synchronous copy, and a mark that is done.
  std::unique_ptr<StreamMark> copy_async(const at::Tensor& dst, const at::Tensor& src) const;

  // RAII: makes `stream` the calling thread's current stream on the device while it lives
  // (nothing when the DeviceStreams is disabled).
  class Use {
   public:
    Use(const DeviceStreams& streams, const c10::Stream& stream);
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;

   private:
    c10::OptionalStreamGuard guard_;
  };

 private:
  c10::Device device_;
  bool enabled_ = false;
  c10::Stream all_gather_;
  c10::Stream reduce_scatter_;
  c10::Stream copy_;
};

// Buffers kept referenced until the device has passed their last use (see the header comment).
class ReleaseQueue {
 public:
  // Keeps `buffers` until `last_use` is done. A null or already-done mark drops them at once.
  void release_after(std::vector<at::Tensor> buffers, std::unique_ptr<StreamMark> last_use);
  // Drops the buffers whose mark is done, oldest first; stops at the first that is not (marks of
  // one stream complete in order). Never blocks. Returns the number of entries left.
  size_t poll();
  // Makes `stream` wait for the oldest entries' marks and drops them until at most `keep`
  // remain. Correct only for buffers whose memory was allocated on `stream` (its later
  // allocations are then ordered after those marks).
  void release_after_wait(const c10::Stream& stream, size_t keep = 0);
  size_t pending() const { return entries_.size(); }

 private:
  struct Entry {
    std::vector<at::Tensor> buffers;
    std::unique_ptr<StreamMark> mark;
  };
  std::deque<Entry> entries_;
};

}  // namespace zeroshard
