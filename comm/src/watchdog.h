// SPDX-License-Identifier: Apache-2.0
#pragma once
// The watchdog: one thread per process that tracks every in-flight collective of every
// communicator. A collective still running past its communicator's timeout is failed with a
// CommTimeoutError naming rank, collective, tag and sequence number, plus what each other rank
// reports being in (asked over a side channel that the other ranks' watchdog threads answer,
// even while their main thread computes). Unless disabled, the job is then aborted.
// Thread-safe: track() may be called from any thread.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "work_base.h"

namespace zeroshard::comm {

// How the watchdog talks to the other ranks' watchdogs (MPI side channel; absent in unit tests).
class PeerChannel {
 public:
  virtual ~PeerChannel() = default;
  // Answer pending status queries from other ranks with `describe()`. Must not block.
  virtual void serve(const std::function<std::string()>& describe) = 0;
  // Ask every other rank for its status; wait at most `budget`, serving queries meanwhile.
  // Returns one line per other rank ("rank 3: ..." or "rank 3: no answer within 2s").
  virtual std::vector<std::string> query_all(std::chrono::milliseconds budget,
                                             const std::function<std::string()>& describe) = 0;
};

class Watchdog {
 public:
  static Watchdog& instance();

  // Start tracking a collective. `abort_on_timeout` is the owning communicator's setting.
  void track(std::shared_ptr<WorkBase> work, bool abort_on_timeout);

  // Installed by the Session once MPI is up; the abort handler must not return.
  void set_peer_channel(std::unique_ptr<PeerChannel> channel);
  void set_abort_handler(std::function<void(const std::string&)> handler);

  // What this rank is doing: in-flight collectives per communicator, else the last completed one.
  std::string describe_local();

  // Stops the thread (Session shutdown). Tracking after stop() restarts it.
  void stop();

  ~Watchdog();

 private:
  Watchdog() = default;
  void ensure_thread_locked();
  void loop();
  void scan(std::vector<std::pair<std::shared_ptr<WorkBase>, bool>>& timed_out);
  void report_timeout(const std::shared_ptr<WorkBase>& work, bool abort);

  struct Tracked {
    std::shared_ptr<WorkBase> work;
    bool abort_on_timeout;
  };

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Tracked> inflight_;
  std::map<std::string, std::string> last_completed_;  // communicator -> signature text
  std::unique_ptr<PeerChannel> channel_;
  std::function<void(const std::string&)> abort_handler_;
  std::thread thread_;
  bool running_ = false;
  bool stop_requested_ = false;
};

}  // namespace zeroshard::comm
