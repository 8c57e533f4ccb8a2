// SPDX-License-Identifier: Apache-2.0
// dtype -> MPI_Datatype and ReduceOp -> MPI_Op, including zeroshard's own ops for 16-bit floats.

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <mutex>

#include "mpi_util.h"

namespace zeroshard::comm {
namespace {

// Element-wise reduction of 16-bit floats: widen to fp32, combine, round back (nearest-even).
template <typename T, typename Combine>
void reduce16(void* in, void* inout, int* len, Combine combine) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = T(combine(static_cast<float>(a[i]), static_cast<float>(b[i])));
}

struct Add { float operator()(float x, float y) const { return x + y; } };
struct Max { float operator()(float x, float y) const { return std::max(x, y); } };
struct Min { float operator()(float x, float y) const { return std::min(x, y); } };

template <typename T, typename Combine>
void mpi_user_fn(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce16<T>(in, inout, len, Combine{});
}

struct HalfOps {
  MPI_Op sum, max, min;
};

HalfOps make_ops_bf16() {
  HalfOps ops{};
  MPI_Op_create(&mpi_user_fn<c10::BFloat16, Add>, 1, &ops.sum);
  MPI_Op_create(&mpi_user_fn<c10::BFloat16, Max>, 1, &ops.max);
  MPI_Op_create(&mpi_user_fn<c10::BFloat16, Min>, 1, &ops.min);
  return ops;
}

HalfOps make_ops_fp16() {
  HalfOps ops{};
  MPI_Op_create(&mpi_user_fn<c10::Half, Add>, 1, &ops.sum);
  MPI_Op_create(&mpi_user_fn<c10::Half, Max>, 1, &ops.max);
  MPI_Op_create(&mpi_user_fn<c10::Half, Min>, 1, &ops.min);
  return ops;
}

MPI_Op pick(const HalfOps& ops, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return ops.sum;
    case ReduceOp::kMax: return ops.max;
    case ReduceOp::kMin: return ops.min;
  }
  return ops.sum;
}

}  // namespace

bool mpi_supports(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Float:
    case c10::ScalarType::Double:
    case c10::ScalarType::Half:
    case c10::ScalarType::BFloat16:
    case c10::ScalarType::Int:
    case c10::ScalarType::Long:
    case c10::ScalarType::Short:
    case c10::ScalarType::Byte:
    case c10::ScalarType::Char:
    case c10::ScalarType::Bool: return true;
    default: return false;
  }
}

MPI_Datatype mpi_datatype(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Float: return MPI_FLOAT;
    case c10::ScalarType::Double: return MPI_DOUBLE;
    case c10::ScalarType::Half:
    case c10::ScalarType::BFloat16: return MPI_UINT16_T;
    case c10::ScalarType::Int: return MPI_INT32_T;
    case c10::ScalarType::Long: return MPI_INT64_T;
    case c10::ScalarType::Short: return MPI_INT16_T;
    case c10::ScalarType::Byte: return MPI_UINT8_T;
    case c10::ScalarType::Char: return MPI_INT8_T;
    case c10::ScalarType::Bool: return MPI_C_BOOL;
    default: break;
  }
  ZS_THROW(CommError, "dtype ", c10::toString(dtype), " is not supported by the MPI backend; supported: "
           "Float, Double, Half, BFloat16, Int, Long, Short, Byte, Char, Bool");
}

MPI_Op mpi_op(ReduceOp op, c10::ScalarType dtype) {
  if (dtype == c10::ScalarType::BFloat16) {
    static HalfOps ops = make_ops_bf16();
    return pick(ops, op);
  }
  if (dtype == c10::ScalarType::Half) {
    static HalfOps ops = make_ops_fp16();
    return pick(ops, op);
  }
  if (dtype == c10::ScalarType::Bool) {
    // Bool: sum and max are logical or, min is logical and.
    return op == ReduceOp::kMin ? MPI_LAND : MPI_LOR;
  }
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return MPI_SUM;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kMin: return MPI_MIN;
  }
  return MPI_SUM;
}

}  // namespace zeroshard::comm
