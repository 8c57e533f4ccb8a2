// SPDX-License-Identifier: Apache-2.0
// zeroshard-launch's trial jobs (--find-batch-size, --auto-micro-batches; trial.h), part of the
// test_launcher binary: the arithmetic of the next size (checked against brute force), parsing
// the protocol lines (good and malformed), classifying how a trial ended, inserting arguments, the
// command-line options, both searches driven by a simulated program, and the process runner on
// `sh -c` commands. The whole launcher (mpirun running tests/tools/fake_trial.sh at 1 and 2
// ranks) is in the job tests in CMakeLists.txt.

#include <algorithm>
#include <cmath>

#include "common/test_util.h"
#include "common/error_text.h"
#include "zeroshard/base/error.h"
#include "zeroshard/launcher/trial.h"

namespace zl = zeroshard::launch;
namespace zs = zeroshard;

namespace {

using Args = std::vector<std::string>;

using zeroshard::test::contains;
using zeroshard::test::message_of;

// A simulated training program: train.batch_size and train.micro_batches as configured, changed
// by the --set options of a trial (later ones win); a micro-batch above `max_fit` runs out.
struct FakeProgram {
  int64_t batch = 48, micro = 1, max_fit = 16, limit = 0;
  int world = 1;
  bool prints_plan = true;
  bool applies_set = true;
  std::vector<int64_t> sizes;  // the micro-batch of each trial, in order
  std::vector<Args> calls;

  zl::TrialResult operator()(const Args& extra) {
    calls.push_back(extra);
    EXPECT_EQ(extra.at(0), "--memory-trial");
    int64_t b = batch, m = micro;
    for (size_t i = 0; i + 1 < extra.size(); ++i) {
      if (extra[i] != "--set" || !applies_set) continue;
      const std::string& kv = extra[i + 1];
      const int64_t v = std::stoll(kv.substr(kv.find('=') + 1));
      if (kv.rfind("train.batch_size=", 0) == 0) b = v;
      if (kv.rfind("train.micro_batches=", 0) == 0) m = v;
    }
    if (b % (world * m) != 0) ZS_THROW(zs::Error, "fake: batch ", b, " not divisible by ", world, " x ", m);
    zl::TrialResult r;
    const int64_t p = b / world, s = p / m;
    sizes.push_back(s);
    if (prints_plan) r.plan = zl::TrialPlanLine{world, p, m, s};
    r.fits = s <= max_fit;
    if (r.fits) r.fits_line = zl::TrialFitsLine{s, s * 1024 * 1024, limit};
    return r;
  }
  zl::RunTrial runner() {
    return [this](const Args& extra) { return (*this)(extra); };
  }
};

std::vector<int64_t> divisors(int64_t p) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i <= p; ++i) {
    if (p % i == 0) d.push_back(i);
  }
  return d;
}

}  // namespace

TEST(TrialArithmetic, HalvingGoesDownToOneThenStops) {
  std::vector<int64_t> seq;
  for (int64_t s = 100; s >= 1; s = zl::halve_micro_batch(s)) seq.push_back(s);
  EXPECT_EQ(seq, (std::vector<int64_t>{100, 50, 25, 12, 6, 3, 1}));
  EXPECT_EQ(zl::halve_micro_batch(1), 0);
}

TEST(TrialArithmetic, NextSizeIsTheLargestDivisorAtMostHalf) {
  std::vector<int64_t> seq;
  for (int64_t s = 48; s >= 1; s = zl::next_micro_batch_size(48, s)) seq.push_back(s);
  EXPECT_EQ(seq, (std::vector<int64_t>{48, 24, 12, 6, 3, 1}));
  EXPECT_EQ(zl::next_micro_batch_size(7, 7), 1);  // a prime: 7/2 = 3, and 1 is its only divisor <= 3
  EXPECT_EQ(zl::next_micro_batch_size(1, 1), 0);
  EXPECT_EQ(zl::next_micro_batch_size(48, 16), 8);   // from a configured 3 micro-batches of 16
  EXPECT_EQ(zl::next_micro_batch_size(45, 15), 5);
  // Against brute force, every P and size up to 200.
  for (int64_t p = 1; p <= 200; ++p) {
    for (int64_t s = 1; s <= p; ++s) {
      int64_t want = 0;
      for (int64_t d : divisors(p)) {
        if (d <= s / 2) want = d;
      }
      ASSERT_EQ(zl::next_micro_batch_size(p, s), want) << "P=" << p << " size=" << s;
    }
  }
}

