// zeroshard-launch's command line: parse_args and usage.

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "zeroshard/base/error.h"
#include "zeroshard/base/format.h"
#include "zeroshard/launcher/launch.h"

namespace zeroshard::launch {
namespace {

struct OptionSpec {
  const char* name;   // as typed, e.g. "--hostfile"
  const char* alias;  // another spelling, or nullptr
  bool takes_value;
  bool optional_value = false;  // only as --name=VALUE
};

const OptionSpec kOptions[] = {
    {"-n", "--np", true},
    {"--hostfile", nullptr, true},
    {"--gpus-per-node", nullptr, true},
    {"--skip-gpu-check", nullptr, false},
    {"--cpus-per-rank", nullptr, true},
    {"--bind-to", nullptr, true},
    {"--map-by", nullptr, true},
    {"--env", "-x", true},
    {"--launcher", nullptr, true},
    {"--launcher-arg", nullptr, true},
    {"--dry-run", nullptr, false},
    {"--find-batch-size", nullptr, false, true},
    {"--auto-micro-batches", nullptr, false},
    {"--help", "-h", false},
};

std::string unknown_option_message(const std::string& arg) {
  std::string best;
  size_t best_d = std::string::npos;
  for (const OptionSpec& o : kOptions) {
    for (const char* name : {o.name, o.alias}) {
      if (name == nullptr) continue;
      size_t d = edit_distance(arg, name);
      if (d < best_d) best_d = d, best = o.name;
    }
  }
  std::ostringstream os;
  os << "unknown option '" << arg << "'";
  if (best_d <= std::max<size_t>(2, arg.size() / 3)) os << "; did you mean '" << best << "'?";
  os << " (zeroshard-launch --help lists the options; the program's own options go after `--`)";
  return os.str();
}

int parse_positive(const std::string& option, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  ZS_REQUIRE(!text.empty() && end != nullptr && *end == '\0' && errno == 0 && v <= 1 << 24, UsageError, option,
             " takes a whole number, got '", text, "'");
  ZS_REQUIRE(v >= 1, UsageError, option, " must be at least 1, got ", v);
  return static_cast<int>(v);
}

template <typename E>
E parse_choice(const std::string& option, const std::string& text,
               const std::vector<std::pair<const char*, E>>& choices) {
  std::string allowed;
  for (const auto& [name, value] : choices) {
    if (text == name) return value;
    allowed += (allowed.empty() ? "" : ", ") + std::string(name);
  }
  ZS_THROW(UsageError, option, " takes one of ", allowed, "; got '", text, "'");
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

}  // namespace

std::string usage() {
  return R"(usage: zeroshard-launch -n N [options] [--] PROGRAM [ARGS...]

Builds and runs the mpirun (Open MPI) or srun (Slurm) command for a zeroshard job.

  -n, --np N               number of ranks (under srun: default SLURM_NTASKS)
  --hostfile FILE          hosts to run on, one "HOST slots=K" per line ('#' comments)
  --gpus-per-node G        G ranks per node, local rank i on GPU i of the node; the node's
                           CUDA_VISIBLE_DEVICES (if set) picks which GPUs
  --skip-gpu-check         do not check G against this node's GPUs (launching from a node
                           without GPUs, e.g. a login node)
  --cpus-per-rank K        bind each rank to K cores (default: cores / ranks per node)
  --bind-to core|socket|none
                           CPU binding (default: core; none when oversubscribed)
  --map-by slot|node|socket
                           rank placement without --gpus-per-node (default: slot)
  -x, --env NAME[=VALUE]   pass a variable to every rank (repeatable); NAME alone passes
                           this shell's value, which must be set
  --launcher auto|mpirun|srun
                           default auto: srun inside a Slurm allocation without --hostfile,
                           mpirun otherwise
  --launcher-arg ARG       extra argument for mpirun/srun, verbatim (repeatable)
  --dry-run                print the command (shell-quoted) instead of running it; with
                           the two options below, the first trial's command
  --find-batch-size[=START]
                           run short trials (PROGRAM --memory-trial, 2 steps) to find the
                           largest micro-batch per rank that fits in memory: the job as
                           configured first (or START per rank), halving on out of memory.
                           Prints each trial, the size, and the train.micro_batches to use
                           for the configured batch; runs no training
  --auto-micro-batches     trial the job as configured; while it runs out of memory, split
                           the per-rank batch into more micro-batches (same global batch),
                           then run the job with --set train.micro_batches=M appended
  -h, --help               this text

Adds --allow-run-as-root only when run as root and --oversubscribe only when the ranks exceed
the slots (hostfile) or this node's cores. Exit status: the job's (--find-batch-size: 0 when a
size fits, 1 when even 1 does not or a trial fails; trial output is echoed on stderr as
"  trial| ...").

Examples:
  zeroshard-launch -n 8 --gpus-per-node 8 --find-batch-size -- build/bin/train_gpt --config examples/configs/gpt_1b.textproto
  zeroshard-launch -n 8 --gpus-per-node 8 --auto-micro-batches -- build/bin/train_gpt --config examples/configs/gpt_1b.textproto
)";
}

