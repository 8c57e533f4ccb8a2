// SPDX-License-Identifier: Apache-2.0
// zeroshard::cli::App (zeroshard/base/cli.h): the command-line shape every program shares.

#include <functional>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "zeroshard/base/cli.h"
#include "zeroshard/base/error.h"

namespace zc = zeroshard::cli;
using Args = std::vector<std::string>;

namespace {

// The UsageError message of `fn`, or "" when it throws nothing.
std::string usage_error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const zeroshard::UsageError& e) {
    return e.message();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
// A program with one option of every kind.
struct Prog {
  zc::App app{"prog", "A test program."};
  int64_t elements = 7;
  int reps = 1;
  double accuracy = -1;
  int64_t size = 0;
  std::string mode = "a", name;
  std::vector<std::string> env;
  bool dry = false;
  Prog() {
    app.add_int("--elements", &elements, "elements", 1);
    app.add_int("-r,--reps", &reps, "repetitions", 1, 10);
    app.add_number("--min-accuracy", &accuracy, "accuracy", 0, 1);
    app.add_size("--size", &size, "bytes");
    app.add_choice("--mode", &mode, {"a", "b"}, "mode");
    app.add_text("--name", &name, "name", "NAME");
    app.add_list("--env", &env, "variables", "NAME=VALUE");
    app.add_flag("--dry-run", &dry, "dry run");
  }
  bool parse(Args a) {
    a.insert(a.begin(), "prog");
    return app.parse(a, false);
  }
};

std::string error_for(const Args& a) {
  Prog p;
  return usage_error_of([&] { p.parse(a); });
}

}  // namespace

TEST(Cli, ValuesWithSpaceOrEquals) {
  Prog p;
  ASSERT_TRUE(p.parse({"--elements", "12", "--reps=3", "--min-accuracy", "0.5", "--size=64K", "--mode", "b",
                       "--name=x y", "--env", "A=1", "--env=B=2,3", "--dry-run"}));
  EXPECT_EQ(p.elements, 12);
  EXPECT_EQ(p.reps, 3);
  EXPECT_DOUBLE_EQ(p.accuracy, 0.5);
  EXPECT_EQ(p.size, 64 * 1024);
  EXPECT_EQ(p.mode, "b");
  EXPECT_EQ(p.name, "x y");
  EXPECT_EQ(p.env, (Args{"A=1", "B=2,3"}));
  EXPECT_TRUE(p.dry);
}

TEST(Cli, DefaultsStayAndTheLastRepeatWins) {
  Prog p;
  ASSERT_TRUE(p.parse({"-r", "2", "--reps", "5"}));
  EXPECT_EQ(p.reps, 5);
  EXPECT_EQ(p.elements, 7);
  EXPECT_FALSE(p.dry);
  EXPECT_EQ(p.mode, "a");
}

TEST(Cli, BadValuesNameTheFlagAndTheText) {
  EXPECT_CONTAINS(error_for({"--elements", "abc"}), "--elements 'abc' is not an integer");
  EXPECT_CONTAINS(error_for({"--elements", "12abc"}), "--elements '12abc' is not an integer");
  EXPECT_CONTAINS(error_for({"--elements=0"}), "--elements must be at least 1, got 0");
  EXPECT_CONTAINS(error_for({"--elements", "99999999999999999999"}), "'99999999999999999999' is out of range");
  EXPECT_CONTAINS(error_for({"-r", "11"}), "-r must be between 1 and 10, got 11");
  EXPECT_CONTAINS(error_for({"--min-accuracy", "lots"}), "--min-accuracy 'lots' is not a number");
  EXPECT_CONTAINS(error_for({"--min-accuracy", "2"}), "--min-accuracy must be between 0 and 1, got 2");
  EXPECT_CONTAINS(error_for({"--min-accuracy", "nan"}), "'nan' is not a number");
  EXPECT_CONTAINS(error_for({"--size", "12Q"}), "--size '12Q' is not a size in bytes (e.g. 4096, 64K, 1M, 1G)");
  EXPECT_CONTAINS(error_for({"--mode", "c"}), "--mode 'c' is not one of a, b");
  EXPECT_CONTAINS(error_for({"--dry-run=yes"}), "--dry-run takes no value (got '--dry-run=yes')");
  // Every usage error ends with the usage line and where the options are listed.
  EXPECT_CONTAINS(error_for({"--elements", "abc"}), "(usage: prog [OPTIONS]; prog --help lists the options)");
}