TEST(TrialArithmetic, RefineBisectsTheDivisorsBetween) {
  EXPECT_EQ(zl::refine_micro_batch_size(48, 12, 24), 16);
  EXPECT_EQ(zl::refine_micro_batch_size(48, 4, 12), 8);   // 6 and 8 lie between: the upper middle
  EXPECT_EQ(zl::refine_micro_batch_size(48, 1, 3), 2);
  EXPECT_EQ(zl::refine_micro_batch_size(48, 24, 48), 0);
  EXPECT_EQ(zl::refine_micro_batch_size(7, 1, 7), 0);
  EXPECT_EQ(zl::refine_micro_batch_size(60, 1, 60), 10);  // 2 3 4 5 6 10 12 15 20 30: index 5
  for (int64_t p = 1; p <= 120; ++p) {
    for (int64_t lo = 1; lo <= p; ++lo) {
      for (int64_t hi = lo + 1; hi <= p; ++hi) {
        const int64_t r = zl::refine_micro_batch_size(p, lo, hi);
        const auto d = divisors(p);
        const bool any = std::any_of(d.begin(), d.end(), [&](int64_t x) { return x > lo && x < hi; });
        ASSERT_EQ(r != 0, any) << "P=" << p << " (" << lo << ", " << hi << ")";
        if (r != 0) ASSERT_TRUE(p % r == 0 && r > lo && r < hi) << "P=" << p << " (" << lo << ", " << hi << ") -> " << r;
      }
    }
  }
}

TEST(TrialArithmetic, FewestMicroBatchesThatFit) {
  EXPECT_EQ(zl::micro_batches_for(48, 16), 3);
  EXPECT_EQ(zl::micro_batches_for(48, 12), 4);
  EXPECT_EQ(zl::micro_batches_for(48, 13), 4);
  EXPECT_EQ(zl::micro_batches_for(48, 48), 1);
  EXPECT_EQ(zl::micro_batches_for(48, 1000), 1);
  EXPECT_EQ(zl::micro_batches_for(7, 3), 7);
  EXPECT_EQ(zl::micro_batches_for(1, 1), 1);
  for (int64_t p = 1; p <= 200; ++p) {
    for (int64_t s = 1; s <= p + 1; ++s) {
      const int64_t m = zl::micro_batches_for(p, s);
      ASSERT_TRUE(p % m == 0 && p / m <= s) << "P=" << p << " max=" << s << " -> " << m;
      for (int64_t fewer = 1; fewer < m; ++fewer) ASSERT_FALSE(p % fewer == 0 && p / fewer <= s) << p << " " << s;
    }
  }
  EXPECT_TRUE(contains(message_of<zs::Error>([] { zl::micro_batches_for(8, 0); }), "micro_batches_for(8, 0)"));
}

TEST(TrialProtocol, ParsesPlanAndFitsLines) {
  const std::string out =
      "step 1\n[1,0]<stdout>:zeroshard-memory-trial: plan world_size=2 per_rank_batch=48 micro_batches=3 "
      "micro_batch_size=16 later_key=7\r\nnoise zeroshard-memory-trial: planned x\n"
      "zeroshard-memory-trial: fits   limit_bytes=0 micro_batch_size=16 peak_bytes=123456789\n";
  const auto plan = zl::parse_trial_plan(out);
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->world_size, 2);
  EXPECT_EQ(plan->per_rank_batch, 48);
  EXPECT_EQ(plan->micro_batches, 3);
  EXPECT_EQ(plan->micro_batch_size, 16);
  const auto fits = zl::parse_trial_fits(out);
  ASSERT_TRUE(fits.has_value());
  EXPECT_EQ(fits->micro_batch_size, 16);
  EXPECT_EQ(fits->peak_bytes, 123456789);
  EXPECT_EQ(fits->limit_bytes, 0);
  EXPECT_FALSE(zl::parse_trial_plan("zeroshard-memory-trial: fits micro_batch_size=1 peak_bytes=1 limit_bytes=1\n"));
  EXPECT_FALSE(zl::parse_trial_fits("plan world_size=1\nzeroshard-memory-trial:\n"));
  EXPECT_FALSE(zl::parse_trial_fits(""));
  // The first line counts.
  EXPECT_EQ(zl::parse_trial_fits("zeroshard-memory-trial: fits micro_batch_size=2 peak_bytes=1 limit_bytes=0\n"
                                 "zeroshard-memory-trial: fits micro_batch_size=9 peak_bytes=1 limit_bytes=0\n")
                ->micro_batch_size,
            2);
}

