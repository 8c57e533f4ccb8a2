// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the launcher told this process through the environment: Open MPI's mpirun, PMIx/PMI,
// Slurm's srun, or torchrun-style variables. The Session cross-checks this against MPI itself, so a
// job launched in a way MPI cannot see (e.g. torchrun starting N independent processes) fails with
// a clear message instead of N jobs of world size 1.

#include <functional>
#include <string>

namespace zeroshard {

struct LaunchEnv {
  std::string source = "none";  // "open-mpi", "pmix", "pmi", "slurm", "torchrun", or "none"
  int rank = 0;
  int world_size = 1;        // -1 when the launcher does not say (PMIx)
  int local_rank = 0;        // -1 when the launcher does not say
  int local_world_size = 1;  // -1 when the launcher does not say
  std::string describe() const;  // e.g. "rank 1 of 4 (local 1 of 2) from open-mpi"
};

using GetEnv = std::function<const char*(const char*)>;

// Reads the launcher's variables, in this order of precedence:
//   OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE}  (Open MPI's mpirun)
//   PMIX_RANK (size unknown) / PMI_RANK + PMI_SIZE     (other PMI launchers)
//   SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE (srun)
//   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE    (torchrun style)
// Throws ConfigError naming the variable when a value is not an integer or is out of range.
LaunchEnv detect_launch_env(const GetEnv& getenv_fn);
LaunchEnv detect_launch_env();

}  // namespace zeroshard
