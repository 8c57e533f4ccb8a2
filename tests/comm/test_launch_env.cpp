// SPDX-License-Identifier: Apache-2.0
#include <map>

#include "common/test_util.h"
#include "zeroshard/base/error.h"
#include "zeroshard/comm/launch_env.h"

namespace zs = zeroshard;

namespace {
zs::LaunchEnv detect(const std::map<std::string, std::string>& vars) {
  return zs::detect_launch_env([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}
}  // namespace

TEST(LaunchEnv, NoLauncherIsASingleProcess) {
  zs::LaunchEnv e = detect({});
  EXPECT_EQ(e.source, "none");
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
}

TEST(LaunchEnv, OpenMpi) {
  zs::LaunchEnv e = detect({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "8"},
                            {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"},
                            {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}});  // mpirun inside sbatch
  EXPECT_EQ(e.source, "open-mpi");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.describe(), "rank 5 of 8 (local 1 of 4) from open-mpi");
}

TEST(LaunchEnv, SlurmTorchrunAndPmix) {
  zs::LaunchEnv s = detect({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"},
                            {"SLURM_NTASKS_PER_NODE", "2(x2)"}});
  EXPECT_EQ(s.source, "slurm");
  EXPECT_EQ(s.rank, 3);
  EXPECT_EQ(s.local_rank, 1);
  EXPECT_EQ(s.local_world_size, 2);
  zs::LaunchEnv t = detect({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}});
  EXPECT_EQ(t.source, "torchrun");
  EXPECT_EQ(t.world_size, 2);
  zs::LaunchEnv p = detect({{"PMIX_RANK", "2"}});
  EXPECT_EQ(p.source, "pmix");
  EXPECT_EQ(p.rank, 2);
  EXPECT_EQ(p.world_size, -1);  // PMIx does not say; the Session then trusts MPI
}

TEST(LaunchEnv, BadValuesNameTheVariable) {
  try {
    detect({{"RANK", "one"}, {"WORLD_SIZE", "2"}});
    FAIL();
  } catch (const zs::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("environment variable RANK='one' is not a valid value"), std::string::npos)
        << e.what();
  }
  try {
    detect({{"RANK", "2"}, {"WORLD_SIZE", "2"}});
    FAIL();
  } catch (const zs::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("RANK=2 is not below WORLD_SIZE=2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(detect({{"WORLD_SIZE", "2"}}), zs::ConfigError);
}
