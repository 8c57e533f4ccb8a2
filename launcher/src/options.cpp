// SPDX-License-Identifier: Apache-2.0
// zeroshard-launch's command line: parse_args and usage.

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "zeroshard/base/cli.h"
#include "zeroshard/base/error.h"
#include "zeroshard/launcher/launch.h"

namespace zeroshard::launch {
namespace {

constexpr const char* kDescription =
    "Builds and runs the mpirun (Open MPI) or srun (Slurm) command for a zeroshard job.";

constexpr const char* kFooter = R"(Options end at `--` or at the first argument that is not one: PROGRAM and its arguments follow.
Adds --allow-run-as-root only when run as root and --oversubscribe only when the ranks exceed
the slots (hostfile) or this node's cores. Exit status: the job's (--find-batch-size: 0 when a
size fits, 1 when even 1 does not or a trial fails; trial output is echoed on stderr as
"  trial| ..."); 2 for a bad command line.

Examples:
  zeroshard-launch -n 8 --gpus-per-node 8 --find-batch-size -- build/bin/train_gpt --config examples/configs/gpt_1b.textproto
  zeroshard-launch -n 8 --gpus-per-node 8 --auto-micro-batches -- build/bin/train_gpt --config examples/configs/gpt_1b.textproto
)";

template <typename E>
E choice_value(const std::string& text, const std::vector<std::pair<const char*, E>>& choices) {
  for (const auto& [name, value] : choices) {
    if (text == name) return value;
  }
  return choices.front().second;  // not reached: the App checked the choice
}

EnvVar parse_env(const std::string& text) {
  EnvVar v;
  const size_t eq = text.find('=');
  v.name = text.substr(0, eq);
  if (eq != std::string::npos) v.value = text.substr(eq + 1);
  bool ok = !v.name.empty() && !std::isdigit(static_cast<unsigned char>(v.name[0]));
  for (char c : v.name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
  ZS_REQUIRE(ok, UsageError, "--env '", text, "': '", v.name,
             "' is not a variable name (letters, digits and '_', not starting with a digit)");
  return v;
}

// What the command line is read into before it becomes LaunchOptions.
struct Texts {
  std::string bind, map, launcher;
  std::vector<std::string> env;
  bool automatic = false;  // --auto-micro-batches
};

// Where the ranks run: their count, hosts, GPUs and CPU binding.
void add_placement_options(cli::App& app, LaunchOptions& o, Texts& t) {
  app.add_int("-n,--np", &o.np, "number of ranks (under srun: default SLURM_NTASKS); -np N works too", 1);
  app.add_text("--hostfile", &o.hostfile, "hosts to run on, one \"HOST slots=K\" per line ('#' comments)", "FILE");
  app.add_int("--gpus-per-node", &o.gpus_per_node,
              "G ranks per node, local rank i on GPU i of the node; the node's\n"
              "CUDA_VISIBLE_DEVICES (if set) picks which GPUs",
              1)
      ->type_name("G");
  app.add_flag("--skip-gpu-check", &o.skip_gpu_check,
               "do not check G against this node's GPUs (launching from a node\nwithout GPUs, e.g. a login node)");
  app.add_int("--cpus-per-rank", &o.cpus_per_rank, "bind each rank to K cores (default: cores / ranks per node)", 1)
      ->type_name("K");
  app.add_choice("--bind-to", &t.bind, {"core", "socket", "none"},
                 "CPU binding (default: core; none when oversubscribed)");
  app.add_choice("--map-by", &t.map, {"slot", "node", "socket"},
                 "rank placement without --gpus-per-node (default: slot)");
}

// Trials that size the micro-batch, and restarts after a failure.
void add_trial_and_restart_options(cli::App& app, LaunchOptions& o, Texts& t) {
  app.add_optional("--find-batch-size", "[=START]",
                   "run short trials (PROGRAM --memory-trial, 2 steps) to find the\n"
                   "largest micro-batch per rank that fits in memory: the job as\n"
                   "configured first (or START per rank), halving on out of memory.\n"
                   "Prints each trial, the size, and the train.micro_batches to use\n"
                   "for the configured batch; runs no training",
                   [&o](const std::string* start) {
                     o.trial_mode = TrialMode::kFindBatchSize;
                     const int64_t v = start == nullptr ? 0 : cli::parse_int("--find-batch-size", *start, 1);
                     ZS_REQUIRE(v <= (1 << 24), UsageError, "--find-batch-size=", v, " is not a micro-batch size");
                     o.find_batch_start = static_cast<int>(v);
                   });
  app.add_flag("--auto-micro-batches", &t.automatic,
               "trial the job as configured; while it runs out of memory, split\n"
               "the per-rank batch into more micro-batches (same global batch),\n"
               "then run the job with --set train.micro_batches=M appended");
  app.add_int("--max-restarts", &o.max_restarts,
              "when the job fails (a rank died, a node was lost), run it again,\n"
              "at most N times; give the program --resume=auto so a restart\n"
              "continues from its newest checkpoint. A job stopped by a signal\n"
              "sent to zeroshard-launch (forwarded to it) is not restarted",
              0)
      ->type_name("N");
  app.add_int("--min-ranks", &o.min_ranks,
              "with --max-restarts: take a failed run to have lost a rank for good\n"
              "and restart it on one rank fewer, never below M (the program\n"
              "resumes its checkpoint resharded; its global batch must divide)",
              1)
      ->type_name("M");
  app.add_number("--restart-delay", &o.restart_delay, "seconds between a failure and the restart (default 3)", 0,
                 3600)
      ->type_name("SECONDS");
}

// The launcher's options on `app`, read into `o` and `t` (in --help in this order).
void add_options(cli::App& app, LaunchOptions& o, Texts& t) {
  app.usage("zeroshard-launch -n N [OPTIONS] [--] PROGRAM [ARGS...]").footer(kFooter).prefix_command();
  add_placement_options(app, o, t);
  app.add_list("-x,--env", &t.env,
               "pass a variable to every rank (repeatable); NAME alone passes\nthis shell's value, which must be set",
               "NAME[=VALUE]");
  app.add_choice("--launcher", &t.launcher, {"auto", "mpirun", "srun"},
                 "default auto: srun inside a Slurm allocation without --hostfile,\nmpirun otherwise");
  app.add_list("--launcher-arg", &o.launcher_args, "extra argument for mpirun/srun, verbatim (repeatable)", "ARG");
  app.add_flag("--dry-run", &o.dry_run,
               "print the command (shell-quoted) instead of running it; with\n"
               "the two options below, the first trial's command");
  add_trial_and_restart_options(app, o, t);
  app.then([&o, &t] {
    if (t.automatic) {
      ZS_REQUIRE(o.trial_mode == TrialMode::kNone, UsageError,
                 "--find-batch-size and --auto-micro-batches cannot be combined: --find-batch-size reports the "
                 "largest micro-batch and exits, --auto-micro-batches chooses train.micro_batches and runs the job");
      o.trial_mode = TrialMode::kAutoMicroBatches;
    }
    if (!t.bind.empty()) {
      o.bind = choice_value<Binding>(t.bind, {{"core", Binding::kCore}, {"socket", Binding::kSocket}, {"none", Binding::kNone}});
    }
    if (!t.map.empty()) {
      o.map = choice_value<Mapping>(t.map, {{"slot", Mapping::kSlot}, {"node", Mapping::kNode}, {"socket", Mapping::kSocket}});
    }
    if (!t.launcher.empty()) {
      o.launcher = choice_value<Launcher>(t.launcher, {{"auto", Launcher::kAuto}, {"mpirun", Launcher::kMpirun},
                                                       {"srun", Launcher::kSrun}});
    }
    for (const std::string& e : t.env) o.env.push_back(parse_env(e));
    if (o.min_ranks > 0) {
      ZS_REQUIRE(o.max_restarts > 0, UsageError, "--min-ranks ", o.min_ranks,
                 " says how far restarts may shrink the job; it needs --max-restarts N");
      ZS_REQUIRE(o.np == 0 || o.min_ranks <= o.np, UsageError, "--min-ranks ", o.min_ranks, " exceeds -n ", o.np);
    }
  });
}

// mpirun users type `-np N`, which CLI11 would read as `-n p`: spelled --np before the program.
std::vector<std::string> spell_np(const std::vector<std::string>& args, cli::App& app) {
  std::vector<std::string> out = args;
  for (size_t i = 0; i < out.size(); ++i) {
    const std::string& a = out[i];
    if (a == "--" || a.size() < 2 || a[0] != '-') break;  // the program starts here
    if (a == "-np") out[i] = "--np";
    const CLI::Option* opt = app.cli().get_option_no_throw(out[i]);
    if (opt != nullptr && opt->get_type_size_min() > 0) ++i;  // its value
  }
  return out;
}

}  // namespace

std::string usage() {
  LaunchOptions o;
  Texts t;
  cli::App app("zeroshard-launch", kDescription);
  add_options(app, o, t);
  return app.help();
}

LaunchOptions parse_args(const std::vector<std::string>& args) {
  LaunchOptions o;
  Texts t;
  cli::App app("zeroshard-launch", kDescription);
  add_options(app, o, t);
  std::vector<std::string> argv = spell_np(args, app);
  argv.insert(argv.begin(), "zeroshard-launch");
  if (!app.parse(argv, /*print=*/false)) {
    o.help = app.given("--help");
    o.version = !o.help;
    return o;
  }
  o.program = app.rest();
  ZS_REQUIRE(!o.program.empty(), UsageError,
             "no program to run; usage: zeroshard-launch -n N [options] -- PROGRAM [ARGS...]");
  const std::string& first = o.program[0];
  ZS_REQUIRE(o.trial_mode != TrialMode::kFindBatchSize || o.find_batch_start != 0 || first.empty() ||
                 !std::all_of(first.begin(), first.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); }),
             UsageError, "'", first, "' after --find-batch-size is taken as the program; a size to start from is "
             "written --find-batch-size=", first);
  return o;
}

}  // namespace zeroshard::launch
