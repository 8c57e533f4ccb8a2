// SPDX-License-Identifier: Apache-2.0
#include "mpi_ring.h"

#include <ATen/ops/empty.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "mpi_util.h"

namespace zeroshard::comm {
namespace {

constexpr int kRingTag = 0x5a52;           // point-to-point tag of the ring's messages
constexpr int64_t kPiecesPerStep = 16;     // a step's block is moved in about this many pieces,
constexpr int64_t kMinPieceBytes = 64 << 10;  // each at least this large
constexpr int64_t kKeepScratchBytes = int64_t{256} << 20;  // scratch kept between calls up to this

// dst[i] = a[i] op b[i]; Half/BFloat16 computed in float and rounded once.
template <typename T>
void combine(void* dst_v, const void* a_v, const void* b_v, int64_t len, ReduceOp op) {
  using Acc = std::conditional_t<std::is_same_v<T, c10::Half> || std::is_same_v<T, c10::BFloat16>, float, T>;
  auto* dst = static_cast<T*>(dst_v);
  const auto* a = static_cast<const T*>(a_v);
  const auto* b = static_cast<const T*>(b_v);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      for (int64_t i = 0; i < len; ++i) dst[i] = static_cast<T>(static_cast<Acc>(a[i]) + static_cast<Acc>(b[i]));
      break;
    case ReduceOp::kMax:
      for (int64_t i = 0; i < len; ++i) dst[i] = static_cast<Acc>(a[i]) < static_cast<Acc>(b[i]) ? b[i] : a[i];
      break;
    case ReduceOp::kMin:
      for (int64_t i = 0; i < len; ++i) dst[i] = static_cast<Acc>(b[i]) < static_cast<Acc>(a[i]) ? b[i] : a[i];
      break;
  }
}

using CombineFn = void (*)(void*, const void*, const void*, int64_t, ReduceOp);

CombineFn combine_for(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::kFloat: return &combine<float>;
    case c10::kDouble: return &combine<double>;
    case c10::kHalf: return &combine<c10::Half>;
    case c10::kBFloat16: return &combine<c10::BFloat16>;
    case c10::kInt: return &combine<int32_t>;
    case c10::kLong: return &combine<int64_t>;
    case c10::kShort: return &combine<int16_t>;
    case c10::kByte: return &combine<uint8_t>;
    case c10::kChar: return &combine<int8_t>;
    default: return nullptr;
  }
}

}  // namespace

bool ring_supports(c10::ScalarType dtype, ReduceOp op) {
  (void)op;  // every ReduceOp
  return combine_for(dtype) != nullptr;
}

void reduce_scatter_ring(MPI_Comm comm, const at::Tensor& out, const at::Tensor& in, ReduceOp op,
                         int64_t max_piece, int (*wait)(MPI_Request*)) {
  int rank = 0, n = 1;
  ZS_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  ZS_MPI_CHECK(MPI_Comm_size(comm, &n));
  const int64_t shard = out.numel();
  const CombineFn fn = combine_for(in.scalar_type());
  ZS_CHECK(fn != nullptr && in.numel() == shard * n, "reduce_scatter_ring: ", in.numel(), " ",
           c10::toString(in.scalar_type()), " elements in for ", shard, " out on ", n, " ranks");
  const auto esize = static_cast<int64_t>(in.element_size());
  const char* in_p = static_cast<const char*>(in.data_ptr());
  if (n == 1 || shard == 0) {
    if (shard > 0) std::memcpy(out.data_ptr(), in_p, static_cast<size_t>(shard * esize));
    return;
  }
  const MPI_Datatype type = mpi_datatype(in.scalar_type());
  const int right = (rank + 1) % n, left = (rank + n - 1) % n;
  const int64_t piece = std::min(
      max_piece, std::max((shard + kPiecesPerStep - 1) / kPiecesPerStep, std::max<int64_t>(1, kMinPieceBytes / esize)));
  const int64_t pieces = (shard + piece - 1) / piece;
  // Received partial results are combined in place: the last step's in `out` itself, the earlier
  // ones' (n > 2) in scratch blocks, two when n > 3 so that one is sent while the next arrives.
  // The scratch stays with the calling (progress) thread up to kKeepScratchBytes: a fresh
  // allocation's page faults cost about a third of the transfer.
  const int scratch_blocks = std::min(n - 2, 2);
  const int64_t block_bytes = shard * esize;
  thread_local at::Tensor scratch;
  if (scratch_blocks > 0 && (!scratch.defined() || scratch.numel() < scratch_blocks * block_bytes)) {
    scratch = at::empty({scratch_blocks * block_bytes}, at::TensorOptions().dtype(at::kByte));
  }
  // Requests by step parity and piece. Pieces flow through the steps on their own: piece k of step
  // s + 1 is sent as soon as piece k of step s is combined, so the steps overlap as well. Every
  // rank posts its receives and its sends in the same (step, piece) order, which MPI's in-order
  // matching of one source and tag pairs up.
  std::vector<MPI_Request> recvs(static_cast<size_t>(2 * pieces), MPI_REQUEST_NULL);
  std::vector<MPI_Request> sends(static_cast<size_t>(2 * pieces), MPI_REQUEST_NULL);
  // Step s receives into (and combines in) `out` at the last step, else scratch block s % 2.
  auto target = [&](int s) {
    return s == n - 2 ? static_cast<char*>(out.data_ptr()) : static_cast<char*>(scratch.data_ptr()) + (s % 2) * block_bytes;
  };
  auto block_of = [&](int s, int64_t shift) { return (((rank - s - shift) % n) + n) % n; };
  auto post = [&](int s, int64_t k, const char* src) {
    const int64_t off = k * piece, len = std::min(piece, shard - off);
    const size_t slot = static_cast<size_t>((s % 2) * pieces + k);
    ZS_MPI_CHECK(MPI_Irecv(target(s) + off * esize, static_cast<int>(len), type, left, kRingTag, comm, &recvs[slot]));
    ZS_MPI_CHECK(MPI_Isend(src + off * esize, static_cast<int>(len), type, right, kRingTag, comm, &sends[slot]));
  };
  for (int64_t k = 0; k < pieces; ++k) post(0, k, in_p + block_of(0, 1) * block_bytes);  // own input
  for (int s = 0; s < n - 1; ++s) {
    char* rbuf = target(s);
    const char* mine = in_p + block_of(s, 2) * block_bytes;
    for (int64_t k = 0; k < pieces; ++k) {
      const int64_t off = k * piece, len = std::min(piece, shard - off);
      const size_t slot = static_cast<size_t>((s % 2) * pieces + k);
      ZS_MPI_CHECK(wait(&recvs[slot]));
      fn(rbuf + off * esize, rbuf + off * esize, mine + off * esize, len, op);
      if (s + 1 < n - 1) {
        // This step's send of piece k read from the buffer the next step receives into (s >= 1).
        ZS_MPI_CHECK(wait(&sends[slot]));
        post(s + 1, k, rbuf);
      }
    }
  }
  for (MPI_Request& r : sends) ZS_MPI_CHECK(wait(&r));  // the last step's (the rest are null)
  if (scratch.defined() && scratch.numel() > kKeepScratchBytes) scratch = at::Tensor();
}

}  // namespace zeroshard::comm
