// SPDX-License-Identifier: Apache-2.0
#pragma once
// zeroshard-launch: turns a small, checked command line into the right `mpirun` (Open MPI) or
// `srun` (Slurm) command, then runs it. The pieces are separate so each can be tested alone:
//
//   parse_args     argv -> LaunchOptions          (UsageError naming the bad argument)
//   parse_hostfile "host slots=K" lines -> hosts   (IoError / ConfigError with FILE:LINE)
//   detect_machine what this node has               (cores, GPUs, root, Slurm, launchers on PATH)
//   build_plan     options + facts -> the command  (pure: no I/O, so every rule is testable with
//                                                   made-up MachineFacts)
//   trial.h        --find-batch-size / --auto-micro-batches: trial jobs before the real one
//
// Rules build_plan applies (docs/tools.md explains them for users):
//   - launcher: srun inside a Slurm allocation (SLURM_JOB_ID set) when no --hostfile is given,
//     mpirun otherwise; --launcher forces one.
//   - mpirun gets --allow-run-as-root only when running as root, and --oversubscribe only when
//     the ranks exceed the slots (hostfile slots, else this node's cores).
//   - --gpus-per-node G places G ranks per node; every rank of a node sees the same G GPUs
//     (CUDA_VISIBLE_DEVICES) and local rank i uses the i-th of them (the Session picks
//     cuda:<local rank>), which keeps CUDA peer access between the node's GPUs for NCCL. Asking
//     for more GPUs than this node has is an error.
//   - CPU binding: each rank is bound to --cpus-per-rank cores (default: this node's cores divided
//     by the ranks per node); oversubscribed jobs are not bound unless --bind-to asks for it.
// Thread-safety: all functions are reentrant.

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace zeroshard::launch {

enum class Launcher { kAuto, kMpirun, kSrun };
enum class Binding { kAuto, kCore, kSocket, kNone };
enum class Mapping { kAuto, kSlot, kNode, kSocket };
// Trial jobs before (or instead of) the real run: zeroshard/launcher/trial.h.
enum class TrialMode { kNone, kFindBatchSize, kAutoMicroBatches };

struct EnvVar {
  std::string name;
  std::optional<std::string> value;  // none: pass this process's value of `name`
};

struct LaunchOptions {
  int np = 0;                 // -n; 0 = not given
  std::string hostfile;       // --hostfile
  int gpus_per_node = 0;      // --gpus-per-node; 0 = no GPU placement
  bool skip_gpu_check = false;  // --skip-gpu-check: do not compare G with this node's GPUs
  int cpus_per_rank = 0;      // --cpus-per-rank; 0 = automatic
  Binding bind = Binding::kAuto;
  Mapping map = Mapping::kAuto;
  std::vector<EnvVar> env;    // --env, in order
  Launcher launcher = Launcher::kAuto;
  std::vector<std::string> launcher_args;  // --launcher-arg, passed verbatim before the program
  bool dry_run = false;
  bool help = false;                        // --help: print usage() and exit
  bool version = false;                     // --version: print the version line and exit
  TrialMode trial_mode = TrialMode::kNone;  // --find-batch-size[=START] / --auto-micro-batches
  int find_batch_start = 0;                 // START; 0 = the configured micro-batch
  int max_restarts = 0;                     // --max-restarts: run the job again after a failure
  double restart_delay = 3;                 // --restart-delay: seconds between a failure and the restart
  int min_ranks = 0;                        // --min-ranks: each restart on one rank fewer, never below it; 0: the same count
  std::vector<std::string> program;  // the program and its arguments
};

// The usage text printed by --help.
std::string usage();

// Parses the arguments after argv[0] (with zeroshard/base/cli.h, so every zeroshard program's
// command line behaves alike). Options end at `--` or at the first argument that is not an option
// (that argument starts the program); `-np N` is taken as `-n N`. Throws UsageError for an
// unknown option (naming the nearest known one), a missing or malformed value, -n below 1, a bad
// --env name, --find-batch-size with --auto-micro-batches, or no program (unless --help or
// --version).
LaunchOptions parse_args(const std::vector<std::string>& args);

struct HostEntry {
  std::string host;
  int slots = 1;  // "slots=K"; 1 when the line gives none (Open MPI's rule)
  int line = 0;   // 1-based line in the file
};

// Open MPI hostfile syntax, the subset users write: one host per line, optionally followed by
// `slots=K` and `max_slots=K`; `#` starts a comment; blank lines are skipped. Throws IoError when
// the file cannot be read and ConfigError ("FILE:LINE: ...") for anything else, including a file
// with no host and a host listed twice.
std::vector<HostEntry> parse_hostfile(const std::string& path);
std::vector<HostEntry> parse_hostfile_text(const std::string& text, const std::string& source);

using GetEnv = std::function<const char*(const char*)>;

// What build_plan needs to know about this node and process. detect_machine() fills it from the
// real system; tests make their own.
struct MachineFacts {
  bool is_root = false;
  int cores = 1;    // physical cores this process may run on (Open MPI's default slot count)
  int gpus = 0;     // NVIDIA GPUs on this node
  std::string gpu_probe;   // how `gpus` was found: "nvidia-smi -L", "/proc/driver/nvidia/gpus",
                           // or "" when neither exists (no NVIDIA driver on this node)
  bool in_slurm = false;   // SLURM_JOB_ID is set: inside an allocation
  int slurm_ntasks = 0;    // SLURM_NTASKS of the allocation; 0 when unknown
  std::string mpirun;      // path of mpirun on PATH; empty when not found
  std::string srun;        // path of srun on PATH; empty when not found
  GetEnv getenv;           // environment lookups (CUDA_VISIBLE_DEVICES, --env NAME)
  // Whether a program name resolves to an executable (a path with '/', or a name on PATH).
  std::function<bool(const std::string&)> program_exists;
};

MachineFacts detect_machine();

struct Plan {
  std::vector<std::string> argv;  // the launcher command, program included
  size_t program_index = 0;       // argv[program_index] is the program; its arguments follow
  int ranks = 0;                  // the job's ranks (-n, or SLURM_NTASKS under srun)
  // Variables to set in this process before exec (srun passes its environment to the ranks).
  std::vector<std::pair<std::string, std::string>> setenv;
  std::vector<std::string> notes;  // why a flag was added or left out, for the user (stderr)
};

// Builds the command. Throws UsageError for requests that cannot be honoured (more GPUs than the
// node has, --hostfile with srun, a binding that does not fit, an --env name that is not set, a
// program that does not exist) and IoError/ConfigError from the hostfile.
Plan build_plan(const LaunchOptions& options, const MachineFacts& facts);

// --max-restarts (elastic restart of the whole job): runs the plan's command as a child process
// (this process's stdin, stdout and stderr), forwarding SIGTERM, SIGINT, SIGUSR1 and SIGUSR2 to
// it. When the job fails (a non-zero exit status, or a signal ended it) and fewer than
// `max_restarts` restarts were made, says so on stderr, waits `delay_seconds` and runs it again: a
// lost rank ends the whole job (mpirun and srun do), and the restarted job continues from its
// newest checkpoint when the program was given --resume=auto. A job this process was asked to stop
// (one of those signals arrived) is not restarted. Returns the status to exit with: the last
// run's exit status, or 128 + the signal that ended it. IoError when the command cannot start.
int run_with_restarts(const Plan& plan, int max_restarts, double delay_seconds);

// The same with --min-ranks (min_ranks > 0): a failed run of R ranks is taken to have lost a rank
// for good (its node, its GPU), so the restart runs `plan_for(R - 1)`; when that would be below
// min_ranks the launcher gives up, saying why. A program that resumes with --resume=auto continues
// from its newest checkpoint on the ranks that remain (the checkpoint is resharded as it loads).
// The summary on stderr at the end names every run's rank count and how it ended.
int run_with_restarts(const std::function<Plan(int ranks)>& plan_for, int ranks, int max_restarts,
                      double delay_seconds, int min_ranks);

// One word quoted for a POSIX shell: unchanged when it only holds safe characters, else in single
// quotes ('\'' for a quote).
std::string shell_quote(const std::string& word);
// The plan as one line a shell runs as is: `env A=1 srun ...` or `mpirun ...`.
std::string shell_line(const Plan& plan);

}  // namespace zeroshard::launch
