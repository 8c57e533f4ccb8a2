// SPDX-License-Identifier: Apache-2.0
// PinnedPool: alignment, size classes, reuse of freed blocks, byte accounting into MemoryStats,
// many threads allocating and freeing, pin=false, the pool destroyed before its tensors, page
// locking seen in /proc/self/status (VmLck), and the refused-mlock path: on a thread without
// CAP_IPC_LOCK (dropped for that thread only when the test runs as root) and with RLIMIT_MEMLOCK
// lowered, the pool must warn once (naming `ulimit -l`, the limit and the bytes) and go on unlocked.

#include <ATen/Context.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/error_text.h"
#include "common/sanitizer.h"
#include "zeroshard/base/error.h"
#include "zeroshard/io/pinned_pool.h"
#include "zeroshard/core/memory_stats.h"

namespace zs = zeroshard;

namespace {

constexpr int64_t kKiB = 1024, kMiB = 1024 * 1024;

template <class Err>
std::string error_message(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Err& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

uintptr_t address(const torch::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); }

// This process's locked memory (VmLck in /proc/self/status), in bytes.
int64_t locked_bytes() {
  std::ifstream f("/proc/self/status");
  std::string key;
  while (f >> key) {
    if (key == "VmLck:") {
      int64_t kb = 0;
      f >> kb;
      return kb * kKiB;
    }
    f.ignore(1 << 20, '\n');
  }
  ADD_FAILURE() << "no VmLck in /proc/self/status";
  return -1;
}

bool cuda_mode() { return at::globalContext().hasCUDA(); }

TEST(PinnedPool, ModeFollowsPinAndCuda) {
  zs::PinnedPool pinned(true), plain(false);
  EXPECT_EQ(plain.mode(), "unpinned (pin_memory=false)");
  if (cuda_mode()) {
    EXPECT_EQ(pinned.mode(), "cuda-pinned");
    EXPECT_TRUE(pinned.empty(1000, torch::kFloat).is_pinned());
  } else {
    // "unlocked (...)" only once an allocation has been refused.
    EXPECT_EQ(pinned.mode(), "mlock");
  }
}

TEST(PinnedPool, TensorsAreAlignedContiguousAndWritable) {
  for (bool pin : {true, false}) {
    zs::PinnedPool pool(pin);
    for (torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16, torch::kByte, torch::kDouble}) {
      for (int64_t numel : {int64_t{0}, int64_t{1}, int64_t{4097}, int64_t{300000}}) {
        torch::Tensor t = pool.empty(numel, dtype);
        EXPECT_EQ(address(t) % zs::kDirectAlignment, 0u) << pin << " " << dtype << " " << numel;
        EXPECT_EQ(t.numel(), numel);
        EXPECT_EQ(t.dim(), 1);
        EXPECT_EQ(t.scalar_type(), dtype);
        EXPECT_TRUE(t.is_contiguous());
        EXPECT_TRUE(t.device().is_cpu());
        t.fill_(1);  // every byte of the request is ours
        EXPECT_EQ(t.to(torch::kDouble).sum().item<double>(), static_cast<double>(numel));
      }
    }
  }
}

TEST(PinnedPool, SizeClassesArePowersOfTwoFrom64KiB) {
  using P = zs::PinnedPool;
  EXPECT_EQ(P::kMinBlockBytes, 64 * kKiB);
  EXPECT_EQ(P::size_class(0), 64 * kKiB);
  EXPECT_EQ(P::size_class(1), 64 * kKiB);
  EXPECT_EQ(P::size_class(64 * kKiB), 64 * kKiB);
  EXPECT_EQ(P::size_class(64 * kKiB + 1), 128 * kKiB);
  EXPECT_EQ(P::size_class(kMiB), kMiB);
  EXPECT_EQ(P::size_class(kMiB + 1), 2 * kMiB);
  EXPECT_EQ(P::size_class(int64_t{1} << 62), int64_t{1} << 62);
  EXPECT_CONTAINS(error_message<zs::UsageError>([] { P::size_class(-1); }), "-1 bytes is outside [0, 2^62]");

  zs::PinnedPool pool(false);
  torch::Tensor a = pool.empty(100 * kKiB / 4, torch::kFloat);  // 100 KiB -> 128 KiB
  torch::Tensor b = pool.empty(10, torch::kFloat);              // 40 B -> 64 KiB
  torch::Tensor c = pool.empty(kMiB, torch::kByte);             // exactly 1 MiB
  EXPECT_EQ(pool.bytes_reserved(), 128 * kKiB + 64 * kKiB + kMiB);
  EXPECT_EQ(pool.bytes_in_use(), pool.bytes_reserved());

  EXPECT_CONTAINS(error_message<zs::UsageError>([&] { pool.empty(-5, torch::kFloat); }), "numel = -5 is negative");
  EXPECT_CONTAINS(error_message<zs::UsageError>([&] { pool.empty(int64_t{1} << 61, torch::kDouble); }),
                  "exceed 2^62 bytes");
  EXPECT_CONTAINS(error_message<zs::UsageError>([&] { pool.empty(1, torch::ScalarType::Undefined); }),
                  "dtype is Undefined");
  EXPECT_EQ(pool.bytes_in_use(), 128 * kKiB + 64 * kKiB + kMiB) << "a refused request took a block";
}

