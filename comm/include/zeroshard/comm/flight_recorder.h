// SPDX-License-Identifier: Apache-2.0
#pragma once
// The flight recorder: the last collectives this process issued, on every communicator, in a ring
// (signature, state, and when each was issued, started and ended), written to a file when
// something goes wrong so that the files of all ranks show where they parted:
//
//   - a collective times out (the watchdog writes it before it aborts the job),
//   - a collective fails (the first failure; later ones only once kFailureDumpInterval has passed
//     since the last failure's file: when a communicator breaks, every collective pending on it
//     fails at once, and the first failure's file is the one that tells where it started),
//   - the process receives SIGUSR2 (the Session installs the handler when the recorder is on;
//     the watchdog thread writes the file within 100 ms): `kill -USR2` a hung job, or its mpirun,
//     which forwards it to every rank.
//
// File: <dir>/flight-rank<R>.jsonl, replaced whole at each dump (written to a temporary name, then
// renamed). The first line describes the dump ({"flight_recorder": 1, "rank", "world_size",
// "host", "pid", "reason", "time", "entries", "recorded", "failures_not_written"}); then one line per collective, oldest
// first: {"id", "comm", "seq", "op", "dtype", "count", "reduce", "root", "tag", "state", "issued",
// "started", "ended"} (times: seconds since the Unix epoch, so ranks on one host compare; 0 when not
// reached; state: issued, started, completed, failed). `zeroshard-trace DIR` reads the files of all
// ranks and says where they diverged (docs/cluster.md).
// Cost: one short critical section per collective event; nothing when `entries` is 0.
// Thread-safe.

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "zeroshard/comm/communicator.h"

namespace zeroshard {

struct FlightRecord {
  enum class State { kIssued, kStarted, kCompleted, kFailed };
  uint64_t id = 0;  // this process's issue order, from 1
  CollectiveSignature sig;
  State state = State::kIssued;
  double issued = 0, started = 0, ended = 0;  // seconds since the Unix epoch; 0: not reached
};
const char* to_string(FlightRecord::State state);

class FlightRecorder {
 public:
  static FlightRecorder& instance();

  // Keeps the last `entries` collectives (0: records nothing and writes no file) and writes dumps
  // into `dir` as rank `rank` of `world_size`. Called by the Session at start (comm.flight_recorder_*).
  void configure(size_t entries, std::string dir, int rank, int world_size);
  bool enabled() const { return capacity_.load(std::memory_order_relaxed) > 0; }

  // Events of one collective; `id` is what issued() returned (0 when the recorder was off: the
  // other calls then do nothing, as they do for a record the ring has already dropped).
  uint64_t issued(const CollectiveSignature& sig);
  void started(uint64_t id);
  void ended(uint64_t id, bool ok);

  // The records held, oldest first.
  std::vector<FlightRecord> snapshot() const;
  // Writes the dump file (see above) and returns its path; "" when the recorder is off. Never
  // throws: a dump that cannot be written is logged.
  std::string dump(const std::string& reason) noexcept;
  // dump() for a failed collective, unless a failure's file was written less than
  // kFailureDumpInterval seconds ago (then counted in the next file's "failures_not_written", and
  // "" returned).
  std::string dump_failure(const std::string& reason) noexcept;
  static constexpr double kFailureDumpInterval = 10.0;
  // Async-signal-safe: asks for a dump ("SIGUSR2"), which the watchdog thread writes.
  void request_dump() noexcept { dump_requested_.store(true); }
  bool take_dump_request() noexcept { return dump_requested_.exchange(false); }
  // Where dumps go: <dir>/flight-rank<R>.jsonl ("" when off).
  std::string path() const;

 private:
  FlightRecorder() = default;
  mutable std::mutex mu_;
  std::atomic<size_t> capacity_{0};
  std::vector<FlightRecord> ring_;  // record id k lives at (k - 1) % capacity
  uint64_t next_id_ = 1;
  std::string dir_;
  int rank_ = 0, world_size_ = 1;
  std::atomic<bool> dump_requested_{false};
  double last_failure_dump_ = 0;      // when a failure's file was last written (0: never)
  int64_t failures_not_written_ = 0;  // failures since the last file that wrote none
};

}  // namespace zeroshard