TEST(Cli, UnknownOptionsMissingValuesAndStrayArguments) {
  EXPECT_CONTAINS(error_for({"--elemnts", "3"}), "unknown option '--elemnts'; did you mean '--elements'?");
  EXPECT_CONTAINS(error_for({"--elemnts=3"}), "unknown option '--elemnts'; did you mean '--elements'?");
  const std::string far = error_for({"--zzzzzzzz"});
  EXPECT_CONTAINS(far, "unknown option '--zzzzzzzz'");
  EXPECT_FALSE(contains(far, "did you mean")) << far;
  EXPECT_CONTAINS(error_for({"--elements"}), "--elements needs a value");
  EXPECT_CONTAINS(error_for({"stray"}), "unexpected argument 'stray'");
}

TEST(Cli, HelpAndVersionWinOverBadValues) {
  Prog p;
  EXPECT_FALSE(p.parse({"--elements", "abc", "--help"}));
  Prog q;
  EXPECT_FALSE(q.parse({"--version"}));
  EXPECT_EQ(zc::version_line("prog").rfind("prog (zeroshard ", 0), 0u);
  const std::string help = p.app.help();
  for (const char* part : {"A test program.", "--elements", "-r,--reps", "--size BYTES", "--mode a|b", "--version"}) {
    EXPECT_CONTAINS(help, part);
  }
}

TEST(Cli, ConfigOptionsAreListed) {
  zc::App app("prog", "x");
  app.add_config_options();
  app.usage("mpirun -n N prog [OPTIONS]");
  EXPECT_CONTAINS(app.help(), "Usage: mpirun -n N prog [OPTIONS]");
  EXPECT_CONTAINS(app.help(), "--config FILE");
  EXPECT_CONTAINS(app.help(), "--set KEY=VALUE");
}

TEST(Cli, PrefixCommandStopsAtTheProgram) {
  auto run = [](Args a, int* n) {
    zc::App app("launch", "x");
    app.prefix_command();
    app.add_int("-n,--np", n, "ranks", 1);
    a.insert(a.begin(), "launch");
    app.parse(a, false);
    return app.rest();
  };
  int n = 0;
  EXPECT_EQ(run({"-n", "2", "prog", "-n", "3"}, &n), (Args{"prog", "-n", "3"}));
  EXPECT_EQ(n, 2);
  EXPECT_EQ(run({"--np=4", "--", "prog", "--", "x"}, &n), (Args{"prog", "--", "x"}));
  EXPECT_EQ(n, 4);
  EXPECT_EQ(run({"-n", "2", "--", "--weird"}, &n), (Args{"--weird"}));
  EXPECT_CONTAINS(usage_error_of([&] { run({"--nq", "2", "prog"}, &n); }), "unknown option '--nq'; did you mean '--np'?");
}

TEST(Cli, ParseFunctionsAlone) {
  EXPECT_EQ(zc::parse_int("--x", "-5"), -5);
  EXPECT_EQ(zc::parse_int("--x", "+5"), 5);
  EXPECT_CONTAINS(usage_error_of([] { zc::parse_int("--x", " 5"); }), "--x ' 5' is not an integer");
  EXPECT_CONTAINS(usage_error_of([] { zc::parse_int("--x", "010", 0, 5); }), "--x must be between 0 and 5, got 10");
  EXPECT_DOUBLE_EQ(zc::parse_number("--x", "1e-3"), 1e-3);
  EXPECT_EQ(zc::parse_size("--s", "1G"), int64_t{1} << 30);
  EXPECT_EQ(zc::parse_size("--s", "1.5k"), 1536);
  EXPECT_CONTAINS(usage_error_of([] { zc::parse_size("--s", "0"); }), "--s '0' is not a size");
  EXPECT_CONTAINS(usage_error_of([] { zc::parse_size("--s", "1.5"); }), "--s '1.5' is not a size");
}

// A usage error names the line that called parse() (the program's), whatever raised it: an
// unknown option, a bad value's conversion, or a check across options.
TEST(Cli, ErrorsAreLocatedAtTheParseCall) {
  for (const Args& bad : {Args{"--no-such"}, Args{"--elements", "x"}, Args{"--reps", "11"}}) {
    Prog p;
    Args a = bad;
    a.insert(a.begin(), "prog");
    const int line = __LINE__ + 2;
    try {
      p.app.parse(a, false);
      ADD_FAILURE() << "no usage error for " << bad[0];
    } catch (const zeroshard::UsageError& e) {
      EXPECT_EQ(e.line(), line) << e.what();
      EXPECT_EQ(e.file(), std::string(__FILE__)) << e.what();
    }
  }
}
