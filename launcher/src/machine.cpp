// SPDX-License-Identifier: Apache-2.0
// detect_machine: what this node has (cores, NVIDIA GPUs), who we are, which launchers exist.

#include <dirent.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <tuple>
#include <utility>

#include "zeroshard/launcher/launch.h"

namespace zeroshard::launch {
namespace {

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// The first PATH entry holding an executable `name`; empty when none does.
std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + name;
    if (is_executable_file(candidate)) return candidate;
    start = end + 1;
  }
  return "";
}

int read_int_file(const std::string& path) {
  std::ifstream f(path);
  int v = -1;
  return (f >> v) ? v : -1;
}

// Physical cores among the CPUs this process may run on: distinct (package, core) pairs of the
// affinity mask, as Open MPI counts slots by default. Falls back to the CPU count.
int count_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) {
    long n = ::sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? static_cast<int>(n) : 1;
  }
  std::set<std::pair<int, int>> cores;
  int cpus = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    ++cpus;
    const std::string topo = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    const int package = read_int_file(topo + "physical_package_id");
    const int core = read_int_file(topo + "core_id");
    cores.insert(package < 0 || core < 0 ? std::make_pair(-1, cpu) : std::make_pair(package, core));
  }
  return cores.empty() ? std::max(cpus, 1) : static_cast<int>(cores.size());
}

// NVIDIA GPUs: `nvidia-smi -L` (one "GPU i: ..." line each) when it is on PATH and succeeds, else
// the driver's /proc/driver/nvidia/gpus (one directory each). {0, ""} when neither exists.
std::pair<int, std::string> count_gpus() {
  const bool have_smi = !find_on_path("nvidia-smi").empty();
  if (have_smi) {
    FILE* p = ::popen("nvidia-smi -L 2>/dev/null", "r");
    if (p != nullptr) {
      int n = 0;
      char line[512];
      while (std::fgets(line, sizeof(line), p) != nullptr) {
        if (std::string(line).rfind("GPU ", 0) == 0) ++n;
      }
      if (::pclose(p) == 0) return {n, "nvidia-smi -L"};
    }
  }
  if (DIR* d = ::opendir("/proc/driver/nvidia/gpus")) {
    int n = 0;
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') ++n;
    }
    ::closedir(d);
    return {n, "/proc/driver/nvidia/gpus"};
  }
  // nvidia-smi without a working driver: say so rather than "no nvidia-smi".
  return {0, have_smi ? "nvidia-smi -L, which failed (is the NVIDIA driver loaded?)" : ""};
}

}  // namespace

MachineFacts detect_machine() {
  MachineFacts f;
  f.is_root = ::geteuid() == 0;
  f.cores = count_cores();
  std::tie(f.gpus, f.gpu_probe) = count_gpus();
  const char* job = std::getenv("SLURM_JOB_ID");
  f.in_slurm = job != nullptr && *job != '\0';
  if (const char* nt = std::getenv("SLURM_NTASKS")) f.slurm_ntasks = std::max(0, std::atoi(nt));
  f.mpirun = find_on_path("mpirun");
  f.srun = find_on_path("srun");
  f.getenv = [](const char* name) { return static_cast<const char*>(std::getenv(name)); };
  f.program_exists = [](const std::string& program) {
    if (program.find('/') != std::string::npos) return is_executable_file(program);
    return !find_on_path(program).empty();
  };
  return f;
}

}  // namespace zeroshard::launch
