// SPDX-License-Identifier: Apache-2.0
// Reserving NVMe shard files on a filesystem without fallocate. This binary interposes
// posix_fallocate (and its 64-bit name) to answer EOPNOTSUPP or EINVAL as such filesystems do, and
// checks that ShardStore::add still refuses a shard larger than the drive's free space, naming the
// file and saying the drive is too small, and still accepts one that fits. Before, both answers
// were taken as success: the oversized shard was accepted and the drive ran out mid-training.

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/statvfs.h>

#include <atomic>
#include <cerrno>
#include <filesystem>

#include "common/test_util.h"
#include "zeroshard/base/error.h"
#include "zeroshard/io/reserve_space.h"
#include "zeroshard/store/shard_store.h"

namespace zs = zeroshard;
namespace fs = std::filesystem;

namespace {
std::atomic<int> g_fallocate_error{0};  // 0: the real posix_fallocate
}  // namespace

extern "C" int posix_fallocate(int fd, off_t offset, off_t len) {
  using Fn = int (*)(int, off_t, off_t);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "posix_fallocate"));
  const int e = g_fallocate_error.load();
  return e != 0 ? e : real(fd, offset, len);
}

extern "C" int posix_fallocate64(int fd, off_t offset, off_t len) {
  using Fn = int (*)(int, off_t, off_t);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "posix_fallocate64"));
  const int e = g_fallocate_error.load();
  return e != 0 ? e : real(fd, offset, len);
}

namespace {

class NoFallocate : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    dir_ = (fs::current_path() / "reserve_space_test").string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    g_fallocate_error = GetParam();
  }
  void TearDown() override {
    g_fallocate_error = 0;
    fs::remove_all(dir_);
  }
  zs::StoreOptions options() const {
    zs::StoreOptions o;
    o.target = zs::OffloadTarget::kNvme;
    o.nvme_path = dir_;
    return o;
  }
  int64_t free_bytes() const {
    struct statvfs st {};
    EXPECT_EQ(::statvfs(dir_.c_str(), &st), 0);
    return static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
  }
  std::string dir_;
};

TEST_P(NoFallocate, ShardLargerThanTheDriveIsRefused) {
  zs::ShardStore store(options(), 0, nullptr);
  const int64_t numel = (free_bytes() + (int64_t{1} << 30)) / 4;  // 1 GiB more than is free
  const std::string err = zs::test::error_text_of<zs::IoError>([&] { store.add("h.0", numel); });
  EXPECT_NE(err.find("/zeroshard-params-rank0/0-h.0.param' (parameter shard of unit 'h.0', rank 0): No space left on "
                     "device (errno 28) - the drive under offload.nvme_path is too small for the parameter shards"),
            std::string::npos)
      << err;
  // The refused file is not left behind holding a name (or blocks) on the drive.
  EXPECT_FALSE(fs::exists(dir_ + "/zeroshard-params-rank0/0-h.0.param"));
}

TEST_P(NoFallocate, ShardThatFitsIsAccepted) {
  zs::ShardStore store(options(), 0, nullptr);
  EXPECT_EQ(store.add("h.0", 1 << 20), 0);
}

INSTANTIATE_TEST_SUITE_P(Answers, NoFallocate, ::testing::Values(EOPNOTSUPP, EINVAL));

// With a real posix_fallocate, reserve_space reserves (the file grows to the size).
TEST(ReserveSpace, AllocatesWhereTheFilesystemCan) {
  const std::string path = (fs::current_path() / "reserve_space_real.bin").string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(zs::reserve_space(fd, 1 << 16, path), 0);
  EXPECT_EQ(fs::file_size(path), 1u << 16);
  ::close(fd);
  fs::remove(path);
}

}  // namespace