TEST(TrialProtocol, MalformedLinesAreErrorsNamingTheLine) {
  auto plan_err = [](const std::string& line) {
    return message_of<zs::Error>([&] { zl::parse_trial_plan("x\n" + line + "\n"); });
  };
  auto fits_err = [](const std::string& line) {
    return message_of<zs::Error>([&] { zl::parse_trial_fits(line + "\n"); });
  };
  const std::string pre = "zeroshard-memory-trial: ";
  std::string e = plan_err(pre + "plan world_size=2 per_rank_batch=48 micro_batches=3");
  EXPECT_TRUE(contains(e, "malformed trial line '" + pre + "plan world_size=2 per_rank_batch=48 micro_batches=3': "
                          "no micro_batch_size=")) << e;
  EXPECT_TRUE(contains(e, "must support --memory-trial")) << e;
  EXPECT_TRUE(contains(plan_err(pre + "plan world_size=two per_rank_batch=48 micro_batches=3 micro_batch_size=16"),
                       "'world_size=two' is not world_size=<whole number>"));
  EXPECT_TRUE(contains(plan_err(pre + "plan world_size=2 per_rank_batch=48 micro_batches micro_batch_size=16"),
                       "'micro_batches' is not micro_batches=<whole number>"));
  EXPECT_TRUE(contains(plan_err(pre + "plan world_size=2 world_size=2 per_rank_batch=4 micro_batches=1 micro_batch_size=4"),
                       "world_size is given twice"));
  EXPECT_TRUE(contains(plan_err(pre + "plan world_size=2 per_rank_batch=48 micro_batches=3 micro_batch_size=15"),
                       "per_rank_batch=48 is not micro_batches=3 x micro_batch_size=15"));
  EXPECT_TRUE(contains(plan_err(pre + "plan world_size=0 per_rank_batch=48 micro_batches=3 micro_batch_size=16"),
                       "world_size=0 must be at least 1"));
  EXPECT_TRUE(contains(plan_err(pre + "plan world_size=2 per_rank_batch=48 micro_batches=3 micro_batch_size=-16"),
                       "'micro_batch_size=-16' is not"));
  EXPECT_TRUE(contains(plan_err(pre + "plan world_size=2 per_rank_batch=99999999999999999999 micro_batches=1 "
                                      "micro_batch_size=1"),
                       "is not per_rank_batch=<whole number>"));
  EXPECT_TRUE(contains(fits_err(pre + "fits micro_batch_size=4 peak_bytes=1.5e9 limit_bytes=0"),
                       "'peak_bytes=1.5e9' is not peak_bytes=<whole number>"));
  EXPECT_TRUE(contains(fits_err(pre + "fits micro_batch_size=4 peak_bytes=10"), "no limit_bytes="));
  EXPECT_TRUE(contains(fits_err(pre + "fits micro_batch_size=0 peak_bytes=10 limit_bytes=0"),
                       "micro_batch_size=0 must be at least 1"));
}

