// SPDX-License-Identifier: Apache-2.0
#pragma once
// Helpers for the async I/O tests: a temporary directory, aligned random buffers, an engine per
// backend (skipping visibly when the backend cannot start here), and a private mount of a small
// filesystem for the tests that need one (CAP_SYS_ADMIN; skipped otherwise).

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "zeroshard/io/aio.h"

namespace zeroshard::test {

// A fresh directory under the build tree (ZS_TEST_TMPDIR), removed with its contents.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// kDirectAlignment-aligned bytes.
struct FreeDeleter {
  void operator()(char* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<char, FreeDeleter>;
Buffer aligned_buffer(int64_t bytes);
Buffer random_buffer(int64_t bytes, uint64_t seed);

// The engine for `options`, or nullptr with `why` set when that backend cannot start here.
std::unique_ptr<IoEngine> try_engine(const IoOptions& options, std::string* why);

// Mounts a filesystem of `type` (e.g. "tmpfs" with "size=256k", "ramfs") on a fresh directory
// in a private mount namespace of the calling thread (nothing outside the test sees it). ok()
// is false, with why(), where the process lacks CAP_SYS_ADMIN or mounting is refused.
class PrivateMount {
 public:
  PrivateMount(const std::string& type, const std::string& options);
  ~PrivateMount();
  bool ok() const { return mounted_; }
  const std::string& why() const { return why_; }
  std::string file(const std::string& name) const { return dir_.file(name); }

 private:
  TempDir dir_;
  bool mounted_ = false;
  std::string why_;
};

// Whether the kernel accepts O_DIRECT for a new file at `path` (the file is removed again).
bool kernel_accepts_direct(const std::string& path);


// Fails unless fn throws an `Err` whose message contains every one of `parts`.
template <class Err>
void expect_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no error thrown; expected one mentioning '" << parts.front() << "'";
  } catch (const Err& e) {
    const std::string what = e.what();
    for (const std::string& p : parts) {
      EXPECT_NE(what.find(p), std::string::npos) << "'" << p << "' not in: " << what;
    }
  }
}

// Open flags of a file the tests write and read back.
constexpr int kRw = AioFile::kReadWrite | AioFile::kCreate;

}  // namespace zeroshard::test

// Declares `var` as the engine for `options`, or skips the test naming the reason.
#define ZS_ENGINE_OR_SKIP(var, options)                                             \
  std::string var##_why;                                                            \
  std::unique_ptr<::zeroshard::IoEngine> var =                                      \
      ::zeroshard::test::try_engine((options), &var##_why);                         \
  if (!var) GTEST_SKIP() << var##_why
