// SPDX-License-Identifier: Apache-2.0
#include <cstdlib>

#include "common/test_util.h"
#include "zeroshard/base/error.h"
#include "zeroshard/base/logging.h"

namespace zs = zeroshard;

namespace {
// Restores the process's log settings after a test changes them.
struct SettingsGuard {
  zs::LogSettings saved = zs::log_settings();
  ~SettingsGuard() { zs::set_log_settings(saved); }
};
}  // namespace

TEST(Logging, ParsesLevels) {
  EXPECT_EQ(zs::parse_log_level("DEBUG", "x"), zs::LogLevel::kDebug);
  EXPECT_EQ(zs::parse_log_level("warning", "x"), zs::LogLevel::kWarn);
  try {
    zs::parse_log_level("loud", "config field logging.level");
    FAIL();
  } catch (const zs::ConfigError& e) {
    std::string w = e.what();
    EXPECT_NE(w.find("config field logging.level: unknown log level 'loud'; allowed: trace, debug, info, warn, error, off"),
              std::string::npos)
        << w;
  }
}

TEST(Logging, ParsesRankLists) {
  zs::LogSettings s = zs::parse_log_ranks("0,3, 5", {}, "x");
  EXPECT_FALSE(s.all_ranks);
  EXPECT_EQ(s.ranks, (std::vector<int>{0, 3, 5}));
  EXPECT_TRUE(zs::parse_log_ranks("all", {}, "x").all_ranks);
  EXPECT_THROW(zs::parse_log_ranks("0,,1", {}, "x"), zs::ConfigError);
  EXPECT_THROW(zs::parse_log_ranks("-1", {}, "x"), zs::ConfigError);
}

TEST(Logging, RankFilterAndLevels) {
  SettingsGuard guard;
  const int me = zs::test::rank();
  zs::LogSettings s;
  s.level = zs::LogLevel::kInfo;
  s.ranks = {me + 1};  // not this rank
  zs::set_log_settings(s);
  EXPECT_FALSE(zs::log_enabled(zs::LogLevel::kInfo));
  EXPECT_TRUE(zs::log_enabled(zs::LogLevel::kWarn));  // warnings print on every rank
  s.ranks = {me};
  zs::set_log_settings(s);
  EXPECT_TRUE(zs::log_enabled(zs::LogLevel::kInfo));
  EXPECT_FALSE(zs::log_enabled(zs::LogLevel::kDebug));
  s.level = zs::LogLevel::kOff;
  zs::set_log_settings(s);
  EXPECT_FALSE(zs::log_enabled(zs::LogLevel::kError));
}

TEST(Logging, LinesArePrefixedWithRank) {
  SettingsGuard guard;
  zs::LogSettings s;
  s.all_ranks = true;
  zs::set_log_settings(s);
  testing::internal::CaptureStdout();
  ZS_LOG(kInfo) << "hello " << 42;
  std::string out = testing::internal::GetCapturedStdout();
  std::string want = " r" + std::to_string(zs::test::rank()) + "/" + std::to_string(zs::test::world_size()) + " I] hello 42\n";
  EXPECT_EQ(out.rfind("[zs ", 0), 0u) << out;
  EXPECT_NE(out.find(want), std::string::npos) << out;
}

TEST(Logging, EnvironmentOverridesConfig) {
  setenv("ZS_LOG_LEVEL", "error", 1);
  setenv("ZS_LOG_RANKS", "all", 1);
  zs::LogSettings s = zs::apply_log_env(zs::LogSettings{});
  EXPECT_EQ(s.level, zs::LogLevel::kError);
  EXPECT_TRUE(s.all_ranks);
  setenv("ZS_LOG_LEVEL", "nope", 1);
  try {
    zs::apply_log_env(zs::LogSettings{});
    ADD_FAILURE();
  } catch (const zs::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("environment variable ZS_LOG_LEVEL"), std::string::npos);
  }
  unsetenv("ZS_LOG_LEVEL");
  unsetenv("ZS_LOG_RANKS");
}
