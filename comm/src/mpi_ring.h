// SPDX-License-Identifier: Apache-2.0
#pragma once
// zeroshard's own reduce-scatter for the MPI backend: a ring over point-to-point messages with the
// reduction in our code. Open MPI 4.1's MPI_Reduce_scatter_block runs at a third of its all-gather's
// bandwidth on one host (every algorithm of coll/tuned measured the same: docs/performance.md).

#include <mpi.h>

#include <ATen/core/Tensor.h>

#include "zeroshard/comm/communicator.h"

namespace zeroshard::comm {

// Whether reduce_scatter_ring takes this dtype and op (floating and integer dtypes; Sum, Avg,
// Max, Min; not Bool).
bool ring_supports(c10::ScalarType dtype, ReduceOp op);

// out = op over the ranks of `comm` of in[rank*S : (rank+1)*S], S = out.numel(); kAvg sums (the
// caller divides). n - 1 steps: in step s a rank sends its partial result of block (rank-s-1) mod n
// to rank+1 and receives block (rank-s-2) mod n from rank-1, which it combines with its own input
// (Half/BFloat16 added in fp32 and rounded, as the MPI ops and NCCL do). Each step moves in pieces
// of at most `max_piece` elements, so combining a piece overlaps the transfer of the next.
// Blocking; every rank of `comm` calls it in the same order as its other collectives on `comm`.
// `wait` completes one request (the communicator's polling wait). Throws CommError on MPI errors.
void reduce_scatter_ring(MPI_Comm comm, const at::Tensor& out, const at::Tensor& in, ReduceOp op,
                         int64_t max_piece, int (*wait)(MPI_Request*));

}  // namespace zeroshard::comm
