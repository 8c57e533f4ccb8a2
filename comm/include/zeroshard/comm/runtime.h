// SPDX-License-Identifier: Apache-2.0
#pragma once
// The process's MPI runtime, as zeroshard::Session starts and stops it. Programs use the Session;
// this is the layer below it, so that only comm/ touches MPI (a PRIVATE dependency).
//
//   start_mpi_runtime()                   MPI_Init_thread(MPI_THREAD_MULTIPLE) unless MPI runs
//   MpiRuntime rt = open_mpi_communicators(options_for)  world + node communicators, watchdog
//   ...
//   stop_mpi_runtime()                    watchdog stopped, MPI finalized if we initialized it
//
// Not thread-safe: start and stop on one thread. abort_job may be called from any thread.

#include <functional>
#include <memory>
#include <string>

#include "zeroshard/comm/communicator.h"

namespace zeroshard {

// What MPI says about this process once it runs.
struct MpiProcessInfo {
  int rank = 0;
  int world_size = 1;
  std::string library;  // "Open MPI v4.1.4"
  std::string thread_level;  // "MPI_THREAD_MULTIPLE"
};

// Initializes MPI with MPI_THREAD_MULTIPLE unless it is already running, makes MPI errors return
// codes, and checks the thread level. Throws CommError when MPI was finalized or gives less than
// MPI_THREAD_MULTIPLE (zeroshard's progress threads and watchdog call MPI concurrently).
MpiProcessInfo start_mpi_runtime();

struct MpiCommunicators {
  std::shared_ptr<Communicator> world;  // all ranks (a duplicate of MPI_COMM_WORLD)
  std::shared_ptr<Communicator> node;   // ranks of this host (MPI_COMM_TYPE_SHARED)
  int local_rank = 0;
  int local_world_size = 1;
};

// Collective over all ranks: the world and node communicators with the options `options_for(name,
// local_world_size)` gives for "world" and "node", and the watchdog's side channel to the other
// ranks; a watchdog timeout ends the job through abort_job.
MpiCommunicators open_mpi_communicators(
    const std::function<CommOptions(const std::string& name, int local_world_size)>& options_for);

// Stops the watchdog and finalizes MPI if start_mpi_runtime initialized it. Drop the
// communicators first.
void stop_mpi_runtime();

// True between start_mpi_runtime and stop_mpi_runtime (MPI initialized and not finalized).
bool mpi_runtime_running();

// Prints `message` as one line on stderr and terminates the job with `code`: MPI_Abort when MPI
// runs with more than one rank, else _Exit. Safe to call from any thread; a second caller waits for
// the first to end the job instead of printing again.
[[noreturn]] void abort_job(const std::string& message, int code = 1);

}  // namespace zeroshard
