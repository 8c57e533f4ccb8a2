// SPDX-License-Identifier: Apache-2.0
// ProgressBar: '\r' redraws on a terminal, plain lines every k steps otherwise; throughput and ETA
// from a fake clock.

#include <pty.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/test_util.h"
#include "zeroshard/base/error.h"
#include "zeroshard/train/progress.h"

namespace zs = zeroshard;

namespace {

// Captures what a ProgressBar writes (open_memstream), with a clock the test advances.
struct Capture {
  char* buf = nullptr;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  double now = 100.0;
  ~Capture() {
    std::fclose(f);
    std::free(buf);
  }
  std::string text() {
    std::fflush(f);
    return std::string(buf, len);
  }
  zs::ProgressOptions options(int tty, int64_t total) {
    zs::ProgressOptions o;
    o.out = f;
    o.tty = tty;
    o.total_steps = total;
    o.items_name = "tok";
    o.clock = [this] { return now; };
    return o;
  }
};

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

TEST(Progress, PlainLinesEveryKStepsWhenNotATerminal) {
  Capture c;
  zs::ProgressOptions o = c.options(/*tty=*/0, 12);
  o.log_every = 5;
  {
    zs::ProgressBar bar(o);
    EXPECT_FALSE(bar.is_tty());
    for (int s = 1; s <= 12; ++s) {
      c.now += 0.5;
      bar.update({s, 3.0 - 0.1 * s, 1e-3, 1000, 4 << 20});
    }
    bar.println("val loss 1.5");
  }
  const std::string out = c.text();
  EXPECT_EQ(out.find('\r'), std::string::npos) << "no carriage returns in a log: " << out;
  EXPECT_EQ(count(out, "\n"), 5) << "steps 1, 5, 10, 12 and the println: " << out;
  EXPECT_NE(out.find("step 1/12   8% loss 2.9000"), std::string::npos) << out;
  EXPECT_NE(out.find("step 5/12  41% loss 2.5000 lr 1.00e-03 | 2.00k tok/s | ETA 4s"), std::string::npos) << out;
  EXPECT_NE(out.find("step 12/12 100%"), std::string::npos) << out;
  EXPECT_NE(out.find("mem 4.0 MiB"), std::string::npos) << out;
  EXPECT_EQ(out.find("step 6/"), std::string::npos) << out;
  EXPECT_NE(out.find("val loss 1.5\n"), std::string::npos) << out;
  EXPECT_EQ(out.find('['), std::string::npos) << "no bar drawing in a log: " << out;
}

TEST(Progress, RedrawsOneLineOnATerminal) {
  Capture c;
  zs::ProgressOptions o = c.options(/*tty=*/1, 4);
  o.bar_width = 8;
  zs::ProgressBar bar(o);
  EXPECT_TRUE(bar.is_tty());
  for (int s = 1; s <= 2; ++s) {
    c.now += 1.0;
    bar.update({s, 2.0, -1, 500, -1});
  }
  bar.println("eval: 0.5");
  c.now += 1.0;
  bar.update({3, 1.0, -1, 500, -1});
  bar.finish();
  bar.finish();  // idempotent
  const std::string out = c.text();
  EXPECT_EQ(count(out, "\r"), 4) << "one per update plus one to clear before the println: " << out;
  EXPECT_NE(out.find("\rstep 1/4 [##>     ]  25% loss 2.0000"), std::string::npos) << out;
  EXPECT_NE(out.find("\r\x1b[Keval: 0.5\nstep 2/4"), std::string::npos) << "the line, then the bar redrawn: " << out;
  EXPECT_NE(out.find("500 tok/s | ETA 1s"), std::string::npos) << out;
  EXPECT_EQ(out.back(), '\n') << "finish() ends the line";
  EXPECT_EQ(out.find(" lr "), std::string::npos) << "a negative lr is not shown";
}

TEST(Progress, WindowForgetsTheSlowFirstStep) {
  Capture c;
  zs::ProgressOptions o = c.options(0, 0);
  o.window = 2;
  zs::ProgressBar bar(o);
  c.now += 10.0;  // slow first step (warm-up)
  bar.update({1, 1, -1, 100, -1});
  EXPECT_DOUBLE_EQ(bar.items_per_second(), 10.0);
  for (int s = 2; s <= 4; ++s) {
    c.now += 1.0;
    bar.update({s, 1, -1, 100, -1});
  }
  EXPECT_DOUBLE_EQ(bar.items_per_second(), 100.0) << "the last 2 updates only";
  EXPECT_EQ(bar.total_items(), 400);
  EXPECT_DOUBLE_EQ(bar.elapsed_s(), 13.0);
}

TEST(Progress, StepDurationsKeepPausesOutOfTheThroughput) {
  Capture c;
  zs::ProgressBar bar(c.options(0, 10));
  c.now += 30.0;  // e.g. an evaluation before training
  bar.update({1, 1, -1, 200, -1, /*seconds=*/2.0});
  c.now += 100.0;  // another pause
  bar.update({2, 1, -1, 200, -1, /*seconds=*/2.0});
  EXPECT_DOUBLE_EQ(bar.items_per_second(), 100.0) << "400 items in 4 s of steps";
  EXPECT_NE(bar.format({2, 1, -1, 0, -1}).find("ETA 16s"), std::string::npos) << "8 steps left at 2 s each";
  EXPECT_DOUBLE_EQ(bar.elapsed_s(), 130.0) << "elapsed is wall time";
}

TEST(Progress, DisabledPrintsNothing) {
  Capture c;
  zs::ProgressOptions o = c.options(1, 3);
  o.enabled = false;
  {
    zs::ProgressBar bar(o);
    bar.update({1, 1, 1, 1, 1});
    bar.println("x");
  }
  EXPECT_EQ(c.text(), "");
}

TEST(Progress, AutoModeDrawsABarOnATerminalButNotUnderMpirun) {
  int master = -1, slave = -1;
  ASSERT_EQ(openpty(&master, &slave, nullptr, nullptr, nullptr), 0);
  FILE* tty = fdopen(slave, "w");
  ASSERT_NE(tty, nullptr);
  const char* saved = std::getenv("OMPI_COMM_WORLD_SIZE");
  const std::string saved_value = saved ? saved : "";
  unsetenv("OMPI_COMM_WORLD_SIZE");
  EXPECT_TRUE(zs::ProgressBar::auto_tty(tty));
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  EXPECT_FALSE(zs::ProgressBar::auto_tty(tty)) << "mpirun's ranks always see a pseudo-terminal";
  if (saved) setenv("OMPI_COMM_WORLD_SIZE", saved_value.c_str(), 1);
  else unsetenv("OMPI_COMM_WORLD_SIZE");
  Capture c;
  EXPECT_FALSE(zs::ProgressBar::auto_tty(c.f)) << "a memory stream is no terminal";
  std::fclose(tty);
  close(master);
}

TEST(Progress, Formats) {
  EXPECT_EQ(zs::ProgressBar::format_duration(42.4), "42s");
  EXPECT_EQ(zs::ProgressBar::format_duration(65), "1m05s");
  EXPECT_EQ(zs::ProgressBar::format_duration(7380), "2h03m");
  EXPECT_EQ(zs::ProgressBar::format_count(999), "999");
  EXPECT_EQ(zs::ProgressBar::format_count(12345), "12.3k");
  EXPECT_EQ(zs::ProgressBar::format_count(4.56e6), "4.56M");
  EXPECT_EQ(zs::ProgressBar::format_bytes(512), "512 B");
  EXPECT_EQ(zs::ProgressBar::format_bytes(3 << 20), "3.0 MiB");
  EXPECT_GT(zs::ProgressBar::resident_bytes(), 0) << "Linux has /proc/self/statm";
  zs::ProgressOptions bad;
  bad.log_every = 0;
  EXPECT_THROW(zs::ProgressBar{bad}, zs::UsageError);
}

}  // namespace
