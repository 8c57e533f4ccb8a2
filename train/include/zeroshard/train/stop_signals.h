// SPDX-License-Identifier: Apache-2.0
#pragma once
// StopSignals: turns the signals a scheduler sends before it ends a job (Slurm: SIGTERM, or the
// signal of `--signal=USR1@120`; Open MPI's mpirun forwards SIGUSR1 and SIGUSR2 to every rank)
// into a request the training loop reads between steps, so the run can stop at a step boundary
// with a checkpoint instead of dying mid-step.
//
//   StopSignals stop;                     // handlers for SIGTERM and SIGUSR1 until destroyed
//   ... if (stop.received() != 0) { save; exit 128 + stop.received(); }
//
// The first of the watched signals is recorded (async-signal-safe: one atomic store). A second
// watched signal while one is pending means "now": the handler restores the default action and
// raises it again, so a job stuck inside a step still ends when asked twice.
// One StopSignals may exist at a time in a process (a second one is a UsageError); the previous
// handlers come back when it is destroyed. The training library's Trainer owns one while it lives.

#include <csignal>
#include <string>
#include <vector>

namespace zeroshard {

class StopSignals {
 public:
  explicit StopSignals(std::vector<int> signals = {SIGTERM, SIGUSR1});
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first watched signal received since construction or the last clear(); 0 when none.
  int received() const;
  void clear();
  const std::vector<int>& signals() const { return signals_; }

 private:
  std::vector<int> signals_;
  std::vector<struct sigaction> previous_;
};

// "SIGTERM", "SIGUSR1", ... ("signal N" for others).
std::string signal_name(int signal);

}  // namespace zeroshard
