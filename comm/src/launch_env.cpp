// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/comm/launch_env.h"

#include <cstdlib>
#include <sstream>

#include "zeroshard/base/error.h"

namespace zeroshard {
namespace {

// Parses an integer variable; -1 when unset. Throws on garbage.
int read_int(const GetEnv& getenv_fn, const char* name, int min_value) {
  const char* v = getenv_fn(name);
  if (v == nullptr || *v == '\0') return -1;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  ZS_REQUIRE(end && *end == '\0' && x >= min_value && x <= 1 << 24, ConfigError, "environment variable ",
             name, "='", v, "' is not a valid value; expected an integer >= ", min_value);
  return static_cast<int>(x);
}

// Slurm writes SLURM_NTASKS_PER_NODE as "2" or "2(x3),1"; the first count is this node's when
// tasks are spread evenly, which is all we use it for (a cross-check, not a decision).
int read_slurm_tasks_per_node(const GetEnv& getenv_fn) {
  const char* v = getenv_fn("SLURM_NTASKS_PER_NODE");
  if (v == nullptr || *v == '\0') return -1;
  return std::atoi(v) > 0 ? std::atoi(v) : -1;
}

bool fill(LaunchEnv& env, const char* source, int rank, int size, int local_rank, int local_size,
          const char* rank_var, const char* size_var) {
  if (rank < 0 && size < 0) return false;
  ZS_REQUIRE(rank >= 0, ConfigError, "launcher variables are incomplete: ", size_var, " is set but ",
             rank_var, " is not (", source, ")");
  // Some launchers (PMIx) give the rank but not the size: the size is then unknown (-1).
  ZS_REQUIRE(size < 0 || rank < size, ConfigError, rank_var, "=", rank, " is not below ", size_var, "=", size, " (",
             source, ")");
  env.source = source;
  env.rank = rank;
  env.world_size = size;
  env.local_rank = local_rank;
  env.local_world_size = local_size;
  return true;
}

}  // namespace

std::string LaunchEnv::describe() const {
  std::ostringstream os;
  os << "rank " << rank << " of " << world_size;
  if (local_rank >= 0) {
    os << " (local " << local_rank;
    if (local_world_size > 0) os << " of " << local_world_size;
    os << ")";
  }
  os << " from " << source;
  return os.str();
}

LaunchEnv detect_launch_env(const GetEnv& g) {
  LaunchEnv env;
  if (fill(env, "open-mpi", read_int(g, "OMPI_COMM_WORLD_RANK", 0), read_int(g, "OMPI_COMM_WORLD_SIZE", 1),
           read_int(g, "OMPI_COMM_WORLD_LOCAL_RANK", 0), read_int(g, "OMPI_COMM_WORLD_LOCAL_SIZE", 1),
           "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")) {
    return env;
  }
  if (fill(env, "pmix", read_int(g, "PMIX_RANK", 0), -1, -1, -1, "PMIX_RANK", "(none)")) {
    return env;
  }
  if (fill(env, "pmi", read_int(g, "PMI_RANK", 0), read_int(g, "PMI_SIZE", 1), -1, -1, "PMI_RANK", "PMI_SIZE")) {
    return env;
  }
  if (fill(env, "slurm", read_int(g, "SLURM_PROCID", 0), read_int(g, "SLURM_NTASKS", 1),
           read_int(g, "SLURM_LOCALID", 0), read_slurm_tasks_per_node(g), "SLURM_PROCID", "SLURM_NTASKS")) {
    return env;
  }
  if (fill(env, "torchrun", read_int(g, "RANK", 0), read_int(g, "WORLD_SIZE", 1), read_int(g, "LOCAL_RANK", 0),
           read_int(g, "LOCAL_WORLD_SIZE", 1), "RANK", "WORLD_SIZE")) {
    return env;
  }
  return env;
}

LaunchEnv detect_launch_env() {
  return detect_launch_env([](const char* name) { return static_cast<const char*>(std::getenv(name)); });
}

}  // namespace zeroshard
