// SPDX-License-Identifier: Apache-2.0
// build_plan: LaunchOptions + MachineFacts -> the mpirun or srun command. Pure (no I/O but the
// hostfile), so every rule is tested with made-up facts (tests/tools/test_launcher.cpp).

#include <algorithm>
#include <cctype>
#include <sstream>

#include "zeroshard/base/error.h"
#include "zeroshard/launcher/launch.h"

namespace zeroshard::launch {
namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

// The GPU ids every rank of a node sees, or an error when the node cannot give G GPUs.
std::vector<std::string> pick_gpus(const LaunchOptions& o, const MachineFacts& f) {
  const int g = o.gpus_per_node;
  const char* cvd = f.getenv ? f.getenv("CUDA_VISIBLE_DEVICES") : nullptr;
  if (cvd != nullptr && *cvd != '\0') {
    std::vector<std::string> ids = split_commas(cvd);
    ZS_REQUIRE(static_cast<int>(ids.size()) >= g, UsageError, "--gpus-per-node ", g, " but CUDA_VISIBLE_DEVICES='",
               cvd, "' makes only ", ids.size(), " GPU(s) visible; ask for at most ", ids.size(),
               " or widen CUDA_VISIBLE_DEVICES");
    ids.resize(static_cast<size_t>(g));
    return ids;
  }
  if (!o.skip_gpu_check) {
    ZS_REQUIRE(!f.gpu_probe.empty(), UsageError, "--gpus-per-node ", g,
               " but this node has no NVIDIA GPU (no nvidia-smi on PATH and no /proc/driver/nvidia/gpus). "
               "Run on a GPU node, leave out --gpus-per-node for a CPU job, or add --skip-gpu-check when "
               "launching from a node without GPUs (e.g. a login node)");
    ZS_REQUIRE(f.gpus >= g, UsageError, "--gpus-per-node ", g, " but this node has ", f.gpus, " GPU(s) (found by ",
               f.gpu_probe, "); ask for at most ", f.gpus, " per node");
  }
  std::vector<std::string> ids;
  for (int i = 0; i < g; ++i) ids.push_back(std::to_string(i));
  return ids;
}

// --env values: NAME alone must be set here (mpirun -x NAME and srun pass this process's value).
std::vector<EnvVar> resolve_env(const LaunchOptions& o, const MachineFacts& f) {
  std::vector<EnvVar> env;
  for (const EnvVar& v : o.env) {
    if (!v.value) {
      const char* here = f.getenv ? f.getenv(v.name.c_str()) : nullptr;
      ZS_REQUIRE(here != nullptr, UsageError, "--env ", v.name, ": ", v.name,
                 " is not set in this environment, so there is no value to pass; give --env ", v.name, "=VALUE");
    }
    ZS_REQUIRE(v.name != "CUDA_VISIBLE_DEVICES" || o.gpus_per_node == 0, UsageError,
               "--env CUDA_VISIBLE_DEVICES together with --gpus-per-node: the launcher sets it from the GPUs it "
               "places ranks on; set CUDA_VISIBLE_DEVICES in the environment to choose them");
    env.push_back(v);
  }
  return env;
}

void check_program(const LaunchOptions& o, const MachineFacts& f) {
  const std::string& p = o.program.at(0);
  if (!f.program_exists || f.program_exists(p)) return;
  if (p.find('/') != std::string::npos) {
    ZS_THROW(UsageError, "program '", p, "' is not an executable file (build it first: cmake --build build)");
  }
  ZS_THROW(UsageError, "program '", p, "' is not found on PATH; give its path, e.g. build/bin/", p);
}

// Where mpirun puts the ranks: how many on the fullest node (nodes are assumed alike: this node's
// cores stand for each's), whether that oversubscribes the slots, and the capacity for messages.
struct Placement {
  int nodes = 1;
  int slots = 0;  // in the hostfile, or this node's cores
  int per_node = 0;
  bool oversubscribe = false;
  std::string capacity;
};

Placement place_ranks(const LaunchOptions& o, const MachineFacts& f) {
  const int n = o.np, g = o.gpus_per_node;
  const std::vector<HostEntry> hosts = o.hostfile.empty() ? std::vector<HostEntry>{} : parse_hostfile(o.hostfile);
  Placement pl;
  pl.nodes = hosts.empty() ? 1 : static_cast<int>(hosts.size());
  int min_slots = 1 << 30, max_slots = 0;
  for (const HostEntry& h : hosts) {
    pl.slots += h.slots;
    min_slots = std::min(min_slots, h.slots);
    max_slots = std::max(max_slots, h.slots);
  }
  pl.capacity = hosts.empty() ? detail::concat("this node's ", f.cores, " core(s)")
                              : detail::concat(pl.slots, " slot(s) in ", o.hostfile);
  if (hosts.empty()) pl.slots = min_slots = max_slots = f.cores;
  pl.oversubscribe = n > pl.slots;
  if (g > 0) {
    ZS_REQUIRE(o.map == Mapping::kAuto, UsageError,
               "--map-by cannot be combined with --gpus-per-node, which places ", g, " ranks on each node");
    const int needed = (n + g - 1) / g;
    ZS_REQUIRE(needed <= pl.nodes, UsageError, "-n ", n, " at ", g, " rank(s) per node (--gpus-per-node ", g,
               ") needs ", needed, " node(s), but the job has ", pl.nodes,
               hosts.empty() ? " (no --hostfile: this node only)" : detail::concat(" (hosts in ", o.hostfile, ")"),
               "; lower -n to at most ", g * pl.nodes, " or add hosts");
    pl.per_node = std::min(n, g);
    pl.oversubscribe = pl.oversubscribe || pl.per_node > min_slots;
  } else if (o.map == Mapping::kNode) {
    pl.per_node = (n + pl.nodes - 1) / pl.nodes;
  } else {
    pl.per_node = std::min(n, max_slots);
    if (pl.oversubscribe) pl.per_node = (n + pl.nodes - 1) / pl.nodes;
  }
  return pl;
}

// Cores per rank (mpirun's PE) under `bind`; 0 when the ranks are not bound to cores.
int cores_per_rank(const LaunchOptions& o, const MachineFacts& f, const Placement& pl, Binding bind) {
  if (bind != Binding::kCore) {
    ZS_REQUIRE(o.cpus_per_rank == 0, UsageError, "--cpus-per-rank ", o.cpus_per_rank,
               " binds each rank to cores, which needs --bind-to core (not --bind-to ",
               bind == Binding::kNone ? "none" : "socket", ")");
    return 0;
  }
  if (o.cpus_per_rank == 0) return pl.oversubscribe ? 1 : std::max(1, f.cores / std::max(1, pl.per_node));
  const int pe = o.cpus_per_rank;
  ZS_REQUIRE(pl.oversubscribe || static_cast<int64_t>(pe) * pl.per_node <= f.cores, UsageError, "--cpus-per-rank ", pe,
             " x ", pl.per_node, " rank(s) per node needs ", pe * pl.per_node, " cores, but this node has ", f.cores,
             "; lower --cpus-per-rank or -n, or use --bind-to none");
  return pe;
}

Plan mpirun_plan(const LaunchOptions& o, const MachineFacts& f, const std::vector<EnvVar>& env) {
  Plan plan;
  ZS_REQUIRE(o.np > 0, UsageError, "missing -n N (the number of ranks)");
  const int n = o.np, g = o.gpus_per_node;
  if (f.mpirun.empty()) {
    ZS_REQUIRE(o.dry_run, Error, "mpirun not found on PATH; install Open MPI's launcher (Debian/Ubuntu: "
               "apt-get install openmpi-bin) or run inside a Slurm allocation with --launcher srun");
    plan.notes.push_back("mpirun is not on PATH here (Debian/Ubuntu: apt-get install openmpi-bin); "
                         "the command below will not run on this node as it is");
  }
  const Placement pl = place_ranks(o, f);
  Binding bind = o.bind;
  if (bind == Binding::kAuto) {
    bind = pl.oversubscribe ? Binding::kNone : Binding::kCore;
    if (pl.oversubscribe) plan.notes.push_back("ranks are not bound to cores: the job is oversubscribed (--bind-to core to force)");
  }
  const int pe = cores_per_rank(o, f, pl, bind);
  std::string map = g > 0 ? detail::concat("ppr:", g, ":node") : o.map == Mapping::kNode ? "node"
                                                              : o.map == Mapping::kSocket ? "socket" : "slot";
  if (pe > 0) map += detail::concat(":PE=", pe);
  std::string bind_to = bind == Binding::kCore ? "core" : bind == Binding::kSocket ? "socket" : "none";
  if (pl.oversubscribe && bind != Binding::kNone) bind_to += ":overload-allowed";

  std::vector<std::string>& a = plan.argv;
  a = {f.mpirun.empty() ? "mpirun" : f.mpirun, "-n", std::to_string(n)};
  if (!o.hostfile.empty()) a.insert(a.end(), {"--hostfile", o.hostfile});
  if (f.is_root) {
    a.push_back("--allow-run-as-root");
    plan.notes.push_back("running as root: added --allow-run-as-root");
  }
  if (pl.oversubscribe) {
    a.push_back("--oversubscribe");
    plan.notes.push_back(detail::concat(n, " rank(s) on ", pl.capacity,
                                        g > 0 && n <= pl.slots ? detail::concat(" (", pl.per_node, " per node)") : "",
                                        ": added --oversubscribe"));
  }
  a.insert(a.end(), {"--map-by", map, "--bind-to", bind_to});
  if (g > 0) a.insert(a.end(), {"-x", "CUDA_VISIBLE_DEVICES=" + join(pick_gpus(o, f), ",")});
  for (const EnvVar& v : env) a.insert(a.end(), {"-x", v.value ? v.name + "=" + *v.value : v.name});
  a.insert(a.end(), o.launcher_args.begin(), o.launcher_args.end());
  plan.program_index = a.size();
  plan.ranks = n;
  a.insert(a.end(), o.program.begin(), o.program.end());
  return plan;
}

Plan srun_plan(const LaunchOptions& o, const MachineFacts& f, const std::vector<EnvVar>& env) {
  Plan plan;
  ZS_REQUIRE(o.hostfile.empty(), UsageError, "--hostfile is for mpirun; under srun Slurm picks the nodes of the "
             "allocation (SLURM_JOB_NODELIST). Leave out --hostfile, or add --launcher mpirun");
  if (f.srun.empty()) {
    ZS_REQUIRE(o.dry_run, Error, "srun not found on PATH; --launcher srun needs Slurm's client commands "
               "(Debian/Ubuntu: apt-get install slurm-client) and a Slurm cluster, or use --launcher mpirun");
    plan.notes.push_back("srun is not on PATH here (Debian/Ubuntu: slurm-client); the command below will not run on "
                         "this node as it is");
  }
  const int n = o.np > 0 ? o.np : f.slurm_ntasks;
  ZS_REQUIRE(n > 0, UsageError, "missing -n N (the number of ranks); SLURM_NTASKS is not set either");
  std::vector<std::string>& a = plan.argv;
  a = {f.srun.empty() ? "srun" : f.srun, "--ntasks=" + std::to_string(n)};
  if (o.gpus_per_node > 0) {
    pick_gpus(o, f);  // checks this node can give G GPUs; Slurm sets CUDA_VISIBLE_DEVICES itself
    a.push_back(detail::concat("--ntasks-per-node=", o.gpus_per_node));
    a.push_back(detail::concat("--gpus-per-node=", o.gpus_per_node));
  }
  if (o.cpus_per_rank > 0) a.push_back(detail::concat("--cpus-per-task=", o.cpus_per_rank));
  switch (o.bind) {
    case Binding::kCore: a.push_back("--cpu-bind=cores"); break;
    case Binding::kSocket: a.push_back("--cpu-bind=sockets"); break;
    case Binding::kNone: a.push_back("--cpu-bind=none"); break;
    case Binding::kAuto: break;  // the cluster's task/affinity default
  }
  switch (o.map) {
    case Mapping::kSlot: a.push_back("--distribution=block"); break;
    case Mapping::kNode: a.push_back("--distribution=cyclic"); break;
    case Mapping::kSocket: a.push_back("--distribution=block:cyclic"); break;
    case Mapping::kAuto: break;
  }
  if (f.slurm_ntasks > 0 && n > f.slurm_ntasks) {
    a.push_back("--overcommit");
    plan.notes.push_back(detail::concat(n, " rank(s) in an allocation of ", f.slurm_ntasks,
                                        " task(s) (SLURM_NTASKS): added --overcommit"));
  }
  // srun hands its own environment to the ranks: set the variables here (NAME alone is already set).
  for (const EnvVar& v : env) {
    if (v.value) plan.setenv.emplace_back(v.name, *v.value);
  }
  a.insert(a.end(), o.launcher_args.begin(), o.launcher_args.end());
  plan.program_index = a.size();
  plan.ranks = n;
  a.insert(a.end(), o.program.begin(), o.program.end());
  return plan;
}

}  // namespace

