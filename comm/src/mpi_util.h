// SPDX-License-Identifier: Apache-2.0
#pragma once
// Private MPI helpers: the check macro, process-level MPI state, datatype/op mapping.
// Only .cpp files of zs_core include this (MPI is a PRIVATE dependency).

#include <mpi.h>

#include <string>

#include <c10/core/ScalarType.h>

#include "zeroshard/comm/communicator.h"
#include "zeroshard/base/error.h"

namespace zeroshard::comm {

std::string mpi_error_string(int code);

// MPI state of this process.
struct MpiProcess {
  bool initialized_by_us = false;  // we called MPI_Init_thread (and so must finalize)
  int thread_level = MPI_THREAD_SINGLE;
};

// Initializes MPI with MPI_THREAD_MULTIPLE unless already initialized; checks the level obtained.
// Throws CommError when MPI gives less than MPI_THREAD_MULTIPLE (the communicator's progress threads
// and the watchdog call MPI concurrently).
MpiProcess& mpi_init(int* argc, char*** argv);
bool mpi_is_initialized();
bool mpi_is_finalized();
void mpi_finalize_if_ours();
const char* thread_level_name(int level);

// MPI type for a tensor dtype. Half and BFloat16 map to 16-bit integers (MPI has no half types);
// reductions on them use zeroshard's own MPI_Ops (see mpi_op).
MPI_Datatype mpi_datatype(c10::ScalarType dtype);
bool mpi_supports(c10::ScalarType dtype);
// Reduction op for dtype. Half/BFloat16: user-defined ops that add in fp32 and round to nearest-even
// per pairwise step (as NCCL does). kAvg maps to the sum op (division happens after).
MPI_Op mpi_op(ReduceOp op, c10::ScalarType dtype);

}  // namespace zeroshard::comm

#define ZS_MPI_CHECK(call)                                                                  \
  do {                                                                                      \
    int zs_mpi_rc_ = (call);                                                                \
    if (zs_mpi_rc_ != MPI_SUCCESS) {                                                        \
      ZS_THROW(::zeroshard::CommError, #call " failed: ",                                   \
               ::zeroshard::comm::mpi_error_string(zs_mpi_rc_));                            \
    }                                                                                       \
  } while (0)
