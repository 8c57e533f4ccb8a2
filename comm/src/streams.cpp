// SPDX-License-Identifier: Apache-2.0
// DeviceStreams and ReleaseQueue. Contracts in zeroshard/comm/streams.h.
#include "zeroshard/comm/streams.h"

#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <utility>

#include "zeroshard/base/error.h"

namespace zeroshard {
namespace {

c10::Stream default_stream(c10::Device device) { return c10::Stream(c10::Stream::DEFAULT, device); }

// A CUDA (or other backend) event recorded on a stream.
class EventMark final : public StreamMark {
 public:
  explicit EventMark(const c10::Stream& stream) : event_(stream.device_type()) { event_.record(stream); }
  bool done() const override { return event_.query(); }
  void block(const c10::Stream& stream) const override { event_.block(stream); }

 private:
  c10::Event event_;
};

class DoneMark final : public StreamMark {
 public:
  bool done() const override { return true; }
  void block(const c10::Stream&) const override {}
};

}  // namespace

DeviceStreams::DeviceStreams(c10::Device device)
    : device_(device),
      all_gather_(default_stream(device)),
      reduce_scatter_(default_stream(device)),
      copy_(default_stream(device)) {
  if (!device.is_cuda()) return;
  ZS_REQUIRE(device.has_index(), UsageError, "DeviceStreams needs a CUDA device with an index, got ",
             device.str());
  c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
  all_gather_ = impl.getStreamFromGlobalPool(device, /*isHighPriority=*/true);
  reduce_scatter_ = impl.getStreamFromGlobalPool(device, /*isHighPriority=*/true);
  copy_ = impl.getStreamFromGlobalPool(device, /*isHighPriority=*/false);
  // The pool hands streams out round-robin: with a small pool two requests can coincide. The
  // two collective streams must differ, or "wait for the other" would mean nothing.
  for (int tries = 0; tries < 64 && reduce_scatter_ == all_gather_; ++tries) {
    reduce_scatter_ = impl.getStreamFromGlobalPool(device, /*isHighPriority=*/true);
  }
  ZS_CHECK(reduce_scatter_ != all_gather_, "LibTorch's stream pool on ", device.str(),
           " returned the same stream for all-gather and reduce-scatter 64 times");
  enabled_ = true;
}

c10::Stream DeviceStreams::current() const {
  if (!enabled_) return default_stream(device_);
  return c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getStream(device_);
}

void DeviceStreams::wait(const c10::Stream& waiter, const c10::Stream& producer) const {
  if (!enabled_ || waiter == producer) return;
  c10::Event event(c10::DeviceType::CUDA);
  event.record(producer);
  event.block(waiter);
}

std::unique_ptr<StreamMark> DeviceStreams::mark(const c10::Stream& stream) const {
  if (!enabled_) return std::make_unique<DoneMark>();
  return std::make_unique<EventMark>(stream);
}

std::unique_ptr<StreamMark> DeviceStreams::copy_async(const at::Tensor& dst, const at::Tensor& src) const {
  auto describe = [](const at::Tensor& t) {
    return t.defined() ? detail::concat(c10::toString(t.scalar_type()), t.sizes(), " on ", t.device().str(),
                                        t.is_contiguous() ? "" : " (non-contiguous)")
                       : std::string("undefined");
  };
  ZS_REQUIRE(dst.defined() && src.defined() && dst.numel() == src.numel() &&
                 dst.scalar_type() == src.scalar_type() && dst.is_contiguous() && src.is_contiguous(),
             UsageError, "copy_async: dst and src must be defined, contiguous, of the same size and dtype; got dst ",
             describe(dst), ", src ", describe(src));
  if (!enabled_) {
    dst.copy_(src);
    return std::make_unique<DoneMark>();
  }
  const bool to_device = dst.device() == device_ && src.is_cpu();
  const bool to_host = src.device() == device_ && dst.is_cpu();
  ZS_REQUIRE(to_device || to_host, UsageError, "copy_async copies between the host and ", device_.str(),
             "; got dst on ", dst.device().str(), ", src on ", src.device().str());
  const at::Tensor& host = to_device ? src : dst;
  ZS_REQUIRE(host.is_pinned(), UsageError, "copy_async: the host tensor (", to_device ? "src" : "dst",
             ") is in pageable memory, which makes the copy block the host; allocate it pinned (PinnedPool)");
  wait(copy_, current());
  Use on_copy(*this, copy_);
  dst.copy_(src, /*non_blocking=*/true);
  return mark(copy_);
}

DeviceStreams::Use::Use(const DeviceStreams& streams, const c10::Stream& stream)
    : guard_(streams.enabled() ? c10::optional<c10::Stream>(stream) : c10::nullopt) {}

// ---------------------------------------------------------------------------------------------

void ReleaseQueue::release_after(std::vector<at::Tensor> buffers, std::unique_ptr<StreamMark> last_use) {
  if (last_use == nullptr || last_use->done()) return;  // `buffers` go out of scope here
  entries_.push_back(Entry{std::move(buffers), std::move(last_use)});
}

size_t ReleaseQueue::poll() {
  while (!entries_.empty() && entries_.front().mark->done()) entries_.pop_front();
  return entries_.size();
}

void ReleaseQueue::release_after_wait(const c10::Stream& stream, size_t keep) {
  while (entries_.size() > keep) {
    entries_.front().mark->block(stream);
    entries_.pop_front();
  }
}

}  // namespace zeroshard
