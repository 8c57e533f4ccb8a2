// SPDX-License-Identifier: Apache-2.0
#pragma once
// The watchdog's side channel over MPI: a duplicate of MPI_COMM_WORLD on which each rank's watchdog
// thread answers "what are you doing?" queries with point-to-point messages. Used only by the
// watchdog thread; not thread-safe otherwise.

#include <mpi.h>

#include <memory>

#include "watchdog.h"

namespace zeroshard::comm {

// Collective over MPI_COMM_WORLD (duplicates it).
std::unique_ptr<PeerChannel> make_mpi_peer_channel();

}  // namespace zeroshard::comm
