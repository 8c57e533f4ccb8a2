// SPDX-License-Identifier: Apache-2.0
// run_trial_process: starts one trial job and waits for it, echoing its output (trial.h).

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "zeroshard/base/error.h"
#include "zeroshard/launcher/trial.h"

extern char** environ;

namespace zeroshard::launch {
namespace {

// Closes the descriptors and destroys the spawn objects on every path out.
struct SpawnState {
  int fds[2] = {-1, -1};
  posix_spawn_file_actions_t actions{};
  bool actions_ready = false;
  ~SpawnState() {
    for (int fd : fds) {
      if (fd >= 0) ::close(fd);
    }
    if (actions_ready) ::posix_spawn_file_actions_destroy(&actions);
  }
};

// Echoes one line to stderr as "  trial| LINE" and keeps it when it is a protocol line.
void take_line(const std::string& line, std::string* kept) {
  std::fprintf(stderr, "  trial| %s\n", line.c_str());
  std::fflush(stderr);
  if (line.find(kTrialPrefix) != std::string::npos) *kept += line + "\n";
}

}  // namespace

TrialProcess run_trial_process(const Plan& plan) {
  ZS_CHECK(!plan.argv.empty(), "an empty trial command");
  SpawnState st;
  ZS_CHECK_ERRNO(::pipe2(st.fds, O_CLOEXEC), "cannot create a pipe for the trial's output");
  auto check_spawn = [](int rc, const char* what) {
    ZS_REQUIRE(rc == 0, IoError, "cannot start a trial: ", what, ": ", detail::errno_string(rc));
  };
  check_spawn(::posix_spawn_file_actions_init(&st.actions), "posix_spawn_file_actions_init");
  st.actions_ready = true;
  // dup2 clears close-on-exec on the copies; the pipe's own ends close at exec.
  check_spawn(::posix_spawn_file_actions_addopen(&st.actions, 0, "/dev/null", O_RDONLY, 0), "stdin from /dev/null");
  check_spawn(::posix_spawn_file_actions_adddup2(&st.actions, st.fds[1], 1), "stdout to the pipe");
  check_spawn(::posix_spawn_file_actions_adddup2(&st.actions, st.fds[1], 2), "stderr to the pipe");

  std::vector<char*> args;
  for (const auto& a : plan.argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::fflush(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, args[0], &st.actions, nullptr, args.data(), environ);
  ZS_REQUIRE(rc == 0, IoError, "cannot start the trial '", shell_line(plan), "': ", detail::errno_string(rc));
  ::close(st.fds[1]);
  st.fds[1] = -1;

  TrialProcess result;
  std::string pending;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(st.fds[0], buf, sizeof(buf));
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::kill(pid, SIGTERM);
      ::waitpid(pid, nullptr, 0);
      ZS_THROW(IoError, "cannot read the trial's output: ", detail::errno_string(err));
    }
    pending.append(buf, static_cast<size_t>(n));
    size_t nl = 0;
    while ((nl = pending.find('\n')) != std::string::npos) {
      take_line(pending.substr(0, nl), &result.output);
      pending.erase(0, nl + 1);
    }
  }
  if (!pending.empty()) take_line(pending, &result.output);

  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    const int err = errno;
    ZS_REQUIRE(err == EINTR, IoError, "waitpid for the trial failed: ", detail::errno_string(err));
  }
  result.exited = WIFEXITED(status);
  result.status = result.exited ? WEXITSTATUS(status) : 0;
  result.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  return result;
}

}  // namespace zeroshard::launch
