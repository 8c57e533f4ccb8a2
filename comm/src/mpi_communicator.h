// SPDX-License-Identifier: Apache-2.0
#pragma once
// The MPI backend for CPU tensors.
//
// Each communicator owns one progress thread that issues its collectives in call order with MPI's
// non-blocking collectives (MPI_Iallgather, MPI_Ireduce_scatter_block, ...) and waits on them. The
// calling thread never blocks on communication unless it calls Work::wait, so communication of one
// unit overlaps computation of the next even though Open MPI has no asynchronous progress of its own.
// Requires MPI_THREAD_MULTIPLE (communicators and the watchdog call MPI from their own threads).

#include <mpi.h>

#include <memory>

#include "zeroshard/comm/communicator.h"

namespace zeroshard::comm {

// Takes ownership of `comm` (freed on destruction). Not collective by itself.
std::shared_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, const CommOptions& options);

}  // namespace zeroshard::comm