Plan build_plan(const LaunchOptions& o, const MachineFacts& f) {
  ZS_REQUIRE(!o.program.empty(), UsageError, "no program to run");
  check_program(o, f);
  const std::vector<EnvVar> env = resolve_env(o, f);
  Launcher which = o.launcher;
  if (which == Launcher::kAuto) which = f.in_slurm && o.hostfile.empty() ? Launcher::kSrun : Launcher::kMpirun;
  Plan plan = which == Launcher::kSrun ? srun_plan(o, f, env) : mpirun_plan(o, f, env);
  const bool resumes = std::any_of(o.program.begin() + 1, o.program.end(),
                                   [](const std::string& a) { return a.rfind("--resume", 0) == 0; });
  if (o.max_restarts > 0 && !resumes) {
    plan.notes.push_back("--max-restarts: the program's arguments have no --resume=auto, so a restarted job starts "
                         "again from step 0 unless the program resumes by itself");
  }
  return plan;
}

std::string shell_quote(const std::string& word) {
  if (word.empty()) return "''";
  const bool safe = std::all_of(word.begin(), word.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::string("_@%+=:,./-").find(c) != std::string::npos;
  });
  if (safe) return word;
  std::string q = "'";
  for (char c : word) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string shell_line(const Plan& plan) {
  std::string line;
  if (!plan.setenv.empty()) {
    line = "env";
    for (const auto& [name, value] : plan.setenv) line += " " + shell_quote(name + "=" + value);
  }
  for (const auto& w : plan.argv) line += (line.empty() ? "" : " ") + shell_quote(w);
  return line;
}

}  // namespace zeroshard::launch
