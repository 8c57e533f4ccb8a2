// SPDX-License-Identifier: Apache-2.0
#include "io/aio_test_util.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "zeroshard/base/error.h"

#ifndef ZS_TEST_TMPDIR
#error "ZS_TEST_TMPDIR must name a directory for temporary test files"
#endif

namespace zeroshard::test {

TempDir::TempDir() {
  std::filesystem::create_directories(ZS_TEST_TMPDIR);
  std::string templ = std::string(ZS_TEST_TMPDIR) + "/zs-aio-XXXXXX";
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) {
    ZS_THROW(IoError, "mkdtemp(", templ, "): ", detail::errno_string(errno));
  }
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

Buffer aligned_buffer(int64_t bytes) {
  const auto rounded = static_cast<size_t>((bytes + kDirectAlignment - 1) / kDirectAlignment *
                                           kDirectAlignment);
  void* p = std::aligned_alloc(kDirectAlignment, rounded == 0 ? kDirectAlignment : rounded);
  if (p == nullptr) ZS_THROW(Error, "aligned_alloc(", bytes, ") failed");
  std::memset(p, 0, rounded);
  return Buffer(static_cast<char*>(p));
}

Buffer random_buffer(int64_t bytes, uint64_t seed) {
  Buffer b = aligned_buffer(bytes);
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < bytes; ++i) b.get()[i] = static_cast<char>(rng() & 0xff);
  return b;
}

std::unique_ptr<IoEngine> try_engine(const IoOptions& options, std::string* why) {
  try {
    return make_io_engine(options);
  } catch (const IoError& e) {
    *why = std::string("backend ") + to_string(options.backend) + " cannot start here: " +
           e.message();
    return nullptr;
  }
}

namespace {

// The calling thread's private mount namespace, made once (unshare affects only this thread).
std::string enter_private_namespace() {
  static std::string failure = [] {
    if (::unshare(CLONE_NEWNS) != 0) {
      return "unshare(CLONE_NEWNS): " + detail::errno_string(errno) + " (needs CAP_SYS_ADMIN)";
    }
    // Nothing mounted from here on may propagate back to the parent namespace.
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      return "making / private: " + detail::errno_string(errno);
    }
    return std::string();
  }();
  return failure;
}

}  // namespace

PrivateMount::PrivateMount(const std::string& type, const std::string& options) {
  why_ = enter_private_namespace();
  if (!why_.empty()) return;
  if (::mount("zs-test", dir_.path().c_str(), type.c_str(), 0, options.c_str()) != 0) {
    why_ = "mount -t " + type + " -o '" + options + "' " + dir_.path() + ": " +
           detail::errno_string(errno);
    return;
  }
  mounted_ = true;
}

PrivateMount::~PrivateMount() {
  if (mounted_) ::umount2(dir_.path().c_str(), MNT_DETACH);
}

bool kernel_accepts_direct(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0644);
  const bool ok = fd >= 0;
  if (ok) ::close(fd);
  ::unlink(path.c_str());
  return ok;
}

}  // namespace zeroshard::test