TEST(PinnedPool, FreedBlockIsReusedBySameClassOnly) {
  zs::PinnedPool pool(false);
  torch::Tensor t = pool.empty(1000, torch::kFloat);  // 64 KiB class
  const uintptr_t first = address(t);
  t = torch::Tensor();
  EXPECT_EQ(pool.bytes_in_use(), 0);
  EXPECT_EQ(pool.bytes_reserved(), 64 * kKiB) << "the freed block stays cached";

  torch::Tensor same = pool.empty(16 * kKiB, torch::kFloat);  // 64 KiB: the same class
  EXPECT_EQ(address(same), first);
  EXPECT_EQ(pool.blocks_reused(), 1);
  torch::Tensor other = pool.empty(16 * kKiB + 1, torch::kFloat);  // 128 KiB: a new block
  EXPECT_NE(address(other), first);
  EXPECT_EQ(pool.blocks_reused(), 1);
  EXPECT_EQ(pool.bytes_reserved(), 64 * kKiB + 128 * kKiB);

  // A view keeps the block in use after the tensor it came from is gone.
  torch::Tensor view = same.narrow(0, 10, 100);
  same = torch::Tensor();
  EXPECT_EQ(pool.bytes_in_use(), 64 * kKiB + 128 * kKiB);
  torch::Tensor while_viewed = pool.empty(1, torch::kFloat);
  EXPECT_NE(address(while_viewed), first);
  view = torch::Tensor();
  while_viewed = torch::Tensor();
  torch::Tensor again = pool.empty(1, torch::kByte);  // LIFO: the last block returned
  EXPECT_EQ(pool.blocks_reused(), 2);
  EXPECT_EQ(pool.bytes_reserved(), 2 * 64 * kKiB + 128 * kKiB);
}

TEST(PinnedPool, BytesAreAccountedInMemoryStats) {
  zs::MemoryStats mem;
  const auto pinned = [&] { return mem.current(zs::MemCategory::kPinnedHost); };
  torch::Tensor survivor;
  {
    zs::PinnedPool pool(true, &mem);
    torch::Tensor a = pool.empty(kMiB / 4, torch::kFloat);  // 1 MiB
    torch::Tensor b = pool.empty(1, torch::kFloat);         // 64 KiB
    survivor = pool.empty(3 * kMiB, torch::kByte);          // 4 MiB
    EXPECT_EQ(pinned(), kMiB + 64 * kKiB + 4 * kMiB);
    EXPECT_EQ(pinned(), pool.bytes_reserved());
    a = torch::Tensor();
    EXPECT_EQ(pinned(), kMiB + 64 * kKiB + 4 * kMiB) << "a cached block is still held";
    EXPECT_EQ(pool.bytes_in_use(), 64 * kKiB + 4 * kMiB);
    pool.release_cached();
    EXPECT_EQ(pinned(), 64 * kKiB + 4 * kMiB);
    EXPECT_EQ(pool.bytes_reserved(), 64 * kKiB + 4 * kMiB);
    EXPECT_EQ(mem.peak(zs::MemCategory::kPinnedHost), kMiB + 64 * kKiB + 4 * kMiB);
    b = torch::Tensor();
    // The pool goes first; `survivor` is still in use.
  }
  EXPECT_EQ(pinned(), 0) << "a destroyed pool takes all its bytes out of the stats";
  ASSERT_TRUE(survivor.defined());
  survivor.fill_(7);  // still valid memory
  EXPECT_EQ(survivor[3 * kMiB - 1].item<int>(), 7);
  survivor = torch::Tensor();  // freed now, without touching `mem` or the pool
  EXPECT_EQ(pinned(), 0);
}

