// SPDX-License-Identifier: Apache-2.0
#pragma once
// Trial jobs for zeroshard-launch --find-batch-size and --auto-micro-batches: short runs of the
// job with `--memory-trial` that tell whether a micro-batch fits in memory.
//
// The protocol (the program's side; train_gpt and train_fashion_mnist implement it):
//   - `--memory-trial`: build the model, run 2 optimizer steps at the configured batch, exit 0.
//   - rank 0 prints, before the first step,
//       zeroshard-memory-trial: plan world_size=W per_rank_batch=P micro_batches=M micro_batch_size=S
//     (P = train.batch_size / W, S = P / M) and, after the steps,
//       zeroshard-memory-trial: fits micro_batch_size=S peak_bytes=B limit_bytes=L   (L = 0: no limit)
//   - running out of memory on any rank ends the job with exit status 3 (kTrialOutOfMemoryStatus);
//     any other failure is another non-zero status.
//   - `--set key=value` overrides the config, later ones win; the program's options end at `--`.
//
// The pieces: parsing and classifying a trial's output, the next size to try and the micro-batch
// count to use (all pure, tested exhaustively in tests/tools/test_launcher.cpp), the two searches
// (pure too: they run trials through a RunTrial callback, so tests drive them with a fake), and
// run_trial_process (trial_process.cpp), the only part that starts processes.
// Thread-safety: all functions are reentrant; run_trial_process writes to this process's stderr.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "zeroshard/base/error.h"  // kOutOfMemoryExitCode
#include "zeroshard/launcher/launch.h"