TEST(TrialProtocol, ClassifiesHowATrialEnded) {
  const std::string cmd = "mpirun -n 2 prog --memory-trial";
  const std::string plan = "zeroshard-memory-trial: plan world_size=2 per_rank_batch=8 micro_batches=2 micro_batch_size=4\n";
  const std::string fits = "zeroshard-memory-trial: fits micro_batch_size=4 peak_bytes=100 limit_bytes=200\n";
  zl::TrialResult r = zl::classify_trial({true, 0, 0, plan + fits}, cmd);
  EXPECT_TRUE(r.fits);
  ASSERT_TRUE(r.plan.has_value());
  EXPECT_EQ(r.plan->micro_batches, 2);
  EXPECT_EQ(r.fits_line.peak_bytes, 100);
  EXPECT_EQ(r.fits_line.limit_bytes, 200);
  r = zl::classify_trial({true, 3, 0, plan}, cmd);
  EXPECT_FALSE(r.fits);
  EXPECT_TRUE(r.plan.has_value());
  r = zl::classify_trial({true, 3, 0, ""}, cmd);  // out of memory before the plan line
  EXPECT_FALSE(r.fits || r.plan.has_value());

  std::string e = message_of<zs::Error>([&] { zl::classify_trial({true, 0, 0, plan}, cmd); });
  EXPECT_TRUE(contains(e, "the trial '" + cmd + "': exited 0 without a 'zeroshard-memory-trial: fits ...' line")) << e;
  EXPECT_TRUE(contains(e, "must support --memory-trial")) << e;
  e = message_of<zs::Error>([&] { zl::classify_trial({true, 1, 0, plan}, cmd); });
  EXPECT_EQ(e, "the trial '" + cmd + "' failed with exit status 1 (see the trial output above)");
  e = message_of<zs::Error>([&] { zl::classify_trial({true, 1, 0, ""}, cmd); });
  EXPECT_TRUE(contains(e, "failed with exit status 1 (see the trial output above); it printed no "
                          "'zeroshard-memory-trial:' line, so it stopped before its first step")) << e;
  e = message_of<zs::Error>([&] { zl::classify_trial({false, 0, 9, plan}, cmd); });
  EXPECT_TRUE(contains(e, "the trial '" + cmd + "' failed with signal 9 (")) << e;
  EXPECT_TRUE(contains(e, "OOM killer")) << e;
  e = message_of<zs::Error>([&] { zl::classify_trial({false, 0, 11, plan}, cmd); });
  EXPECT_TRUE(contains(e, "signal 11") && !contains(e, "OOM killer")) << e;
  e = message_of<zs::Error>([&] {
    zl::classify_trial({true, 0, 0, plan + "zeroshard-memory-trial: fits micro_batch_size=8 peak_bytes=1 limit_bytes=0\n"},
                       cmd);
  });
  EXPECT_TRUE(contains(e, "its plan line says micro_batch_size=4 but its fits line says micro_batch_size=8")) << e;
  e = message_of<zs::Error>([&] { zl::classify_trial({true, 3, 0, "zeroshard-memory-trial: plan world_size=x\n"}, cmd); });
  EXPECT_TRUE(contains(e, "the trial '" + cmd + "': malformed trial line")) << e;
}

