// SPDX-License-Identifier: Apache-2.0
// run_with_restarts: --max-restarts, the whole job run again after a failure (launch.h).

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "zeroshard/base/error.h"
#include "zeroshard/launcher/launch.h"

extern char** environ;

namespace zeroshard::launch {
namespace {

constexpr int kForwarded[] = {SIGTERM, SIGINT, SIGUSR1, SIGUSR2};

std::atomic<pid_t> g_child{0};
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<pid_t>::is_always_lock_free && std::atomic<int>::is_always_lock_free);

extern "C" void forward_signal(int sig) {
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, sig);
  const pid_t child = g_child.load();
  if (child > 0) ::kill(child, sig);
}

// The forwarding handlers while the object lives; the previous ones after.
struct Forwarding {
  struct sigaction previous[sizeof(kForwarded) / sizeof(kForwarded[0])];
  Forwarding() {
    struct sigaction sa {};
    sa.sa_handler = forward_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (size_t i = 0; i < std::size(kForwarded); ++i) ::sigaction(kForwarded[i], &sa, &previous[i]);
  }
  ~Forwarding() {
    for (size_t i = 0; i < std::size(kForwarded); ++i) ::sigaction(kForwarded[i], &previous[i], nullptr);
  }
};

// Runs the command once; returns its wait status.
int run_once(const Plan& plan) {
  std::vector<char*> args;
  for (const auto& a : plan.argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::fflush(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ);
  ZS_REQUIRE(rc == 0, IoError, "cannot start '", args[0], "': ", detail::errno_string(rc));
  g_child.store(pid);
  // A stop asked for between the spawn and the store above reaches the child here.
  if (const int sig = g_stop_signal.load(); sig != 0) ::kill(pid, sig);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    const int err = errno;
    if (err != EINTR) {
      g_child.store(0);
      ZS_THROW(IoError, "waitpid for the job failed: ", detail::errno_string(err));
    }
  }
  g_child.store(0);
  return status;
}

std::string describe(int status) {
  if (WIFSIGNALED(status)) return "was ended by signal " + std::to_string(WTERMSIG(status));
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

// Sleeps `seconds`, waking early when a stop signal arrives.
void wait_unless_stopped(double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (g_stop_signal.load() == 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

int run_with_restarts(const Plan& plan, int max_restarts, double delay_seconds) {
  return run_with_restarts([&plan](int) { return plan; }, plan.ranks, max_restarts, delay_seconds, 0);
}

int run_with_restarts(const std::function<Plan(int ranks)>& plan_for, int ranks, int max_restarts,
                      double delay_seconds, int min_ranks) {
  g_stop_signal.store(0);
  // A parent that ignores SIGCHLD passes that on across exec, and with it ignored the kernel
  // reaps the job itself: waitpid could not tell how it ended. Waiting needs the default action.
  ::signal(SIGCHLD, SIG_DFL);
  Forwarding forwarding;
  Plan plan = plan_for(ranks);
  ZS_CHECK(!plan.argv.empty(), "an empty job command");
  std::string history;  // "4 ranks: ended by signal 9; 3 ranks: ..." for the summary
  const auto record = [&](const std::string& how) {
    history += (history.empty() ? "" : "; ") + std::to_string(ranks) + " rank(s): " + how;
  };
  const auto summary = [&](const std::string& last) {  // the last run: printed with every one before it
    record(last);
    if (min_ranks > 0) std::fprintf(stderr, "zeroshard-launch: the runs: %s\n", history.c_str());
  };
  for (int restarts = 0;; ++restarts) {
    const int status = run_once(plan);
    const int exit_status = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
    if (exit_status == 0) {
      if (restarts > 0) summary("completed");
      return 0;
    }
    if (const int sig = g_stop_signal.load(); sig != 0) {
      std::fprintf(stderr, "zeroshard-launch: the job %s after signal %d was forwarded to it; not restarting it\n",
                   describe(status).c_str(), sig);
      summary(describe(status) + ", stopped");
      return exit_status;
    }
    if (restarts == max_restarts) {
      std::fprintf(stderr, "zeroshard-launch: the job %s; no restart left (--max-restarts %d)\n",
                   describe(status).c_str(), max_restarts);
      summary(describe(status) + ", no restart left");
      return exit_status;
    }
    if (min_ranks > 0 && ranks - 1 < min_ranks) {
      std::fprintf(stderr, "zeroshard-launch: the job %s on %d rank(s); a restart would run on %d, below --min-ranks %d: "
                   "giving up\n", describe(status).c_str(), ranks, ranks - 1, min_ranks);
      summary(describe(status) + ", below --min-ranks");
      return exit_status;
    }
    record(describe(status));
    if (min_ranks > 0) plan = plan_for(--ranks);
    std::fprintf(stderr, "zeroshard-launch: the job %s; restart %d of %d%s in %g s: %s\n", describe(status).c_str(),
                 restarts + 1, max_restarts,
                 min_ranks > 0 ? (" on " + std::to_string(ranks) + " rank(s)").c_str() : "", delay_seconds,
                 shell_line(plan).c_str());
    std::fflush(stderr);
    wait_unless_stopped(delay_seconds);
    if (g_stop_signal.load() != 0) return exit_status;
  }
}

}  // namespace zeroshard::launch
