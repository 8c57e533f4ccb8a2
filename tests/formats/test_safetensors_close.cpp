// SPDX-License-Identifier: Apache-2.0
// SafetensorsWriter when close() reports an error (NFS reports write-back failures there). This
// binary interposes close(2): the close of the writer's temporary file closes it and answers EIO.
// finish() must throw naming the file, and the writer must never close that descriptor number
// again (by then it may belong to another file of the process). Before, the destructor closed it a
// second time.

#include <dlfcn.h>
#include <unistd.h>

#include <ATen/ops/arange.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <filesystem>
#include <string>

#include "common/test_util.h"
#include "zeroshard/base/error.h"
#include "zeroshard/formats/tensor_file.h"

namespace zs = zeroshard;
namespace fs = std::filesystem;

namespace {
std::atomic<bool> g_fail_tmp_close{false};  // fail the close of a file named *.safetensors.tmp
std::atomic<int> g_failed_fd{-1};           // the descriptor whose close failed
std::atomic<int> g_closes_after{0};         // closes of that number after its failed one

bool names_tmp_file(int fd) {
  char link[64], target[PATH_MAX];
  std::snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  const ssize_t n = ::readlink(link, target, sizeof(target) - 1);
  if (n <= 0) return false;
  const std::string t(target, static_cast<size_t>(n));
  const std::string suffix = ".safetensors.tmp";
  return t.size() > suffix.size() && t.compare(t.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

extern "C" int close(int fd) {
  using Fn = int (*)(int);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "close"));
  if (fd >= 0 && fd == g_failed_fd.load()) ++g_closes_after;
  if (g_fail_tmp_close.load() && names_tmp_file(fd)) {
    g_fail_tmp_close = false;
    g_failed_fd = fd;
    real(fd);  // Linux releases the descriptor even when close reports an error
    errno = EIO;
    return -1;
  }
  return real(fd);
}

namespace {

TEST(SafetensorsWriterClose, FailedCloseIsReportedAndNotRepeated) {
  const std::string dir = (fs::current_path() / "safetensors_close_test").string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = dir + "/model.safetensors";
  {
    zs::SafetensorsWriter w(path, {{"w", c10::kFloat, {4}}});
    w.write("w", at::arange(4, at::kFloat));
    g_fail_tmp_close = true;
    const std::string err = zs::test::error_text_of<zs::IoError>([&] { w.finish(); });
    EXPECT_NE(err.find("close of '" + path + ".tmp'"), std::string::npos) << err;
    EXPECT_NE(err.find("Input/output error"), std::string::npos) << err;
    ASSERT_GE(g_failed_fd.load(), 0) << "the interposed close() never saw the temporary file";
  }  // the writer's destructor
  EXPECT_EQ(g_closes_after.load(), 0) << "descriptor " << g_failed_fd.load() << " closed again after its close failed";
  EXPECT_FALSE(fs::exists(path)) << "a file whose close failed was put in place";
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  g_failed_fd = -1;
  fs::remove_all(dir);
}

}  // namespace