TEST(TrialArgs, InsertedAfterTheProgramsArgsButBeforeItsDoubleDash) {
  const Args extra = {"--memory-trial", "--set", "train.micro_batches=2"};
  // argv[3] is the program.
  EXPECT_EQ(zl::insert_program_args({"mpirun", "-n", "2", "prog", "--set", "a=1"}, 3, extra),
            (Args{"mpirun", "-n", "2", "prog", "--set", "a=1", "--memory-trial", "--set", "train.micro_batches=2"}));
  EXPECT_EQ(zl::insert_program_args({"mpirun", "-n", "2", "prog", "--set", "a=1", "--", "x", "--"}, 3, extra),
            (Args{"mpirun", "-n", "2", "prog", "--set", "a=1", "--memory-trial", "--set", "train.micro_batches=2", "--",
                  "x", "--"}));
  EXPECT_EQ(zl::insert_program_args({"prog"}, 0, extra), (Args{"prog", "--memory-trial", "--set", "train.micro_batches=2"}));
  EXPECT_EQ(zl::insert_program_args({"prog", "--"}, 0, extra),
            (Args{"prog", "--memory-trial", "--set", "train.micro_batches=2", "--"}));
  // A `--` before the program (a --launcher-arg) or the program named `--` is not the program's.
  EXPECT_EQ(zl::insert_program_args({"mpirun", "--", "prog", "a"}, 2, {"X"}), (Args{"mpirun", "--", "prog", "a", "X"}));
  EXPECT_EQ(zl::insert_program_args({"mpirun", "--", "a"}, 1, {"X"}), (Args{"mpirun", "--", "a", "X"}));
  EXPECT_EQ(zl::insert_program_args({"prog"}, 0, {}), (Args{"prog"}));
  EXPECT_TRUE(contains(message_of<zs::Error>([] { zl::insert_program_args({"prog"}, 1, {"X"}); }), "past the command"));

  EXPECT_EQ(zl::batch_trial_args(12, 4),
            (Args{"--memory-trial", "--set", "train.batch_size=48", "--set", "train.micro_batches=1"}));
  EXPECT_EQ(zl::micro_batches_trial_args(3), (Args{"--memory-trial", "--set", "train.micro_batches=3"}));
  EXPECT_EQ(zl::configured_trial_args(), (Args{"--memory-trial"}));

  zl::Plan plan;
  plan.argv = {"srun", "--ntasks=2", "prog", "a", "--", "b"};
  plan.program_index = 2;
  plan.ranks = 2;
  plan.setenv = {{"A", "1"}};
  const zl::Plan t = zl::with_program_args(plan, zl::micro_batches_override(4));
  EXPECT_EQ(zl::shell_line(t), "env A=1 srun --ntasks=2 prog a --set train.micro_batches=4 -- b");
  EXPECT_EQ(t.program_index, 2u);
  EXPECT_EQ(t.ranks, 2);
}

TEST(TrialArgs, BuildPlanSaysWhereTheProgramStartsAndHowManyRanks) {
  zl::MachineFacts f;
  f.cores = 4;
  f.mpirun = "/usr/bin/mpirun";
  f.srun = "/usr/bin/srun";
  zl::Plan p = zl::build_plan(zl::parse_args({"-n", "3", "--launcher-arg", "--", "prog", "x"}), f);
  EXPECT_EQ(p.argv.at(p.program_index), "prog");
  EXPECT_EQ(p.ranks, 3);
  f.in_slurm = true;
  f.slurm_ntasks = 8;
  p = zl::build_plan(zl::parse_args({"prog"}), f);
  EXPECT_EQ(p.argv.at(p.program_index), "prog");
  EXPECT_EQ(p.ranks, 8);
}

TEST(TrialOptions, ModesAndTheirErrors) {
  zl::LaunchOptions o = zl::parse_args({"-n", "2", "--find-batch-size", "prog"});
  EXPECT_EQ(o.trial_mode, zl::TrialMode::kFindBatchSize);
  EXPECT_EQ(o.find_batch_start, 0);
  o = zl::parse_args({"-n", "2", "--find-batch-size=64", "--", "prog", "--auto-micro-batches"});
  EXPECT_EQ(o.trial_mode, zl::TrialMode::kFindBatchSize);
  EXPECT_EQ(o.find_batch_start, 64);
  EXPECT_EQ(o.program, (Args{"prog", "--auto-micro-batches"}));
  o = zl::parse_args({"--auto-micro-batches", "-n", "2", "prog"});
  EXPECT_EQ(o.trial_mode, zl::TrialMode::kAutoMicroBatches);
  EXPECT_EQ(zl::parse_args({"prog"}).trial_mode, zl::TrialMode::kNone);

  const std::string both = "--find-batch-size and --auto-micro-batches cannot be combined";
  EXPECT_TRUE(contains(message_of<zs::UsageError>([] { zl::parse_args({"--find-batch-size", "--auto-micro-batches", "p"}); }),
                       both));
  EXPECT_TRUE(contains(message_of<zs::UsageError>([] { zl::parse_args({"--auto-micro-batches", "--find-batch-size=8", "p"}); }),
                       both));
  EXPECT_TRUE(contains(message_of<zs::UsageError>([] { zl::parse_args({"--find-batch-size=0", "p"}); }),
                       "--find-batch-size must be at least 1, got 0"));
  EXPECT_TRUE(contains(message_of<zs::UsageError>([] { zl::parse_args({"--find-batch-size=big", "p"}); }),
                       "--find-batch-size 'big' is not an integer"));
  EXPECT_TRUE(contains(message_of<zs::UsageError>([] { zl::parse_args({"--auto-micro-batches=2", "p"}); }),
                       "--auto-micro-batches takes no value (got '--auto-micro-batches=2')"));
  EXPECT_EQ(message_of<zs::UsageError>([] { zl::parse_args({"--find-batch-size", "16", "p"}); }),
            "'16' after --find-batch-size is taken as the program; a size to start from is written --find-batch-size=16");
  EXPECT_TRUE(contains(message_of<zs::UsageError>([] { zl::parse_args({"--find-batch-sise", "p"}); }),
                       "did you mean '--find-batch-size'?"));
  EXPECT_TRUE(contains(zl::usage(), "--find-batch-size [=START]"));
  EXPECT_TRUE(contains(zl::usage(), "--auto-micro-batches"));
}

