// SPDX-License-Identifier: Apache-2.0
#include <fcntl.h>

#include "common/test_util.h"
#include "zeroshard/base/error.h"

namespace zs = zeroshard;

TEST(Error, CarriesRankHostAndSourceLocation) {
  try {
    ZS_THROW(zs::ConfigError, "field ", "x", " is ", 3);
    FAIL() << "no throw";
  } catch (const zs::Error& e) {
    EXPECT_EQ(e.message(), "field x is 3");
    EXPECT_EQ(e.rank(), zs::test::rank());
    EXPECT_FALSE(e.host().empty());
    EXPECT_EQ(e.file(), "tests/base/test_error.cpp");  // relative to the source tree
    EXPECT_GT(e.line(), 0);
    std::string what = e.what();
    EXPECT_EQ(what.rfind("zeroshard config error [rank " + std::to_string(zs::test::rank()) + " on " + e.host() +
                             ", tests/base/test_error.cpp:",
                         0),
              0u)
        << what;
    EXPECT_NE(what.find("]: field x is 3"), std::string::npos) << what;
  }
}

TEST(Error, SubclassesAreCatchableByFamily) {
  EXPECT_THROW(ZS_THROW(zs::CommTimeoutError, "t"), zs::CommError);
  EXPECT_THROW(ZS_THROW(zs::CommTimeoutError, "t"), zs::Error);
  EXPECT_THROW(ZS_THROW(zs::IoError, "t"), std::runtime_error);
  try {
    ZS_THROW(zs::CommTimeoutError, "late");
  } catch (const zs::Error& e) {
    EXPECT_NE(std::string(e.what()).find("zeroshard comm timeout ["), std::string::npos) << e.what();
  }
}

TEST(Error, CheckMacros) {
  int x = 2;
  EXPECT_NO_THROW(ZS_CHECK(x == 2, "never"));
  try {
    ZS_CHECK(x == 3, "x was ", x);
    FAIL();
  } catch (const zs::Error& e) {
    EXPECT_NE(std::string(e.what()).find("check failed (x == 3): x was 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ZS_REQUIRE(x > 5, zs::UsageError, "need more"), zs::UsageError);
}

TEST(Error, ErrnoCheckNamesTheCallAndReason) {
  const char* path = "/nonexistent-zeroshard-dir/file";
  try {
    ZS_CHECK_ERRNO(::open(path, O_RDONLY), "opening ", path);
    FAIL();
  } catch (const zs::IoError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("opening /nonexistent-zeroshard-dir/file: No such file or directory (errno 2)"),
              std::string::npos)
        << what;
  }
  int fd = ZS_CHECK_ERRNO(::open("/dev/null", O_RDONLY), "opening /dev/null");
  EXPECT_GE(fd, 0);
  ::close(fd);
}