LaunchOptions parse_args(const std::vector<std::string>& args) {
  LaunchOptions o;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.empty() || arg[0] != '-' || arg == "-") break;  // the program starts here
    std::string name = arg, inline_value;
    bool has_inline = false;
    if (arg.rfind("--", 0) == 0 && arg.find('=') != std::string::npos) {
      name = arg.substr(0, arg.find('='));
      inline_value = arg.substr(arg.find('=') + 1);
      has_inline = true;
    }
    if (name == "-np") name = "-n";  // mpirun users type this
    const OptionSpec* spec = nullptr;
    for (const OptionSpec& s : kOptions) {
      if (name == s.name || (s.alias != nullptr && name == s.alias)) spec = &s;
    }
    ZS_REQUIRE(spec != nullptr, UsageError, unknown_option_message(name));
    const std::string opt = spec->name;
    std::string value;
    if (spec->takes_value) {
      if (has_inline) {
        value = inline_value;
      } else {
        ZS_REQUIRE(i + 1 < args.size(), UsageError, arg, " needs a value (see zeroshard-launch --help)");
        value = args[++i];
      }
    } else if (has_inline) {
      ZS_REQUIRE(spec->optional_value, UsageError, name, " takes no value, got '", arg, "'");
      value = inline_value;
    }

    if (opt == "-n") {
      o.np = parse_positive("-n", value);
    } else if (opt == "--hostfile") {
      ZS_REQUIRE(!value.empty(), UsageError, "--hostfile needs a file name");
      o.hostfile = value;
    } else if (opt == "--gpus-per-node") {
      o.gpus_per_node = parse_positive(opt, value);
    } else if (opt == "--skip-gpu-check") {
      o.skip_gpu_check = true;
    } else if (opt == "--cpus-per-rank") {
      o.cpus_per_rank = parse_positive(opt, value);
    } else if (opt == "--bind-to") {
      o.bind = parse_choice<Binding>(opt, value, {{"core", Binding::kCore}, {"socket", Binding::kSocket},
                                                  {"none", Binding::kNone}});
    } else if (opt == "--map-by") {
      o.map = parse_choice<Mapping>(opt, value, {{"slot", Mapping::kSlot}, {"node", Mapping::kNode},
                                                 {"socket", Mapping::kSocket}});
    } else if (opt == "--env") {
      o.env.push_back(parse_env(value));
    } else if (opt == "--launcher") {
      o.launcher = parse_choice<Launcher>(opt, value, {{"auto", Launcher::kAuto}, {"mpirun", Launcher::kMpirun},
                                                       {"srun", Launcher::kSrun}});
    } else if (opt == "--launcher-arg") {
      o.launcher_args.push_back(value);
    } else if (opt == "--dry-run") {
      o.dry_run = true;
    } else if (opt == "--help") {
      o.help = true;
    } else if (opt == "--find-batch-size" || opt == "--auto-micro-batches") {
      const TrialMode mode = opt == "--find-batch-size" ? TrialMode::kFindBatchSize : TrialMode::kAutoMicroBatches;
      ZS_REQUIRE(o.trial_mode == TrialMode::kNone || o.trial_mode == mode, UsageError,
                 "--find-batch-size and --auto-micro-batches cannot be combined: --find-batch-size reports the "
                 "largest micro-batch and exits, --auto-micro-batches chooses train.micro_batches and runs the job");
      o.trial_mode = mode;
      if (mode == TrialMode::kFindBatchSize) o.find_batch_start = has_inline ? parse_positive(opt, value) : 0;
    }
  }
  o.program.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  if (o.help) return o;
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