TEST(FindBatchSize, HalvesFromTheConfiguredSizeUntilOneFits) {
  FakeProgram prog;
  prog.world = 2;
  prog.batch = 96;
  prog.micro = 2;  // P = 48 in micro-batches of 24
  prog.max_fit = 13;
  prog.limit = 14 << 20;
  const zl::BatchSizeSearch s = zl::find_batch_size(prog.runner(), 2, 0);
  EXPECT_EQ(prog.sizes, (std::vector<int64_t>{24, 12}));
  EXPECT_EQ(prog.calls.at(0), (Args{"--memory-trial"}));
  EXPECT_EQ(prog.calls.at(1), (Args{"--memory-trial", "--set", "train.batch_size=24", "--set", "train.micro_batches=1"}));
  EXPECT_EQ(s.found, 12);
  const std::string report = zl::batch_size_report(s);
  EXPECT_TRUE(contains(report, "the largest micro-batch per rank that fits: 12 (on 2 rank(s))")) << report;
  EXPECT_TRUE(contains(report, "1. 24 per rank (the job as configured: 2 micro-batch(es)) -> out of memory\n"
                               "  2. 12 per rank -> fits, peak 12.0 MiB of limit 14.0 MiB\n")) << report;
  EXPECT_TRUE(contains(report, "the sizes between were not tried (--find-batch-size=18 tries one)")) << report;
  EXPECT_TRUE(contains(report, "configured per-rank batch 48 (train.batch_size=96 on 2 rank(s))")) << report;
  EXPECT_TRUE(contains(report, "--set train.micro_batches=4    (4 micro-batch(es) of 12")) << report;

  // Down to 1 through odd sizes: 48 24 12 6 3 1.
  FakeProgram tight;
  tight.max_fit = 1;
  EXPECT_EQ(zl::find_batch_size(tight.runner(), 1, 0).found, 1);
  EXPECT_EQ(tight.sizes, (std::vector<int64_t>{48, 24, 12, 6, 3, 1}));
}

TEST(FindBatchSize, FirstFitAndStart) {
  FakeProgram prog;
  prog.max_fit = 100;
  zl::BatchSizeSearch s = zl::find_batch_size(prog.runner(), 1, 0);
  EXPECT_EQ(s.found, 48);
  std::string report = zl::batch_size_report(s);
  EXPECT_TRUE(contains(report, "The job as configured fits (micro-batch 48); a larger one may fit too: try "
                               "--find-batch-size=96")) << report;
  EXPECT_TRUE(contains(report, "the configured train.micro_batches=1 (1 micro-batch(es) of 48) already fits")) << report;

  FakeProgram started;
  started.world = 4;
  started.max_fit = 5;
  s = zl::find_batch_size(started.runner(), 4, 40);
  EXPECT_EQ(started.sizes, (std::vector<int64_t>{40, 20, 10, 5}));
  EXPECT_EQ(started.calls.at(0),
            (Args{"--memory-trial", "--set", "train.batch_size=160", "--set", "train.micro_batches=1"}));
  EXPECT_FALSE(s.configured.has_value());
  report = zl::batch_size_report(s);
  EXPECT_TRUE(contains(report, "fits: 5 (on 4 rank(s))")) << report;
  EXPECT_TRUE(contains(report, "5 fits and 10 does not; the sizes between were not tried (--find-batch-size=7")) << report;
  EXPECT_TRUE(contains(report, "the fewest M that divides P with P/M <= 5")) << report;

  FakeProgram at_start;
  at_start.max_fit = 8;
  report = zl::batch_size_report(zl::find_batch_size(at_start.runner(), 1, 8));
  EXPECT_TRUE(contains(report, "The first size tried, 8, fits; a larger START may fit too: try --find-batch-size=16"))
      << report;
}