TEST(PinnedPool, ManyThreadsAllocateAndFree) {
  zs::MemoryStats mem;
  zs::PinnedPool pool(true, &mem);
  constexpr int kThreads = 8, kIters = 400;
  std::atomic<int64_t> bad_alignment{0}, corrupted{0};
  std::vector<std::thread> threads;
  for (int id = 0; id < kThreads; ++id) {
    threads.emplace_back([&, id] {
      std::mt19937 rng(id);
      std::vector<torch::Tensor> held;
      for (int it = 0; it < kIters; ++it) {
        const int64_t numel = int64_t{1000} << (rng() % 6);  // 4 KB .. 128 KB: classes 64K, 128K
        torch::Tensor t = pool.empty(numel, torch::kInt);
        if (address(t) % zs::kDirectAlignment != 0) ++bad_alignment;
        t.fill_(id * 1000 + it);
        held.push_back(t);
        if (held.size() > 3 || rng() % 2) {
          // Every element must still hold what this thread wrote: nobody else got the block.
          const torch::Tensor& old = held.front();
          const int value = old[0].item<int>();
          if (!old.eq(value).all().item<bool>() || value / 1000 != id) ++corrupted;
          held.erase(held.begin());
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(bad_alignment.load(), 0);
  EXPECT_EQ(corrupted.load(), 0);
  EXPECT_EQ(pool.bytes_in_use(), 0);
  EXPECT_GT(pool.blocks_reused(), kThreads * kIters / 2) << "blocks are not being reused";
  EXPECT_EQ(mem.current(zs::MemCategory::kPinnedHost), pool.bytes_reserved());
  // At most 4 tensors per thread alive at once: the cache never needs more than that many blocks
  // of each class.
  EXPECT_LE(pool.bytes_reserved(), kThreads * 4 * (64 + 128) * kKiB);
  pool.release_cached();
  EXPECT_EQ(pool.bytes_reserved(), 0);
  EXPECT_EQ(mem.current(zs::MemCategory::kPinnedHost), 0);
}

TEST(PinnedPool, MlockLocksPagesAndPinFalseDoesNot) {
  if (cuda_mode()) GTEST_SKIP() << "CUDA is available: blocks come from cudaHostAlloc, not mlock";
  if (ZS_TEST_ASAN) GTEST_SKIP() << "AddressSanitizer build: the sanitizer makes mlock a no-op that reports success";
  const int64_t before = locked_bytes();
  {
    zs::PinnedPool plain(false);
    torch::Tensor t = plain.empty(kMiB, torch::kByte);
    EXPECT_EQ(locked_bytes(), before) << "pin=false must not lock";
    EXPECT_EQ(plain.mode(), "unpinned (pin_memory=false)");
  }
  zs::PinnedPool pool(true);
  torch::Tensor t = pool.empty(kMiB, torch::kByte);
  if (pool.mode() != "mlock") {
    GTEST_SKIP() << "this process may not lock 1 MiB (" << pool.mode() << "); the refused path is "
                 << "tested by MlockRefusedWarnsOnceAndContinuesUnlocked";
  }
  EXPECT_EQ(locked_bytes(), before + kMiB);
  t = torch::Tensor();
  EXPECT_EQ(locked_bytes(), before + kMiB) << "a cached block stays locked";
  pool.release_cached();
  EXPECT_EQ(locked_bytes(), before) << "released blocks are munlock'd";
}

// ---- the refused mlock ----

// CAP_IPC_LOCK lets mlock ignore RLIMIT_MEMLOCK (root has it). Capabilities are per thread on
// Linux, so the test drops it from the effective set of one thread only (raw capget/capset: no
// libcap needed).
bool thread_has_ipc_lock() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &hdr, data) != 0) return false;
  return (data[CAP_TO_INDEX(CAP_IPC_LOCK)].effective & CAP_TO_MASK(CAP_IPC_LOCK)) != 0;
}

// Returns "" on success, else why not.
std::string drop_ipc_lock_for_this_thread() {
  __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &hdr, data) != 0) return std::string("capget: ") + strerror(errno);
  data[CAP_TO_INDEX(CAP_IPC_LOCK)].effective &= ~CAP_TO_MASK(CAP_IPC_LOCK);
  if (syscall(SYS_capset, &hdr, data) != 0) return std::string("capset: ") + strerror(errno);
  if (thread_has_ipc_lock()) return "capset succeeded but CAP_IPC_LOCK is still effective";
  return "";
}

