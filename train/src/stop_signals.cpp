// SPDX-License-Identifier: Apache-2.0
// StopSignals (stop_signals.h).

#include "zeroshard/train/stop_signals.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <thread>

#include "zeroshard/base/error.h"

namespace zeroshard {
namespace {

std::atomic<int> g_received{0};
std::atomic<bool> g_installed{false};
static_assert(std::atomic<int>::is_always_lock_free, "the handler may only touch lock-free atomics");

extern "C" void on_stop_signal(int sig) {
  int none = 0;
  if (g_received.compare_exchange_strong(none, sig)) return;
  // Asked again while a stop is pending: end now, as the signal's default action does.
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

}  // namespace

StopSignals::StopSignals(std::vector<int> signals, double deadline_seconds, std::string who)
    : signals_(std::move(signals)) {
  ZS_REQUIRE(deadline_seconds >= 0, UsageError, "the stop deadline must be 0 (none) or positive seconds, got ",
             deadline_seconds);
  bool expected = false;
  ZS_REQUIRE(g_installed.compare_exchange_strong(expected, true), UsageError,
             "a second StopSignals in one process: only one may watch the stop signals at a time");
  g_received.store(0);
  previous_.resize(signals_.size());
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a blocking read or wait in the step goes on; the loop looks between steps
  for (size_t i = 0; i < signals_.size(); ++i) {
    if (::sigaction(signals_[i], &sa, &previous_[i]) != 0) {
      const int err = errno;
      for (size_t j = 0; j < i; ++j) ::sigaction(signals_[j], &previous_[j], nullptr);
      g_installed.store(false);
      ZS_THROW(IoError, "cannot watch ", signal_name(signals_[i]), ": sigaction: ", detail::errno_string(err));
    }
  }
  if (deadline_seconds > 0) watcher_ = std::thread([this, deadline_seconds, who] { watch(deadline_seconds, who); });
}

StopSignals::~StopSignals() {
  done_.store(true);
  if (watcher_.joinable()) watcher_.join();
  for (size_t i = 0; i < signals_.size(); ++i) ::sigaction(signals_[i], &previous_[i], nullptr);
  g_installed.store(false);
}

// Waits for the first signal, then for the deadline; ends the process if it is still stopping.
void StopSignals::watch(double deadline_seconds, const std::string& who) {
  using Clock = std::chrono::steady_clock;
  const auto tick = std::chrono::milliseconds(50);
  while (!done_.load() && g_received.load() == 0) std::this_thread::sleep_for(tick);
  if (done_.load()) return;
  const int sig = g_received.load();
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(deadline_seconds));
  while (!done_.load() && Clock::now() < end) std::this_thread::sleep_for(tick);
  if (done_.load()) return;
  const std::string line = "zeroshard: " + (who.empty() ? std::string() : who + ": ") + "the stop deadline of " +
                           detail::concat(deadline_seconds) + " s after " + signal_name(sig) +
                           " passed before the run stopped at a step boundary with its checkpoint; exiting now "
                           "with status " + std::to_string(kStopDeadlineExit) + " (train.stop_deadline_s)\n";
  const ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
  ::_exit(kStopDeadlineExit);
}

int StopSignals::received() const { return g_received.load(); }

void StopSignals::clear() { g_received.store(0); }

std::string signal_name(int signal) {
  switch (signal) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    case SIGQUIT: return "SIGQUIT";
    default: return "signal " + std::to_string(signal);
  }
}

}  // namespace zeroshard