TEST(FindBatchSize, Errors) {
  FakeProgram none;
  none.max_fit = 0;
  std::string e = message_of<zs::Error>([&] { zl::find_batch_size(none.runner(), 1, 0); });
  EXPECT_TRUE(contains(e, "even a micro-batch of 1 per rank runs out of memory on 1 rank(s): what the job holds besides its batch does not fit")) << e;
  for (const char* advice : {"zeroshard-estimate", "sharding.strategy=FULL_SHARD", "offload.optimizer=CPU",
                             "activation_checkpointing.enabled=true"}) {
    EXPECT_TRUE(contains(e, advice)) << advice;
  }
  EXPECT_EQ(none.sizes, (std::vector<int64_t>{48, 24, 12, 6, 3, 1}));

  FakeProgram no_plan;
  no_plan.prints_plan = false;
  no_plan.max_fit = 0;
  e = message_of<zs::Error>([&] { zl::find_batch_size(no_plan.runner(), 1, 0); });
  EXPECT_TRUE(contains(e, "ran out of memory before printing its 'zeroshard-memory-trial: plan ...' line")) << e;
  EXPECT_TRUE(contains(e, "--find-batch-size=START")) << e;
  no_plan.max_fit = 100;
  e = message_of<zs::Error>([&] { zl::find_batch_size(no_plan.runner(), 1, 0); });
  EXPECT_TRUE(contains(e, "fitted but printed no 'zeroshard-memory-trial: plan ...' line")) << e;
  // With START the plan line is not needed.
  EXPECT_EQ(zl::find_batch_size(no_plan.runner(), 1, 4).found, 4);

  FakeProgram deaf;  // does not apply --set: the second trial runs 48 again
  deaf.applies_set = false;
  deaf.max_fit = 30;
  e = message_of<zs::Error>([&] { zl::find_batch_size(deaf.runner(), 1, 0); });
  EXPECT_TRUE(contains(e, "(micro-batch 24 per rank) ran micro_batch_size=48; the program must apply --set")) << e;

  FakeProgram wrong_world;
  wrong_world.world = 2;
  e = message_of<zs::Error>([&] { zl::find_batch_size(wrong_world.runner(), 4, 0); });
  EXPECT_TRUE(contains(e, "printed world_size=2 but the launcher started 4 rank(s)")) << e;
}

TEST(AutoMicroBatches, SplitsThePerRankBatchIntoTheFewestThatFit) {
  FakeProgram prog;
  prog.world = 2;
  prog.batch = 96;  // P = 48
  prog.max_fit = 16;
  prog.limit = 17 << 20;
  const zl::MicroBatchChoice c = zl::choose_micro_batches(prog.runner(), 2);
  EXPECT_EQ(prog.sizes, (std::vector<int64_t>{48, 24, 12, 16}));
  EXPECT_EQ(prog.calls.at(2), (Args{"--memory-trial", "--set", "train.micro_batches=4"}));
  EXPECT_EQ(c.micro_batch_size, 16);
  EXPECT_EQ(c.micro_batches, 3);
  EXPECT_EQ(zl::micro_batch_summary(c),
            "per-rank batch 48 on 2 rank(s): 48 and 24 ran out of memory; 16 fits (peak 16.0 MiB of limit 17.0 MiB; "
            "12 fits too) -> train.micro_batches=3 (3 micro-batch(es) of 16; the global batch 96 is unchanged)");
  EXPECT_EQ(zl::micro_batch_run_args(c), (Args{"--set", "train.micro_batches=3"}));

  FakeProgram fits;
  fits.micro = 2;
  fits.max_fit = 24;
  const zl::MicroBatchChoice same = zl::choose_micro_batches(fits.runner(), 1);
  EXPECT_EQ(fits.sizes, (std::vector<int64_t>{24}));
  EXPECT_EQ(same.micro_batches, 2);
  EXPECT_TRUE(zl::micro_batch_run_args(same).empty());
  EXPECT_EQ(zl::micro_batch_summary(same),
            "per-rank batch 48 on 1 rank(s): the configured 2 micro-batch(es) of 24 fit (peak 24.0 MiB) -> running as "
            "configured");

  FakeProgram prime;
  prime.batch = 7;
  prime.max_fit = 2;
  EXPECT_EQ(zl::choose_micro_batches(prime.runner(), 1).micro_batches, 7);
  EXPECT_EQ(prime.sizes, (std::vector<int64_t>{7, 1}));
}

