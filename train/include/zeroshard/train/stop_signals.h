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
//
// A deadline (train.stop_deadline_s) bounds how long stopping may take: `deadline_seconds` after
// the first signal, a process that still holds its StopSignals (a step or the save that follows
// never ended: a peer died inside a collective, a drive hangs) writes one line on stderr naming
// `who`, the signal and the deadline, and exits at once with status kStopDeadlineExit, before a
// scheduler's own grace period ends in SIGKILL. A watcher thread looks every 50 ms.

#include <atomic>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

namespace zeroshard {

// Exit status of a process whose stop deadline passed (as timeout(1)'s).
constexpr int kStopDeadlineExit = 124;

class StopSignals {
 public:
  // deadline_seconds 0: none. UsageError when it is negative.
  explicit StopSignals(std::vector<int> signals = {SIGTERM, SIGUSR1}, double deadline_seconds = 0,
                       std::string who = "");
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first watched signal received since construction or the last clear(); 0 when none.
  int received() const;
  void clear();
  const std::vector<int>& signals() const { return signals_; }

 private:
  void watch(double deadline_seconds, const std::string& who);

  std::vector<int> signals_;
  std::vector<struct sigaction> previous_;
  std::thread watcher_;
  std::atomic<bool> done_{false};
};

// "SIGTERM", "SIGUSR1", ... ("signal N" for others).
std::string signal_name(int signal);

}  // namespace zeroshard
