// SPDX-License-Identifier: Apache-2.0
// Async I/O errors that do not need a particular backend, and FaultInjectingIo over each backend:
// disk full after N bytes (the part before the limit really written), the k-th write failing,
// reads failing with EIO, short reads; AioFile's open errors and its O_DIRECT fallback (tmpfs,
// ramfs) with the warning; option errors; kAuto's log line; an engine destroyed with requests
// outstanding.

#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/aio_test_util.h"
#include "zeroshard/base/error.h"
#include "zeroshard/io/aio.h"
#include "zeroshard/io/fault_io.h"

namespace zs = zeroshard;
using zs::AioFile;
using zs::FaultInjectingIo;
using zs::IoBackend;
using zs::IoOptions;
using zs::test::Buffer;
using zs::test::expect_error;
using zs::test::kRw;

namespace {



IoOptions opts(IoBackend backend) {
  IoOptions o;
  o.backend = backend;
  o.queue_depth = 8;
  o.block_size = 16 << 10;
  return o;
}

class FaultIoTest : public ::testing::TestWithParam<IoBackend> {
 protected:
  zs::test::TempDir dir_;
};

TEST_P(FaultIoTest, DiskFullAfterBytes) {
  ZS_ENGINE_OR_SKIP(inner, opts(GetParam()));
  FaultInjectingIo io(std::move(inner));
  AioFile f(dir_.file("enospc.bin"), kRw, /*direct=*/false);
  const int64_t n = 65536;
  Buffer out = zs::test::random_buffer(3 * n, 21);
  io.fail_writes_after_bytes(100000);
  const auto a = io.submit_write(f, out.get(), n, 0);
  const auto b = io.submit_write(f, out.get() + n, n, n);          // crosses the limit
  const auto c = io.submit_write(f, out.get() + 2 * n, n, 2 * n);  // the disk stays full
  io.wait(a);
  expect_error<zs::IoError>([&] { io.wait(b); },
                            {"disk full: write of 31072 bytes at offset 100000 in " + f.path(),
                             "No space left on device (errno 28)", "injected"});
  expect_error<zs::IoError>([&] { io.wait(c); }, {"disk full", "offset 131072", f.path()});
  EXPECT_EQ(io.injected(), 2);
  // What fit before the limit is on disk.
  ASSERT_EQ(f.size(), 100000);
  Buffer back = zs::test::aligned_buffer(100000);
  io.wait(io.submit_read(f, back.get(), 100000, 0));
  EXPECT_EQ(0, std::memcmp(back.get(), out.get(), 100000));
  io.clear();
  io.wait(io.submit_write(f, out.get(), n, 0));
}

TEST_P(FaultIoTest, KthWriteAndReadsFail) {
  ZS_ENGINE_OR_SKIP(inner, opts(GetParam()));
  FaultInjectingIo io(std::move(inner));
  AioFile f(dir_.file("eio.bin"), kRw, /*direct=*/false);
  Buffer out = zs::test::random_buffer(3 * 4096, 22), back = zs::test::aligned_buffer(3 * 4096);
  io.fail_write_number(2, EIO);
  io.submit_write(f, out.get(), 4096, 0);
  io.submit_write(f, out.get() + 4096, 4096, 4096);  // fails
  io.submit_write(f, out.get() + 8192, 4096, 8192);
  expect_error<zs::IoError>([&] { io.wait_all(); },
                            {"write of 4096 bytes at offset 4096 in " + f.path(),
                             "Input/output error (errno 5)", "device error"});
  EXPECT_EQ(f.size(), 3 * 4096);  // the others were written
  io.fail_read_number(1);
  expect_error<zs::IoError>([&] { io.wait(io.submit_read(f, back.get(), 4096, 8192)); },
                            {"read of 4096 bytes at offset 8192", "errno 5"});
  io.wait(io.submit_read(f, back.get(), 4096, 8192));  // only the first read was to fail
  EXPECT_EQ(0, std::memcmp(back.get(), out.get() + 8192, 4096));
  io.fail_reads(EIO);
  for (int i = 0; i < 2; ++i) {
    expect_error<zs::IoError>([&] { io.wait(io.submit_read(f, back.get(), 4096, 0)); },
                              {"read of 4096 bytes at offset 0", "errno 5"});
  }
  io.clear();
  io.short_reads(5000);
  expect_error<zs::IoError>([&] { io.wait(io.submit_read(f, back.get(), 3 * 4096, 0)); },
                            {"file " + f.path() + " is shorter than expected: read 5000 of 12288 "
                             "bytes at offset 0 (truncated?)"});
  // The part before the cut was read: the first write's data, then the hole the failed write
  // left (it wrote nothing).
  EXPECT_EQ(0, std::memcmp(back.get(), out.get(), 4096));
  EXPECT_EQ(std::string(back.get() + 4096, 5000 - 4096), std::string(5000 - 4096, '\0'));
  io.wait(io.submit_read(f, back.get(), 4000, 0));          // short enough: not cut
}

INSTANTIATE_TEST_SUITE_P(Backends, FaultIoTest,
                         ::testing::Values(IoBackend::kIoUring, IoBackend::kLibaio,
                                           IoBackend::kThreads),
                         [](const auto& info) { return std::string(zs::to_string(info.param)); });

TEST(AioFile, MissingDirectoryNamesThePath) {
  zs::test::TempDir dir;
  const std::string path = dir.file("no/such/dir/state.bin");
  expect_error<zs::IoError>([&] { AioFile f(path, kRw, true); },
                            {"cannot open " + path, "No such file or directory",
                             "the directory " + dir.file("no/such/dir") + " does not exist"});
  expect_error<zs::IoError>([&] { AioFile f(dir.file("absent.bin"), AioFile::kRead, false); },
                            {dir.file("absent.bin"), "kCreate was not given"});
  expect_error<zs::UsageError>([&] { AioFile f(dir.file("x"), AioFile::kRead | AioFile::kCreate, false); },
                               {"kCreate and kTruncate need kReadWrite"});
}

// What AioFile does with O_DIRECT on `path` must match the kernel: accepted -> direct, no warning;
// refused -> buffered, one warning naming the path and the filesystem, and I/O still works.
void check_direct_behaviour(const std::string& path, const std::string& fs) {
  const bool accepted = zs::test::kernel_accepts_direct(path);
  testing::internal::CaptureStderr();
  std::unique_ptr<AioFile> f;
  std::unique_ptr<AioFile> again;
  try {
    f = std::make_unique<AioFile>(path, kRw, true);
    again = std::make_unique<AioFile>(path, kRw, true);
  } catch (...) {
    testing::internal::GetCapturedStderr();
    throw;
  }
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(f->direct(), accepted);
  if (accepted) {
    EXPECT_EQ(log.find("O_DIRECT refused"), std::string::npos) << log;
  } else {
    EXPECT_NE(log.find("O_DIRECT refused (EINVAL) for " + path + " on a " + fs + " filesystem"),
              std::string::npos) << log;
    EXPECT_EQ(log.find("O_DIRECT refused"), log.rfind("O_DIRECT refused")) << "warned twice: " << log;
  }
  auto io = zs::make_io_engine(opts(IoBackend::kThreads));
  Buffer out = zs::test::random_buffer(12345 + 4096, 5), back = zs::test::aligned_buffer(12345);
  // Unaligned buffer and size: allowed exactly when the file fell back to buffered I/O.
  if (accepted) {
    EXPECT_THROW(io->submit_write(*f, out.get() + 1, 12345, 0), zs::UsageError);
  } else {
    io->wait(io->submit_write(*f, out.get() + 1, 12345, 0));
    io->wait(io->submit_read(*f, back.get(), 12345, 0));
    EXPECT_EQ(0, std::memcmp(back.get(), out.get() + 1, 12345));
  }
  ::unlink(path.c_str());
}

TEST(AioFile, DirectOnDevShm) {
  if (zs::filesystem_type("/dev/shm") != "tmpfs") GTEST_SKIP() << "/dev/shm is not a tmpfs here";
  const std::string path = "/dev/shm/zs-aio-test-" + std::to_string(::getpid());
  check_direct_behaviour(path, "tmpfs");
  if (zs::test::kernel_accepts_direct(path)) {
    GTEST_SKIP() << "tmpfs takes O_DIRECT on this kernel (Linux >= 6.6): AioFile used it; the "
                    "fallback is exercised by DirectFallbackOnRamfs";
  }
}

TEST(AioFile, DirectFallbackOnRamfs) {
  zs::test::PrivateMount ramfs("ramfs", "");
  if (!ramfs.ok()) GTEST_SKIP() << "no ramfs (which refuses O_DIRECT) to test with: " << ramfs.why();
  ASSERT_FALSE(zs::test::kernel_accepts_direct(ramfs.file("probe")));
  check_direct_behaviour(ramfs.file("state.bin"), "ramfs");
}

TEST(IoEngine, BadOptionsNameTheField) {
  IoOptions o;
  o.queue_depth = 0;
  expect_error<zs::UsageError>([&] { zs::make_io_engine(o); }, {"IoOptions.queue_depth = 0"});
  o = IoOptions();
  o.block_size = 1000;
  expect_error<zs::UsageError>([&] { zs::make_io_engine(o); },
                               {"IoOptions.block_size = 1000", "multiple of 4096"});
  o = IoOptions();
  o.threads = 0;
  expect_error<zs::UsageError>([&] { zs::make_io_engine(o); }, {"IoOptions.threads = 0"});
}

TEST(IoEngine, AutoLogsItsChoice) {
  testing::internal::CaptureStdout();
  auto io = zs::make_io_engine(IoOptions());
  const std::string log = testing::internal::GetCapturedStdout();
  ASSERT_NE(io->backend(), IoBackend::kAuto);
  EXPECT_EQ(io->options().backend, io->backend());
  EXPECT_NE(log.find(std::string("async I/O: ") + zs::to_string(io->backend()) + " (queue depth 32"),
            std::string::npos) << log;
  // Every backend ahead of the chosen one is named with its reason.
  if (io->backend() != IoBackend::kIoUring) {
    EXPECT_NE(log.find("not used: io_uring: "), std::string::npos) << log;
  }
}

// A backend compiled out (library missing at configure time, or ZS_WITH_LIBURING/LIBAIO=OFF) is an
// IoError saying what to install; kAuto names it among those not used.
TEST(IoEngine, CompiledOutBackendsSayWhatToInstall) {
  const std::vector<std::pair<IoBackend, std::string>> backends = {
      {IoBackend::kIoUring, "built without liburing: install liburing-dev and reconfigure"},
      {IoBackend::kLibaio, "built without libaio: install libaio-dev and reconfigure"}};
  int compiled_out = 0;
  for (const auto& [backend, text] : backends) {
    IoOptions o;
    o.backend = backend;
    try {
      zs::make_io_engine(o);
    } catch (const zs::IoError& e) {
      if (std::string(e.what()).find("built without") == std::string::npos) continue;
      ++compiled_out;
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
      testing::internal::CaptureStdout();
      zs::make_io_engine(IoOptions());
      const std::string log = testing::internal::GetCapturedStdout();
      EXPECT_NE(log.find(std::string(zs::to_string(backend)) + ": " + zs::to_string(backend) +
                         " backend: " + text),
                std::string::npos) << log;
    }
  }
  if (compiled_out == 0) GTEST_SKIP() << "io_uring and libaio are both built in";
}

TEST(IoEngine, DestroyedWithRequestsOutstanding) {
  zs::test::TempDir dir;
  AioFile f(dir.file("abandoned.bin"), kRw, false);
  Buffer out = zs::test::random_buffer(4 << 20, 1);
  testing::internal::CaptureStderr();
  {
    IoOptions o = opts(IoBackend::kThreads);
    o.queue_depth = 2;
    auto io = zs::make_io_engine(o);
    io->submit_write(f, out.get(), 4 << 20, 0);
  }
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("destroyed with 1 request(s) not waited for"), std::string::npos) << log;
}

}  // namespace