// Every per-rank batch up to 96 and every memory limit: the choice is the largest divisor of P
// that fits (the fewest micro-batches), found in about 2 log2(P) trials, or the model-state error.
TEST(AutoMicroBatches, ChoosesTheLargestDivisorThatFitsForEveryCase) {
  for (int64_t p = 1; p <= 96; ++p) {
    for (int64_t max_fit = 0; max_fit <= p; ++max_fit) {
      FakeProgram prog;
      prog.batch = p;
      prog.max_fit = max_fit;
      int64_t want = 0;
      for (int64_t d : divisors(p)) {
        if (d <= max_fit) want = d;
      }
      if (want == 0) {
        ASSERT_TRUE(contains(message_of<zs::Error>([&] { zl::choose_micro_batches(prog.runner(), 1); }),
                             "even a micro-batch of 1")) << "P=" << p;
        continue;
      }
      const zl::MicroBatchChoice c = zl::choose_micro_batches(prog.runner(), 1);
      ASSERT_EQ(c.micro_batch_size, want) << "P=" << p << " max_fit=" << max_fit;
      ASSERT_EQ(c.micro_batches, p / want);
      ASSERT_LE(prog.sizes.size(), 2 * std::ceil(std::log2(static_cast<double>(p))) + 1) << "P=" << p << " max_fit=" << max_fit;
      for (int64_t s : prog.sizes) ASSERT_EQ(p % s, 0) << "P=" << p << ": tried " << s;
    }
  }
}

// The process runner on real processes: output echoed line by line with the prefix, protocol
// lines kept, stdin from /dev/null, exit status and signal reported, a missing program an error.
TEST(RunTrialProcess, EchoesKeepsProtocolLinesAndReportsHowItEnded) {
  zl::Plan plan;
  plan.argv = {"sh", "-c",
               "echo hello; echo 'zeroshard-memory-trial: plan x' >&2; read -r line || echo \"stdin: eof\"; "
               "printf 'zeroshard-memory-trial: no newline'; exit 3"};
  ::testing::internal::CaptureStderr();
  const zl::TrialProcess p = zl::run_trial_process(plan);
  const std::string echoed = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(p.exited);
  EXPECT_EQ(p.status, 3);
  EXPECT_EQ(p.output, "zeroshard-memory-trial: plan x\nzeroshard-memory-trial: no newline\n");
  EXPECT_EQ(echoed, "  trial| hello\n  trial| zeroshard-memory-trial: plan x\n  trial| stdin: eof\n"
                    "  trial| zeroshard-memory-trial: no newline\n");

  plan.argv = {"sh", "-c", "kill -9 $$"};
  const zl::TrialProcess killed = zl::run_trial_process(plan);
  EXPECT_FALSE(killed.exited);
  EXPECT_EQ(killed.signal, 9);

  plan.argv = {"/nonexistent/trial-program", "--memory-trial"};
  EXPECT_TRUE(contains(message_of<zs::IoError>([&] { zl::run_trial_process(plan); }),
                       "cannot start the trial '/nonexistent/trial-program --memory-trial': No such file or directory"));
}
