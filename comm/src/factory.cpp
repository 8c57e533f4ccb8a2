// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/comm/factory.h"

#include "mpi_communicator.h"
#include "mpi_util.h"

namespace zeroshard {

std::shared_ptr<Communicator> make_mpi_world_communicator(const CommOptions& options) {
  ZS_REQUIRE(comm::mpi_is_initialized() && !comm::mpi_is_finalized(), UsageError,
             "make_mpi_world_communicator needs an active zeroshard::Session (MPI is not running)");
  MPI_Comm dup = MPI_COMM_NULL;
  ZS_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
  return comm::make_mpi_communicator(dup, options);
}

}  // namespace zeroshard