namespace zeroshard::launch {

// The out-of-memory exit status every zeroshard program uses (run_main, base/error.h).
inline constexpr int kTrialOutOfMemoryStatus = kOutOfMemoryExitCode;
inline constexpr const char* kTrialFlag = "--memory-trial";
inline constexpr const char* kTrialPrefix = "zeroshard-memory-trial:";

struct TrialPlanLine {
  int64_t world_size = 0;
  int64_t per_rank_batch = 0;
  int64_t micro_batches = 0;
  int64_t micro_batch_size = 0;
};

struct TrialFitsLine {
  int64_t micro_batch_size = 0;
  int64_t peak_bytes = 0;
  int64_t limit_bytes = 0;  // 0: the program set no memory limit
};

// The first "zeroshard-memory-trial: plan ..." / "... fits ..." line of `output` (the prefix may
// stand anywhere in a line, e.g. after an mpirun --tag-output tag; keys may come in any order and
// unknown keys are ignored). nullopt when there is none; Error naming the line when one is
// malformed: a key missing or repeated, a value that is not a whole number, a size below 1 (a
// negative byte count), or a plan with P != M x S.
std::optional<TrialPlanLine> parse_trial_plan(const std::string& output);
std::optional<TrialFitsLine> parse_trial_fits(const std::string& output);

// How a trial process ended.
struct TrialProcess {
  bool exited = true;  // false: killed by `signal`
  int status = 0;      // exit status when exited
  int signal = 0;
  std::string output;  // the lines of its stdout+stderr that hold kTrialPrefix (all were echoed)
};

struct TrialResult {
  bool fits = false;  // false: ran out of memory (exit status 3)
  std::optional<TrialPlanLine> plan;
  TrialFitsLine fits_line;  // when fits
};

// Exit 0 with a fits line: fits; exit 3: out of memory. Throws Error naming `command` for
// anything else: exit 0 without a fits line (the program must support --memory-trial), another
// status or a signal ("see the trial output above"), a malformed protocol line.
TrialResult classify_trial(const TrialProcess& process, const std::string& command);

// `argv` with `extra` inserted among the program's arguments (the program is argv[program_index]):
// before the first `--` after the program if there is one, else at the end. So the trial's
// --set overrides come after the user's own (later ones win) and arguments after `--` stay last.
std::vector<std::string> insert_program_args(const std::vector<std::string>& argv, size_t program_index,
                                             const std::vector<std::string>& extra);
// The plan with `extra` inserted that way (program_index is kept).
Plan with_program_args(const Plan& plan, const std::vector<std::string>& extra);

// The arguments of each kind of trial.
std::vector<std::string> configured_trial_args();                                     // --memory-trial
std::vector<std::string> batch_trial_args(int64_t micro_batch_size, int world_size);  // batch S*W, 1 micro-batch
std::vector<std::string> micro_batches_trial_args(int64_t micro_batches);             // same batch, M micro-batches
std::vector<std::string> micro_batches_override(int64_t micro_batches);               // for the real run

// --find-batch-size's next size after `size` ran out of memory: size / 2; 0 when that is below 1.
int64_t halve_micro_batch(int64_t size);
// --auto-micro-batches' next size after `size` ran out of memory: the largest divisor of
// `per_rank_batch` that is <= size / 2 (so P / it micro-batches divide P exactly); 0 when none.
int64_t next_micro_batch_size(int64_t per_rank_batch, int64_t size);
// After `fits` fitted and `oom` ran out of memory: the middle one of the divisors of
// `per_rank_batch` strictly between them (the upper middle of an even count); 0 when none.
int64_t refine_micro_batch_size(int64_t per_rank_batch, int64_t fits, int64_t oom);
// The fewest micro-batches M with P % M == 0 and P / M <= max_size (max_size >= 1).
int64_t micro_batches_for(int64_t per_rank_batch, int64_t max_size);

// One trial as the searches record it.
struct TrialRecord {
  int64_t micro_batch_size = 0;
  bool fits = false;
  bool as_configured = false;  // the job as configured (only --memory-trial added)
  int64_t micro_batches = 0;   // when as_configured, or in --auto-micro-batches
  int64_t peak_bytes = 0, limit_bytes = 0;  // when fits
};

// Runs one trial with `extra` inserted into the program's arguments; throws Error when the
// trial neither fitted nor ran out of memory.
using RunTrial = std::function<TrialResult(const std::vector<std::string>& extra)>;

struct BatchSizeSearch {
  int world_size = 0;
  int64_t start = 0;                         // --find-batch-size=START; 0: the configured size
  std::optional<TrialPlanLine> configured;   // the first trial's plan, when START was not given
  std::vector<TrialRecord> trials;
  int64_t found = 0;                         // the largest size that fitted
};

// --find-batch-size: the first trial runs the job as configured (start == 0) or at `start`,
// then halves the per-rank micro-batch (train.batch_size = S x W, 1 micro-batch) until one fits.
// Throws Error when even 1 runs out of memory (what the job holds besides its batch does not fit), when a
// needed plan line is missing, or when a trial ran another size or world than asked for.
BatchSizeSearch find_batch_size(const RunTrial& run, int world_size, int64_t start);
// What --find-batch-size prints on stdout: the size found, each trial, the --set to use.
std::string batch_size_report(const BatchSizeSearch& search);

struct MicroBatchChoice {
  int world_size = 0;
  TrialPlanLine configured;
  std::vector<TrialRecord> trials;
  int64_t micro_batch_size = 0;  // chosen
  int64_t micro_batches = 0;     // chosen; == configured.micro_batches when the configured one fits
};

// --auto-micro-batches: the job as configured first; on out of memory, the next size is
// next_micro_batch_size (halving through the divisors of P), and once one fits the divisors
// between it and the last size that did not are searched by bisection (refine_micro_batch_size),
// so the fewest micro-batches that fit is chosen in about log2 trials. Throws like find_batch_size.
MicroBatchChoice choose_micro_batches(const RunTrial& run, int world_size);
// One line (no prefix): what was tried and chosen, e.g. "per-rank batch 48: 48 and 24 ran out of
// memory; 16 fits (peak 900.0 MiB of limit 1024.0 MiB; 12 fits too) -> train.micro_batches=3".
std::string micro_batch_summary(const MicroBatchChoice& choice);
// The arguments the real run gets: none when the configured micro-batches fit.
std::vector<std::string> micro_batch_run_args(const MicroBatchChoice& choice);

// Starts plan.argv (PATH lookup, this process's environment), stdin from /dev/null, its stdout and
// stderr through one pipe echoed line by line to this process's stderr as "  trial| LINE", and
// waits for it. Throws IoError when it cannot be started.
TrialProcess run_trial_process(const Plan& plan);

}  // namespace zeroshard::launch
