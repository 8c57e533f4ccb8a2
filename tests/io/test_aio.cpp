// SPDX-License-Identifier: Apache-2.0
// The async I/O engine, for each backend that can start here (the others skip naming why):
// random data round-trips through write + read (buffered at sizes and offsets off the block size,
// O_DIRECT aligned), many requests in flight, queue depth 1, several threads on one engine;
// errors: O_DIRECT alignment, a read-only file, a truncated file (short read), a directory read
// (the kernel's errno text), a file size limit (EFBIG after a partial write, which must be
// resubmitted), a real full disk (a small private tmpfs; needs CAP_SYS_ADMIN) for writes and
// for AioFile::allocate. Failure injection (FaultInjectingIo) is in test_aio_faults.cpp.

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "io/aio_test_util.h"
#include "zeroshard/base/error.h"
#include "zeroshard/io/aio.h"

namespace zs = zeroshard;
using zs::AioFile;
using zs::IoBackend;
using zs::IoOptions;
using zs::test::Buffer;
using zs::test::expect_error;
using zs::test::kRw;

namespace {



// The file's bytes, read with plain iostreams (independent of the engine).
std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

class AioTest : public ::testing::TestWithParam<IoBackend> {
 protected:
  IoOptions opts(int queue_depth, int64_t block_size) const {
    IoOptions o;
    o.backend = GetParam();
    o.queue_depth = queue_depth;
    o.block_size = block_size;
    o.threads = 3;
    return o;
  }
  zs::test::TempDir dir_;
};

TEST_P(AioTest, BufferedRoundTripAtUnalignedSizes) {
  ZS_ENGINE_OR_SKIP(io, opts(8, 64 << 10));
  EXPECT_EQ(io->backend(), GetParam());
  const std::vector<int64_t> sizes = {1, 4095, 4097, 65535, 65537, 3 * 65536 + 123, 1000003};
  AioFile f(dir_.file("buffered.bin"), kRw, /*direct=*/false);
  std::vector<Buffer> data;
  std::vector<int64_t> offsets;
  int64_t offset = 7;
  for (size_t i = 0; i < sizes.size(); ++i) {
    data.push_back(zs::test::random_buffer(sizes[i], i + 1));
    offsets.push_back(offset);
    io->wait(io->submit_write(f, data[i].get(), sizes[i], offset));
    offset += sizes[i];
  }
  EXPECT_EQ(f.size(), offset);
  const std::string disk = file_bytes(f.path());
  for (size_t i = 0; i < sizes.size(); ++i) {
    Buffer back = zs::test::aligned_buffer(sizes[i]);
    io->wait(io->submit_read(f, back.get(), sizes[i], offsets[i]));
    EXPECT_EQ(0, std::memcmp(back.get(), data[i].get(), sizes[i])) << "size " << sizes[i];
    EXPECT_EQ(0, std::memcmp(disk.data() + offsets[i], data[i].get(), sizes[i])) << "on disk";
  }
}

TEST_P(AioTest, DirectRoundTripAligned) {
  ZS_ENGINE_OR_SKIP(io, opts(8, 64 << 10));
  AioFile f(dir_.file("direct.bin"), kRw, /*direct=*/true);
  if (!f.direct()) {
    GTEST_SKIP() << dir_.path() << " (" << zs::filesystem_type(dir_.path())
                 << ") refuses O_DIRECT; set ZS_TEST_TMPDIR to a directory on a disk";
  }
  const std::vector<int64_t> sizes = {4096, 65536, 5 * 65536 + 3 * 4096, 4 << 20};
  // Half the file preallocated (writes into unwritten extents), the rest extending it.
  f.allocate(3 << 20);
  EXPECT_EQ(f.size(), 3 << 20);
  int64_t offset = 4096;
  for (size_t i = 0; i < sizes.size(); ++i) {
    Buffer out = zs::test::random_buffer(sizes[i], 100 + i);
    Buffer back = zs::test::aligned_buffer(sizes[i]);
    io->wait(io->submit_write(f, out.get(), sizes[i], offset));
    io->wait(io->submit_read(f, back.get(), sizes[i], offset));
    EXPECT_EQ(0, std::memcmp(back.get(), out.get(), sizes[i])) << "size " << sizes[i];
    const std::string disk = file_bytes(f.path());
    ASSERT_GE(static_cast<int64_t>(disk.size()), offset + sizes[i]);
    EXPECT_EQ(0, std::memcmp(disk.data() + offset, out.get(), sizes[i])) << "on disk";
    offset += sizes[i];
  }
}

// 60 requests of varied sizes submitted before any wait, with 4 pieces in flight at most; waited
// in reverse order, then read back all at once and waited with wait_all().
TEST_P(AioTest, ManyRequestsInFlight) {
  ZS_ENGINE_OR_SKIP(io, opts(4, 16 << 10));
  AioFile f(dir_.file("many.bin"), kRw, /*direct=*/false);
  std::vector<Buffer> out, back;
  std::vector<int64_t> sizes, offsets;
  std::vector<zs::IoEngine::Handle> handles;
  int64_t offset = 0;
  for (int i = 0; i < 60; ++i) {
    sizes.push_back(1 + (i * 7919) % (200 << 10));
    offsets.push_back(offset);
    out.push_back(zs::test::random_buffer(sizes.back(), 1000 + i));
    back.push_back(zs::test::aligned_buffer(sizes.back()));
    handles.push_back(io->submit_write(f, out.back().get(), sizes.back(), offset));
    offset += sizes.back() + 100;  // holes between the requests
  }
  for (int i = 59; i >= 0; --i) io->wait(handles[i]);
  for (int i = 0; i < 60; ++i) io->submit_read(f, back[i].get(), sizes[i], offsets[i]);
  io->wait_all();
  for (int i = 0; i < 60; ++i) {
    EXPECT_EQ(0, std::memcmp(back[i].get(), out[i].get(), sizes[i])) << "request " << i;
  }
  expect_error<zs::UsageError>([&] { io->wait(handles[0]); }, {"no such request"});
}

TEST_P(AioTest, QueueDepthOne) {
  ZS_ENGINE_OR_SKIP(io, opts(1, 4096));
  AioFile f(dir_.file("qd1.bin"), kRw, /*direct=*/false);
  const int64_t n = (1 << 20) + 100;  // 257 pieces, one at a time
  Buffer out = zs::test::random_buffer(n, 7), back = zs::test::aligned_buffer(n);
  const auto w = io->submit_write(f, out.get(), n, 0);
  const auto r0 = io->submit_read(f, back.get(), 0, 0);  // empty request: completes at once
  io->wait(w);
  io->wait(r0);
  io->wait(io->submit_read(f, back.get(), n, 0));
  EXPECT_EQ(0, std::memcmp(back.get(), out.get(), n));
}

// Four threads submit and wait their own requests on one engine.
TEST_P(AioTest, SeveralThreadsOnOneEngine) {
  ZS_ENGINE_OR_SKIP(io, opts(8, 16 << 10));
  AioFile f(dir_.file("threads.bin"), kRw, /*direct=*/false);
  const int64_t n = 300000;
  std::vector<int> mismatches(4, -1);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Buffer out = zs::test::random_buffer(n, 50 + t), back = zs::test::aligned_buffer(n);
      for (int rep = 0; rep < 5; ++rep) {
        io->wait(io->submit_write(f, out.get(), n, t * n));
        io->wait(io->submit_read(f, back.get(), n, t * n));
      }
      mismatches[t] = std::memcmp(back.get(), out.get(), n) != 0;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

TEST_P(AioTest, DirectAlignmentAndReadOnlyAreUsageErrors) {
  ZS_ENGINE_OR_SKIP(io, opts(8, 64 << 10));
  AioFile f(dir_.file("align.bin"), kRw, /*direct=*/true);
  if (!f.direct()) GTEST_SKIP() << dir_.path() << " refuses O_DIRECT";
  Buffer buf = zs::test::aligned_buffer(3 * 4096);
  std::ostringstream addr;
  addr << static_cast<const void*>(buf.get() + 1);
  expect_error<zs::UsageError>([&] { io->submit_write(f, buf.get() + 1, 4096, 0); },
                               {f.path(), "O_DIRECT", "buffer address " + addr.str(), "4096"});
  expect_error<zs::UsageError>([&] { io->submit_read(f, buf.get(), 4096, 100); },
                               {f.path(), "offset 100", "the offset is not"});
  expect_error<zs::UsageError>([&] { io->submit_write(f, buf.get(), 1000, 4096); },
                               {f.path(), "size 1000", "the size is not"});
  io->wait(io->submit_write(f, buf.get(), 4096, 0));
  AioFile ro(f.path(), AioFile::kRead, /*direct=*/false);
  expect_error<zs::UsageError>([&] { io->submit_write(ro, buf.get(), 10, 0); },
                               {ro.path(), "read-only"});
}

TEST_P(AioTest, TruncatedFileIsAShortReadNamingFileAndOffset) {
  ZS_ENGINE_OR_SKIP(io, opts(8, 64 << 10));
  AioFile f(dir_.file("truncated.bin"), kRw, /*direct=*/false);
  const int64_t n = 3 * 65536;
  Buffer out = zs::test::random_buffer(n, 3), back = zs::test::aligned_buffer(n);
  io->wait(io->submit_write(f, out.get(), n, 0));
  f.truncate(100000);
  expect_error<zs::IoError>([&] { io->wait(io->submit_read(f, back.get(), n, 0)); },
                            {"file " + f.path() + " is shorter than expected: read 100000 of " +
                             std::to_string(n) + " bytes at offset 0 (truncated?)"});
  expect_error<zs::IoError>([&] { io->wait(io->submit_read(f, back.get(), 2 * 65536, 65536)); },
                            {"read 34464 of 131072 bytes at offset 65536"});
  // The engine stays usable, and the bytes before the end were read.
  io->wait(io->submit_read(f, back.get(), 100000, 0));
  EXPECT_EQ(0, std::memcmp(back.get(), out.get(), 100000));
}

TEST_P(AioTest, KernelErrorNamesFileOffsetAndErrno) {
  ZS_ENGINE_OR_SKIP(io, opts(8, 64 << 10));
  // Reading a directory: pread and io_uring say EISDIR; io_submit refuses a file without async
  // read support with EINVAL.
  AioFile d(dir_.path(), AioFile::kRead, /*direct=*/false);
  Buffer buf = zs::test::aligned_buffer(4096);
  const std::string errno_text = GetParam() == IoBackend::kLibaio ? "Invalid argument (errno 22)"
                                                                   : "Is a directory (errno 21)";
  expect_error<zs::IoError>([&] { io->wait(io->submit_read(d, buf.get(), 4096, 8192)); },
                            {"read of 4096 bytes at offset 8192 in " + dir_.path() + " failed: " +
                             errno_text});
}

// A write crossing the process file size limit (RLIMIT_FSIZE) is cut short by the kernel; the
// engine resubmits the rest, which fails with EFBIG exactly at the limit.
TEST_P(AioTest, FileSizeLimitAfterPartialWrite) {
  ZS_ENGINE_OR_SKIP(io, opts(8, 1 << 20));
  const rlim_t limit = 3 << 19;  // 1.5 MiB
  rlimit old{};
  ASSERT_EQ(0, getrlimit(RLIMIT_FSIZE, &old));
  if (old.rlim_max != RLIM_INFINITY && old.rlim_max < limit) GTEST_SKIP() << "hard limit too low";
  AioFile f(dir_.file("fsize.bin"), kRw, /*direct=*/false);
  Buffer out = zs::test::random_buffer(2 << 20, 9);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit low = old;
  low.rlim_cur = limit;
  ASSERT_EQ(0, setrlimit(RLIMIT_FSIZE, &low));
  const auto h = io->submit_write(f, out.get(), 2 << 20, 0);
  std::string what;
  try {
    io->wait(h);
  } catch (const zs::IoError& e) {
    what = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_NE(what.find("file too large: write of 524288 bytes at offset 1572864 in " + f.path()),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("File too large (errno 27)"), std::string::npos) << what;
  EXPECT_EQ(f.size(), int64_t{limit});
  EXPECT_EQ(0, std::memcmp(file_bytes(f.path()).data(), out.get(), limit));
}

// A real full disk: a 256 KiB tmpfs mounted in a private mount namespace.
TEST_P(AioTest, RealDiskFull) {
  ZS_ENGINE_OR_SKIP(io, opts(8, 64 << 10));
  zs::test::PrivateMount small("tmpfs", "size=256k");
  if (!small.ok()) GTEST_SKIP() << "no small filesystem to fill: " << small.why();
  AioFile f(small.file("full.bin"), kRw, /*direct=*/false);
  Buffer out = zs::test::random_buffer(1 << 20, 11);
  expect_error<zs::IoError>([&] { io->wait(io->submit_write(f, out.get(), 1 << 20, 0)); },
                            {"disk full: write of", "in " + f.path(), "at offset",
                             "No space left on device (errno 28)"});
  f.truncate(0);
  expect_error<zs::IoError>([&] { f.allocate(1 << 20); },
                            {"disk full: reserving 1048576 bytes for " + f.path(),
                             "No space left on device (errno 28)"});
}

INSTANTIATE_TEST_SUITE_P(Backends, AioTest,
                         ::testing::Values(IoBackend::kIoUring, IoBackend::kLibaio,
                                           IoBackend::kThreads),
                         [](const auto& info) { return std::string(zs::to_string(info.param)); });

}  // namespace
