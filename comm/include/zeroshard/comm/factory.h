// SPDX-License-Identifier: Apache-2.0
#pragma once
// Creating communicators. Most code gets its communicators from zeroshard::Session
// (session.world() for CPU tensors, session.device_world() for CUDA tensors); these factories are
// for building further ones.

#include <memory>

#include "zeroshard/comm/communicator.h"

namespace zeroshard {

// A new MPI communicator over all ranks of the job (a duplicate of MPI_COMM_WORLD, so its
// collectives never mix with another communicator's). Requires an active Session. Collective.
std::shared_ptr<Communicator> make_mpi_world_communicator(const CommOptions& options);

// True when this build carries the NCCL backend (CUDA toolkit and NCCL were found at build time).
bool nccl_compiled();

// A NCCL communicator over the ranks of `bootstrap` (any backend; used to broadcast the NCCL unique
// id from its rank 0), on CUDA device `cuda_device`. Collective over `bootstrap`.
// Throws CommError when the build has no NCCL, when LibTorch has no CUDA, or when the device is absent.
std::shared_ptr<Communicator> make_nccl_communicator(const std::shared_ptr<Communicator>& bootstrap,
                                                     int cuda_device, const CommOptions& options);

}  // namespace zeroshard
