// SPDX-License-Identifier: Apache-2.0
#include "watchdog.h"

#include <algorithm>
#include <sstream>

#include "zeroshard/base/error.h"
#include "zeroshard/base/logging.h"
#include "zeroshard/comm/flight_recorder.h"

namespace zeroshard::comm {
namespace {

using Clock = WorkBase::Clock;

constexpr std::chrono::milliseconds kMaxPollInterval{100};
constexpr std::chrono::milliseconds kMinPollInterval{5};
// How long a timed-out rank waits for the other ranks to say what they are doing.
constexpr std::chrono::milliseconds kPeerQueryBudget{3000};

std::chrono::milliseconds ms_since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t);
}

std::string format_seconds(std::chrono::milliseconds ms) {
  std::ostringstream os;
  os.precision(3);
  os << static_cast<double>(ms.count()) / 1000.0 << "s";
  return os.str();
}

}  // namespace

Watchdog& Watchdog::instance() {
  // Never destroyed: communicators may still be released during static destruction.
  static Watchdog* wd = new Watchdog();
  return *wd;
}

Watchdog::~Watchdog() { stop(); }

void Watchdog::track(std::shared_ptr<WorkBase> work, bool abort_on_timeout) {
  std::lock_guard<std::mutex> lock(mu_);
  inflight_.push_back({std::move(work), abort_on_timeout});
  ensure_thread_locked();  // no notify: the thread polls at least every 100 ms (hot path stays syscall-free)
}

void Watchdog::set_peer_channel(std::unique_ptr<PeerChannel> channel) {
  std::lock_guard<std::mutex> lock(mu_);
  channel_ = std::move(channel);
  ensure_thread_locked();  // the channel must be served even before any collective is tracked
}

void Watchdog::set_abort_handler(std::function<void(const std::string&)> handler) {
  std::lock_guard<std::mutex> lock(mu_);
  abort_handler_ = std::move(handler);
}

void Watchdog::ensure_thread_locked() {
  if (running_) return;
  stop_requested_ = false;
  running_ = true;
  thread_ = std::thread([this] { loop(); });
}

void Watchdog::stop() {
  std::thread t;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!running_) return;
    stop_requested_ = true;
    cv_.notify_all();
    t = std::move(thread_);
  }
  if (t.joinable()) t.join();
  std::lock_guard<std::mutex> lock(mu_);
  running_ = false;
  channel_.reset();
}

std::string Watchdog::describe_local() {
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream os;
  bool any = false;
  for (const Tracked& t : inflight_) {
    if (t.work->done()) continue;
    os << (any ? "; " : "") << (t.work->started() ? "in " : "queued ") << t.work->signature().to_string();
    if (t.work->started()) os << " for " << format_seconds(ms_since(t.work->started_at()));
    any = true;
  }
  if (!any) {
    os << "in no collective";
    for (const auto& [comm, sig] : last_completed_) os << "; last completed on " << comm << ": " << sig;
  }
  return os.str();
}

void Watchdog::scan(std::vector<std::pair<std::shared_ptr<WorkBase>, bool>>& timed_out) {
  // Called with mu_ held.
  auto now = Clock::now();
  std::vector<Tracked> keep;
  keep.reserve(inflight_.size());
  for (Tracked& t : inflight_) {
    if (!t.work->done()) t.work->poll();
    if (t.work->done()) {
      last_completed_[t.work->signature().comm] = t.work->signature().to_string();
      continue;
    }
    if (t.work->started() && now - t.work->started_at() > t.work->comm_timeout()) {
      timed_out.emplace_back(t.work, t.abort_on_timeout);
    }
    keep.push_back(std::move(t));
  }
  inflight_.swap(keep);
}

void Watchdog::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_requested_) {
    std::chrono::milliseconds interval = kMaxPollInterval;
    for (const Tracked& t : inflight_) {
      interval = std::min(interval, std::max(kMinPollInterval, t.work->comm_timeout() / 10));
    }
    cv_.wait_for(lock, interval);
    if (stop_requested_) break;
    if (channel_) {
      PeerChannel* ch = channel_.get();
      lock.unlock();
      ch->serve([this] { return describe_local(); });
      lock.lock();
    }
    if (FlightRecorder::instance().take_dump_request()) {
      lock.unlock();
      FlightRecorder::instance().dump("SIGUSR2");
      lock.lock();
    }
    std::vector<std::pair<std::shared_ptr<WorkBase>, bool>> timed_out;
    scan(timed_out);
    if (timed_out.empty()) continue;
    lock.unlock();
    // Report the oldest collective of each communicator; the ones queued behind it fail with it.
    for (auto& [work, abort] : timed_out) report_timeout(work, abort);
    lock.lock();
  }
}

void Watchdog::report_timeout(const std::shared_ptr<WorkBase>& work, bool abort) {
  if (work->done()) return;
  const CollectiveSignature& sig = work->signature();
  std::ostringstream os;
  os << sig.to_string() << " did not complete within " << format_seconds(work->comm_timeout())
     << " (comm.timeout_s) on rank " << detail::process_rank() << ". ";
  std::vector<std::string> peers;
  PeerChannel* ch = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ch = channel_.get();
  }
  if (ch) peers = ch->query_all(std::min(kPeerQueryBudget, work->comm_timeout()), [this] { return describe_local(); });
  if (!peers.empty()) {
    os << "Other ranks report: ";
    for (size_t i = 0; i < peers.size(); ++i) os << (i ? " | " : "") << peers[i];
    os << ". ";
  }
  os << "A rank that never reaches this collective, or reaches a different one, hangs the job: look "
        "for rank-dependent control flow, an exception on another rank, or a slow rank (raise "
        "comm.timeout_s if the work is legitimately long).";
  const std::string records = FlightRecorder::instance().dump("timeout: " + sig.to_string());
  if (!records.empty()) {
    os << " This rank's last collectives are in " << records << "; zeroshard-trace on the folder of every rank's file "
       << "says where the ranks parted.";
  }
  CommTimeoutError error(os.str(), __FILE__, __LINE__);
  work->on_timeout();
  std::function<void(const std::string&)> handler;
  {
    std::lock_guard<std::mutex> lock(mu_);
    handler = abort_handler_;
  }
  // Abort first (it does not return): a waiting thread woken by fail() would report it again.
  if (abort && handler) handler(error.what());
  if (!abort) {
    ZS_LOG(kError) << error.what();
  }
  work->fail(std::make_exception_ptr(error));
}

}  // namespace zeroshard::comm
