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

namespace {

// The scratch blocks of the calling (progress) thread, kept between calls up to kKeepScratchBytes:
// a fresh allocation's page faults cost about a third of the transfer.
at::Tensor& ring_scratch() {
  thread_local at::Tensor scratch;
  return scratch;
}

// One reduce-scatter of n > 1 ranks over the ring, each step's block moved in pieces.
// Received partial results are combined in place: the last step's in `out` itself, the earlier
// ones' (n > 2) in scratch blocks, two when n > 3 so that one is sent while the next arrives.
// Requests by step parity and piece. Pieces flow through the steps on their own: piece k of step
// s + 1 is sent as soon as piece k of step s is combined, so the steps overlap as well. Every rank
// posts its receives and its sends in the same (step, piece) order, which MPI's in-order matching
// of one source and tag pairs up.
class Ring {
 public:
  Ring(MPI_Comm comm, int rank, int n, const at::Tensor& out, const at::Tensor& in, CombineFn fn, ReduceOp op,
       int64_t max_piece, int (*wait)(MPI_Request*))
      : comm_(comm),
        rank_(rank),
        n_(n),
        out_(static_cast<char*>(out.data_ptr())),
        in_(static_cast<const char*>(in.data_ptr())),
        fn_(fn),
        op_(op),
        wait_(wait),
        shard_(out.numel()),
        esize_(static_cast<int64_t>(in.element_size())),
        type_(mpi_datatype(in.scalar_type())),
        right_((rank + 1) % n),
        left_((rank + n - 1) % n),
        piece_(std::min(max_piece, std::max((shard_ + kPiecesPerStep - 1) / kPiecesPerStep,
                                            std::max<int64_t>(1, kMinPieceBytes / esize_)))),
        pieces_((shard_ + piece_ - 1) / piece_),
        block_bytes_(shard_ * esize_),
        recvs_(static_cast<size_t>(2 * pieces_), MPI_REQUEST_NULL),
        sends_(static_cast<size_t>(2 * pieces_), MPI_REQUEST_NULL) {
    const int scratch_blocks = std::min(n - 2, 2);
    at::Tensor& scratch = ring_scratch();
    if (scratch_blocks > 0 && (!scratch.defined() || scratch.numel() < scratch_blocks * block_bytes_)) {
      scratch = at::empty({scratch_blocks * block_bytes_}, at::TensorOptions().dtype(at::kByte));
    }
    scratch_ = scratch.defined() ? static_cast<char*>(scratch.data_ptr()) : nullptr;
  }

  void run() {
    for (int64_t k = 0; k < pieces_; ++k) post(0, k, in_ + block_of(0, 1) * block_bytes_);  // own input
    for (int s = 0; s < n_ - 1; ++s) step(s);
    for (MPI_Request& r : sends_) ZS_MPI_CHECK(wait_(&r));  // the last step's (the rest are null)
    at::Tensor& scratch = ring_scratch();
    if (scratch.defined() && scratch.numel() > kKeepScratchBytes) scratch = at::Tensor();
  }

 private:
  // Step s receives into (and combines in) `out` at the last step, else scratch block s % 2.
  char* target(int s) const { return s == n_ - 2 ? out_ : scratch_ + (s % 2) * block_bytes_; }
  int64_t block_of(int s, int64_t shift) const { return (((rank_ - s - shift) % n_) + n_) % n_; }
  size_t slot(int s, int64_t k) const { return static_cast<size_t>((s % 2) * pieces_ + k); }

  void post(int s, int64_t k, const char* src) {
    const int64_t off = k * piece_, len = std::min(piece_, shard_ - off);
    ZS_MPI_CHECK(MPI_Irecv(target(s) + off * esize_, static_cast<int>(len), type_, left_, kRingTag, comm_,
                           &recvs_[slot(s, k)]));
    ZS_MPI_CHECK(MPI_Isend(src + off * esize_, static_cast<int>(len), type_, right_, kRingTag, comm_,
                           &sends_[slot(s, k)]));
  }

  void step(int s) {
    char* rbuf = target(s);
    const char* mine = in_ + block_of(s, 2) * block_bytes_;
    for (int64_t k = 0; k < pieces_; ++k) {
      const int64_t off = k * piece_, len = std::min(piece_, shard_ - off);
      ZS_MPI_CHECK(wait_(&recvs_[slot(s, k)]));
      fn_(rbuf + off * esize_, rbuf + off * esize_, mine + off * esize_, len, op_);
      if (s + 1 < n_ - 1) {
        // This step's send of piece k read from the buffer the next step receives into (s >= 1).
        ZS_MPI_CHECK(wait_(&sends_[slot(s, k)]));
        post(s + 1, k, rbuf);
      }
    }
  }

  MPI_Comm comm_;
  int rank_, n_;
  char* out_;
  const char* in_;
  CombineFn fn_;
  ReduceOp op_;
  int (*wait_)(MPI_Request*);
  int64_t shard_, esize_;
  MPI_Datatype type_;
  int right_, left_;
  int64_t piece_, pieces_, block_bytes_;
  char* scratch_ = nullptr;
  std::vector<MPI_Request> recvs_, sends_;
};

}  // namespace

void reduce_scatter_ring(MPI_Comm comm, const at::Tensor& out, const at::Tensor& in, ReduceOp op,
                         int64_t max_piece, int (*wait)(MPI_Request*)) {
  int rank = 0, n = 1;
  ZS_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  ZS_MPI_CHECK(MPI_Comm_size(comm, &n));
  const int64_t shard = out.numel();
  const CombineFn fn = combine_for(in.scalar_type());
  ZS_CHECK(fn != nullptr && in.numel() == shard * n, "reduce_scatter_ring: ", in.numel(), " ",
           c10::toString(in.scalar_type()), " elements in for ", shard, " out on ", n, " ranks");
  if (n == 1 || shard == 0) {
    if (shard > 0) std::memcpy(out.data_ptr(), in.data_ptr(), static_cast<size_t>(shard * in.element_size()));
    return;
  }
  Ring(comm, rank, n, out, in, fn, op, max_piece, wait).run();
}

}  // namespace zeroshard::comm
