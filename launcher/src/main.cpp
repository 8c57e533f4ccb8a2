// SPDX-License-Identifier: Apache-2.0
// zeroshard-launch: see zeroshard/launcher/launch.h and docs/tools.md.
//
//   zeroshard-launch -n 4 --hostfile hosts --gpus-per-node 2 --env NCCL_DEBUG=WARN -- build/bin/prog --set ...
//
// Prints the command it runs on stderr (with the reasons for the flags it added), then replaces
// itself with mpirun/srun, so the job's exit status is this command's (with --max-restarts it stays,
// runs the job as its child and runs it again after a failure). --dry-run prints the
// command on stdout instead. Errors: one line on stderr ("zeroshard-launch: usage error: ..." and
// exit 2 for a bad command line, "zeroshard-launch: error: ..." and 1 otherwise).
// --find-batch-size and --auto-micro-batches first run trial jobs (zeroshard/launcher/trial.h):
// the first prints what it found on stdout and exits 0, the second execs the job as above.

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "zeroshard/base/cli.h"
#include "zeroshard/base/error.h"
#include "zeroshard/launcher/launch.h"
#include "zeroshard/launcher/trial.h"

namespace zl = zeroshard::launch;

namespace {

// Runs one trial: the plan with `extra` among the program's arguments, classified.
zl::TrialResult run_trial(const zl::Plan& plan, const std::vector<std::string>& extra) {
  const zl::Plan trial = zl::with_program_args(plan, extra);
  const std::string line = zl::shell_line(trial);
  std::fprintf(stderr, "zeroshard-launch: trial: %s\n", line.c_str());
  return zl::classify_trial(zl::run_trial_process(trial), line);
}

std::vector<std::string> first_trial_args(const zl::LaunchOptions& o, int ranks) {
  if (o.trial_mode == zl::TrialMode::kFindBatchSize && o.find_batch_start > 0) {
    return zl::batch_trial_args(o.find_batch_start, ranks);
  }
  return zl::configured_trial_args();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const zl::LaunchOptions options = zl::parse_args(std::vector<std::string>(argv + 1, argv + argc));
    if (options.help) {
      std::fputs(zl::usage().c_str(), stdout);
      return 0;
    }
    if (options.version) {
      std::printf("%s\n", zeroshard::cli::version_line("zeroshard-launch").c_str());
      return 0;
    }
    const zl::MachineFacts facts = zl::detect_machine();
    zl::Plan plan = zl::build_plan(options, facts);
    for (const auto& note : plan.notes) std::fprintf(stderr, "zeroshard-launch: %s\n", note.c_str());
    const bool trials = options.trial_mode != zl::TrialMode::kNone;
    if (options.dry_run) {
      if (trials) {
        const bool automatic = options.trial_mode == zl::TrialMode::kAutoMicroBatches;
        std::fprintf(stderr, "zeroshard-launch: %s: this is the first trial; the next trials%s depend on its result\n",
                     automatic ? "--auto-micro-batches" : "--find-batch-size", automatic ? " and the job's command" : "");
        plan = zl::with_program_args(plan, first_trial_args(options, plan.ranks));
      }
      std::printf("%s\n", zl::shell_line(plan).c_str());
      return 0;
    }
    for (const auto& [name, value] : plan.setenv) ::setenv(name.c_str(), value.c_str(), 1);
    const zl::RunTrial run = [&plan](const std::vector<std::string>& extra) { return run_trial(plan, extra); };
    if (options.trial_mode == zl::TrialMode::kFindBatchSize) {
      const zl::BatchSizeSearch search = zl::find_batch_size(run, plan.ranks, options.find_batch_start);
      std::fflush(stderr);
      std::fputs(zl::batch_size_report(search).c_str(), stdout);
      return 0;
    }
    std::vector<std::string> chosen;  // --auto-micro-batches: the arguments its choice added
    if (options.trial_mode == zl::TrialMode::kAutoMicroBatches) {
      const zl::MicroBatchChoice choice = zl::choose_micro_batches(run, plan.ranks);
      std::fprintf(stderr, "zeroshard-launch: %s\n", zl::micro_batch_summary(choice).c_str());
      chosen = zl::micro_batch_run_args(choice);
      plan = zl::with_program_args(plan, chosen);
    }
    const std::string line = zl::shell_line(plan);
    std::fprintf(stderr, "zeroshard-launch: %s\n", line.c_str());
    if (options.max_restarts > 0 && options.min_ranks > 0) {
      // Each restart on one rank fewer: the same command for that count (the auto-micro-batches
      // choice's arguments kept).
      const auto plan_for = [&](int ranks) {
        if (ranks == plan.ranks) return plan;
        zl::LaunchOptions fewer = options;
        fewer.np = ranks;
        zl::Plan p = zl::with_program_args(zl::build_plan(fewer, facts), chosen);
        for (const auto& [name, value] : p.setenv) ::setenv(name.c_str(), value.c_str(), 1);
        return p;
      };
      return zl::run_with_restarts(plan_for, plan.ranks, options.max_restarts, options.restart_delay,
                                   options.min_ranks);
    }
    if (options.max_restarts > 0) return zl::run_with_restarts(plan, options.max_restarts, options.restart_delay);
    std::vector<char*> args;
    for (const auto& a : plan.argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    std::fflush(nullptr);
    ::execvp(args[0], args.data());
    const int err = errno;
    std::fprintf(stderr, "zeroshard-launch: error: cannot start '%s': %s\n", args[0],
                 zeroshard::detail::errno_string(err).c_str());
    return 127;
  } catch (const zeroshard::UsageError& e) {
    std::fprintf(stderr, "zeroshard-launch: usage error: %s\n", e.message().c_str());
    return 2;
  } catch (const zeroshard::Error& e) {
    std::fprintf(stderr, "zeroshard-launch: error: %s\n", e.message().c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zeroshard-launch: error: %s\n", e.what());
    return 1;
  }
}
