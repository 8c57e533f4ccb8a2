// SPDX-License-Identifier: Apache-2.0
// DeviceStreams and ReleaseQueue (zeroshard/comm/streams.h) where no GPU is needed: a CPU
// DeviceStreams is disabled and changes nothing, and the queue keeps buffers exactly until their
// marks are done, in order, or until a stream is made to wait for them. The CUDA side of both is
// exercised by the GPU tests (tests/gpu, label gpu).

#include <ATen/ops/arange.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "zeroshard/base/error.h"
#include "zeroshard/comm/streams.h"

namespace zeroshard {
namespace {

// A mark whose completion the test decides; records the streams made to wait for it.
struct FakeMark final : StreamMark {
  std::shared_ptr<bool> is_done = std::make_shared<bool>(false);
  std::shared_ptr<std::vector<c10::Stream>> blocked = std::make_shared<std::vector<c10::Stream>>();
  bool done() const override { return *is_done; }
  void block(const c10::Stream& stream) const override { blocked->push_back(stream); }
};

// A buffer and a second reference to it: use_count() tells whether the queue still holds it.
struct Buffer {
  at::Tensor probe = at::zeros({4});
  bool held() const { return probe.use_count() > 1; }
  std::vector<at::Tensor> give() const { return {probe}; }
};

c10::Stream cpu_stream() { return c10::Stream(c10::Stream::DEFAULT, c10::Device(c10::kCPU)); }

TEST(DeviceStreams, CpuIsDisabledAndChangesNothing) {
  DeviceStreams streams{c10::Device(c10::kCPU)};
  EXPECT_FALSE(streams.enabled());
  EXPECT_EQ(streams.current(), cpu_stream());
  EXPECT_EQ(streams.all_gather(), cpu_stream());
  EXPECT_EQ(streams.reduce_scatter(), cpu_stream());
  streams.wait(streams.all_gather(), streams.current());  // nothing to do, must not throw
  { DeviceStreams::Use use(streams, streams.reduce_scatter()); }
  EXPECT_TRUE(streams.mark(streams.current())->done());
}

TEST(DeviceStreams, CpuCopyAsyncIsAPlainCopyAndChecksItsArguments) {
  DeviceStreams streams{c10::Device(c10::kCPU)};
  at::Tensor src = at::arange(6, at::kFloat), dst = at::zeros({6});
  EXPECT_TRUE(streams.copy_async(dst, src)->done());
  EXPECT_TRUE(dst.equal(src));
  try {
    streams.copy_async(at::zeros({5}), src);
    ADD_FAILURE() << "a size mismatch was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("same size"), std::string::npos) << e.what();
  }
}

TEST(ReleaseQueue, DoneOrMissingMarkDropsAtOnce) {
  ReleaseQueue q;
  Buffer a, b;
  q.release_after(a.give(), nullptr);
  DeviceStreams cpu{c10::Device(c10::kCPU)};
  q.release_after(b.give(), cpu.mark(cpu.current()));
  EXPECT_FALSE(a.held());
  EXPECT_FALSE(b.held());
  EXPECT_EQ(q.pending(), 0u);
}

TEST(ReleaseQueue, KeepsBuffersUntilTheirMarksAreDoneInOrder) {
  ReleaseQueue q;
  Buffer a, b, c;
  auto ma = std::make_unique<FakeMark>(), mb = std::make_unique<FakeMark>(), mc = std::make_unique<FakeMark>();
  auto da = ma->is_done, db = mb->is_done, dc = mc->is_done;
  q.release_after(a.give(), std::move(ma));
  q.release_after(b.give(), std::move(mb));
  q.release_after(c.give(), std::move(mc));
  EXPECT_EQ(q.poll(), 3u);
  EXPECT_TRUE(a.held() && b.held() && c.held());
  *db = true;  // a later mark done before an earlier one: nothing is dropped out of order
  EXPECT_EQ(q.poll(), 3u);
  EXPECT_TRUE(a.held() && b.held());
  *da = true;
  EXPECT_EQ(q.poll(), 1u);
  EXPECT_FALSE(a.held());
  EXPECT_FALSE(b.held());
  EXPECT_TRUE(c.held());
  *dc = true;
  EXPECT_EQ(q.poll(), 0u);
  EXPECT_FALSE(c.held());
}

TEST(ReleaseQueue, ReleaseAfterWaitBlocksTheStreamOnTheOldestAndKeepsTheRest) {
  ReleaseQueue q;
  Buffer a, b, c;
  std::vector<std::shared_ptr<std::vector<c10::Stream>>> blocked;
  for (const Buffer* buf : {&a, &b, &c}) {
    auto m = std::make_unique<FakeMark>();
    blocked.push_back(m->blocked);
    q.release_after(buf->give(), std::move(m));
  }
  q.release_after_wait(cpu_stream(), /*keep=*/1);
  EXPECT_FALSE(a.held());
  EXPECT_FALSE(b.held());
  EXPECT_TRUE(c.held());
  EXPECT_EQ(q.pending(), 1u);
  ASSERT_EQ(blocked[0]->size(), 1u);
  EXPECT_EQ(blocked[0]->front(), cpu_stream());
  EXPECT_EQ(blocked[1]->size(), 1u);
  EXPECT_TRUE(blocked[2]->empty()) << "the kept entry must not make the stream wait";
  q.release_after_wait(cpu_stream());
  EXPECT_FALSE(c.held());
  EXPECT_EQ(blocked[2]->size(), 1u);
}

}  // namespace
}  // namespace zeroshard
