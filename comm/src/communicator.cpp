// SPDX-License-Identifier: Apache-2.0
// The public collectives: every argument check, for every backend, in one place (as NCCL checks in
// ncclEnqueueCheck before its per-collective code), then the backend's run_* call.

#include "zeroshard/comm/communicator.h"

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <sstream>

#include "zeroshard/base/error.h"

namespace zeroshard {

// Checks the arguments of one call; every message starts with
// "communicator '<name>' (<backend>): <call>: ".
class Communicator::ArgCheck {
 public:
  ArgCheck(const Communicator& c, const char* call) : c_(c), call_(call) {}

  [[noreturn]] void fail(const std::string& what) const {
    ZS_THROW(CommError, "communicator '", c_.name(), "' (", c_.backend(), "): ", call_, ": ", what);
  }

  void tensor(const at::Tensor& t, const char* role) const {
    if (!t.defined()) fail(detail::concat(role, " is an undefined tensor"));
    const std::string device = c_.device_requirement(t);
    if (!device.empty()) fail(detail::concat(role, " is on ", t.device().str(), "; ", device));
    if (!t.is_contiguous()) {
      fail(detail::concat(role, " (shape ", t.sizes(), ") is not contiguous; pass a contiguous tensor (e.g. "
                          ".contiguous() or a flat buffer)"));
    }
    if (!c_.supports_dtype(t.scalar_type())) {
      fail(detail::concat(role, " has dtype ", c10::toString(t.scalar_type()), ", not supported by the ",
                          c_.backend(), " backend; supported: ", c_.supported_dtypes()));
    }
  }

  void pair(const at::Tensor& out, const char* out_role, const at::Tensor& in, const char* in_role) const {
    tensor(out, out_role);
    tensor(in, in_role);
    if (out.scalar_type() != in.scalar_type()) {
      fail(detail::concat(out_role, " has dtype ", c10::toString(out.scalar_type()), " but ", in_role, " has ",
                          c10::toString(in.scalar_type()), "; both must have the same dtype"));
    }
  }

  // `big` must hold size() x `small`.numel() elements.
  void sizes(const at::Tensor& big, const char* big_role, const at::Tensor& small, const char* small_role) const {
    const int64_t want = small.numel() * c_.size();
    if (big.numel() != want) {
      fail(detail::concat(big_role, " has ", big.numel(), " elements but must have size() * ", small_role,
                          ".numel() = ", c_.size(), " * ", small.numel(), " = ", want));
    }
  }

  void op(ReduceOp op, const at::Tensor& t) const {
    if (op == ReduceOp::kAvg && !c10::isFloatingType(t.scalar_type())) {
      fail(detail::concat("reduce op avg needs a floating-point dtype, got ", c10::toString(t.scalar_type()),
                          "; use sum and divide yourself"));
    }
  }

  void disjoint(const at::Tensor& a, const char* ra, const at::Tensor& b, const char* rb) const {
    if (a.numel() == 0 || b.numel() == 0) return;
    const auto lo_a = reinterpret_cast<uintptr_t>(a.data_ptr()), lo_b = reinterpret_cast<uintptr_t>(b.data_ptr());
    const auto hi_a = lo_a + a.nbytes(), hi_b = lo_b + b.nbytes();
    if (hi_a <= lo_b || hi_b <= lo_a) return;
    fail(detail::concat(ra, " and ", rb, " overlap in memory; they must be disjoint (the only in-place form "
                        "supported is all_gather_into with in_shard = out_flat's own rank slice)"));
  }

 private:
  const Communicator& c_;
  const char* call_;
};

std::shared_ptr<Work> Communicator::all_gather_into(const at::Tensor& out_flat, const at::Tensor& in_shard,
                                                    std::string_view tag) {
  const ArgCheck check(*this, "all_gather_into");
  check.pair(out_flat, "out_flat", in_shard, "in_shard");
  check.sizes(out_flat, "out_flat", in_shard, "in_shard");
  const bool in_place = in_shard.numel() > 0 &&
                        in_shard.data_ptr() == static_cast<char*>(out_flat.data_ptr()) +
                                                   static_cast<int64_t>(rank()) * in_shard.nbytes();
  if (!in_place) check.disjoint(out_flat, "out_flat", in_shard, "in_shard");
  return run_all_gather(out_flat, in_shard, in_place, tag);
}

std::shared_ptr<Work> Communicator::reduce_scatter_into(const at::Tensor& out_shard, const at::Tensor& in_flat,
                                                        ReduceOp op, std::string_view tag) {
  const ArgCheck check(*this, "reduce_scatter_into");
  check.pair(out_shard, "out_shard", in_flat, "in_flat");
  check.op(op, in_flat);
  check.sizes(in_flat, "in_flat", out_shard, "out_shard");
  check.disjoint(out_shard, "out_shard", in_flat, "in_flat");
  return run_reduce_scatter(out_shard, in_flat, op, tag);
}

std::shared_ptr<Work> Communicator::reduce_scatter_int8_into(const at::Tensor& out_shard, const at::Tensor& in_flat,
                                                             ReduceOp op, int64_t block, std::string_view tag) {
  const ArgCheck check(*this, "reduce_scatter_int8_into");
  check.pair(out_shard, "out_shard", in_flat, "in_flat");
  if (!c10::isFloatingType(in_flat.scalar_type())) {
    check.fail(detail::concat("in_flat has dtype ", c10::toString(in_flat.scalar_type()),
                              "; int8 quantization takes floating-point values"));
  }
  if (op != ReduceOp::kSum && op != ReduceOp::kAvg) {
    check.fail(detail::concat("reduce op ", to_string(op), " cannot run on quantized values; use sum or avg"));
  }
  if (block < 8 || block > 65536 || block % 4 != 0) {
    check.fail(detail::concat("block ", block, " is out of range; allowed: a multiple of 4 in [8, 65536]"));
  }
  check.sizes(in_flat, "in_flat", out_shard, "out_shard");
  check.disjoint(out_shard, "out_shard", in_flat, "in_flat");
  return run_reduce_scatter_int8(out_shard, in_flat, op, block, tag);
}

std::shared_ptr<Work> Communicator::run_reduce_scatter_int8(const at::Tensor&, const at::Tensor&, ReduceOp, int64_t,
                                                            std::string_view) {
  ZS_THROW(CommError, "communicator '", name(), "' (", backend(), "): reduce_scatter_int8_into: the ", backend(),
           " backend has no quantized reduce-scatter; it runs on the MPI backend (CPU tensors) only");
}

std::shared_ptr<Work> Communicator::all_reduce(const at::Tensor& tensor, ReduceOp op, std::string_view tag) {
  const ArgCheck check(*this, "all_reduce");
  check.tensor(tensor, "tensor");
  check.op(op, tensor);
  return run_all_reduce(tensor, op, tag);
}

std::shared_ptr<Work> Communicator::broadcast(const at::Tensor& tensor, int root, std::string_view tag) {
  const ArgCheck check(*this, "broadcast");
  check.tensor(tensor, "tensor");
  if (root < 0 || root >= size()) {
    check.fail(detail::concat("root ", root, " is out of range; allowed: [0, ", size() - 1, "]"));
  }
  return run_broadcast(tensor, root, tag);
}

std::shared_ptr<Work> Communicator::barrier(std::string_view tag) { return run_barrier(tag); }

}  // namespace zeroshard