// Lowers the soft RLIMIT_MEMLOCK for the process while in scope.
class ScopedMemlockLimit {
 public:
  explicit ScopedMemlockLimit(rlim_t soft) {
    getrlimit(RLIMIT_MEMLOCK, &old_);
    rlimit lim = old_;
    lim.rlim_cur = soft;
    ok_ = setrlimit(RLIMIT_MEMLOCK, &lim) == 0;
  }
  ~ScopedMemlockLimit() { setrlimit(RLIMIT_MEMLOCK, &old_); }
  bool ok() const { return ok_; }

 private:
  rlimit old_{};
  bool ok_ = false;
};

struct RefusedCase {
  const char* name;
  rlim_t limit;
  const char* errno_text;  // EPERM at a zero limit, ENOMEM above it
};

class PinnedPoolRefused : public testing::TestWithParam<RefusedCase> {};

TEST_P(PinnedPoolRefused, MlockRefusedWarnsOnceAndContinuesUnlocked) {
  if (ZS_TEST_ASAN) GTEST_SKIP() << "AddressSanitizer build: the sanitizer makes mlock a no-op that never refuses";
  if (cuda_mode()) GTEST_SKIP() << "CUDA is available: blocks come from cudaHostAlloc, not mlock";
  const RefusedCase c = GetParam();
  const int64_t locked_before = locked_bytes();
  std::string skip, mode;
  int64_t bytes_in_use = -1;
  bool aligned = true;
  testing::internal::CaptureStderr();
  {
    ScopedMemlockLimit limit(c.limit);
    std::thread worker([&] {
      if (!limit.ok()) {
        skip = "cannot lower RLIMIT_MEMLOCK";
        return;
      }
      if (thread_has_ipc_lock()) {
        const std::string why = drop_ipc_lock_for_this_thread();
        if (!why.empty()) {
          skip = "running with CAP_IPC_LOCK (root), which makes mlock ignore the limit, and could "
                 "not drop it for the test thread: " + why;
          return;
        }
      }
      zs::PinnedPool pool(true);
      std::vector<torch::Tensor> held;
      for (int i = 0; i < 3; ++i) held.push_back(pool.empty(kMiB, torch::kByte));
      held.push_back(pool.empty(10, torch::kFloat));
      for (const auto& t : held) {
        aligned = aligned && address(t) % zs::kDirectAlignment == 0;
        t.fill_(1);
      }
      mode = pool.mode();
      bytes_in_use = pool.bytes_in_use();
    });
    worker.join();
  }
  const std::string err = testing::internal::GetCapturedStderr();
  if (!skip.empty()) GTEST_SKIP() << skip;

  const std::string limit_text = std::to_string(c.limit) + " bytes";
  EXPECT_EQ(mode.rfind("unlocked (mlock refused: ", 0), 0u) << mode;
  EXPECT_CONTAINS(mode, c.errno_text);
  EXPECT_CONTAINS(mode, "RLIMIT_MEMLOCK " + limit_text);
  EXPECT_CONTAINS(mode, "asked 1048576 bytes");
  EXPECT_TRUE(aligned);
  EXPECT_EQ(bytes_in_use, 3 * kMiB + 64 * kKiB) << "the pool must go on with unlocked blocks";
  EXPECT_EQ(locked_bytes(), locked_before);

  size_t warnings = 0;
  for (size_t at = err.find("PinnedPool: mlock of"); at != std::string::npos;
       at = err.find("PinnedPool: mlock of", at + 1)) {
    ++warnings;
  }
  EXPECT_EQ(warnings, 1u) << "stderr:\n" << err;
  std::printf("[ refused ] mode(): %s\n[ refused ] stderr: %s", mode.c_str(), err.c_str());
  EXPECT_CONTAINS(err, "mlock of 1048576 bytes refused");
  EXPECT_CONTAINS(err, "ulimit -l");
  EXPECT_CONTAINS(err, "RLIMIT_MEMLOCK");
  EXPECT_CONTAINS(err, "is " + limit_text);
}

INSTANTIATE_TEST_SUITE_P(Limits, PinnedPoolRefused,
                         testing::Values(RefusedCase{"ZeroLimit", 0, "Operation not permitted"},
                                         RefusedCase{"SmallLimit", 64 * 1024, "Cannot allocate memory"}),
                         [](const testing::TestParamInfo<RefusedCase>& i) { return i.param.name; });

}  // namespace
