// zeroshard-launch: see zeroshard/launcher/launch.h and docs/tools.md.
//
//   zeroshard-launch -n 4 --hostfile hosts --gpus-per-node 2 --env NCCL_DEBUG=WARN -- build/bin/prog --set ...
//
// Prints the command it runs on stderr (with the reasons for the flags it added), then replaces
// itself with mpirun/srun, so the job's exit status is this command's. --dry-run prints the
// command on stdout instead. Errors: one line on stderr, exit 2 for a bad command line, 1 else.

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "zeroshard/core/error.h"
#include "zeroshard/launcher/launch.h"

namespace zl = zeroshard::launch;

int main(int argc, char** argv) {
  try {
    const zl::LaunchOptions options = zl::parse_args(std::vector<std::string>(argv + 1, argv + argc));
    if (options.help) {
      std::fputs(zl::usage().c_str(), stdout);
      return 0;
    }
    const zl::Plan plan = zl::build_plan(options, zl::detect_machine());
    for (const auto& note : plan.notes) std::fprintf(stderr, "zeroshard-launch: %s\n", note.c_str());
    const std::string line = zl::shell_line(plan);
    if (options.dry_run) {
      std::printf("%s\n", line.c_str());
      return 0;
    }
    std::fprintf(stderr, "zeroshard-launch: %s\n", line.c_str());
    for (const auto& [name, value] : plan.setenv) ::setenv(name.c_str(), value.c_str(), 1);
    std::vector<char*> args;
    for (const auto& a : plan.argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    std::fflush(nullptr);
    ::execvp(args[0], args.data());
    const int err = errno;
    std::fprintf(stderr, "zeroshard-launch: error: cannot start '%s': %s\n", args[0],
                 zeroshard::detail::errno_string(err).c_str());
    return 127;
  } catch (const zeroshard::UsageError& e) {
    std::fprintf(stderr, "zeroshard-launch: error: %s\n", e.message().c_str());
    return 2;
  } catch (const zeroshard::Error& e) {
    std::fprintf(stderr, "zeroshard-launch: error: %s\n", e.message().c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zeroshard-launch: error: %s\n", e.what());
    return 1;
  }
}
