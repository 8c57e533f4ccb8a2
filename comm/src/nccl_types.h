// SPDX-License-Identifier: Apache-2.0
#pragma once
// How a LibTorch dtype and a ReduceOp travel through NCCL. Private to zs_comm's NCCL backend;
// pure functions, tested without a GPU (tests/comm/test_nccl.cpp, NcclTypes.*).

#include <c10/core/ScalarType.h>
#include <nccl.h>

#include <optional>

#include "zeroshard/comm/communicator.h"

namespace zeroshard::comm {

struct NcclType {
  ncclDataType_t type = ncclUint8;
  int64_t per_element = 1;  // NCCL items per tensor element (2 for a dtype moved as its bytes)
  bool reducible = true;    // false: moved as bytes (broadcast, all-gather), never reduced
};

// Float, Double, Half, BFloat16, Int, Long, Byte, Char: NCCL's own types. Bool: ncclUint8 (LibTorch
// stores a bool as one byte holding 0 or 1), reducible with to_nccl_op's logical or/and. Short:
// NCCL has no 16-bit integer type, so it moves as two ncclUint8 per element and cannot be reduced.
// Any other dtype: nullopt.
std::optional<NcclType> to_nccl_type(c10::ScalarType dtype);

// The dtypes to_nccl_type maps, for error messages.
constexpr const char* kNcclSupportedDtypes =
    "Float, Double, Half, BFloat16, Int, Long, Byte, Char, Bool, Short (Short: broadcast and all-gather only)";

// The NCCL reduction for `op` on `dtype`. Bool: sum and max are logical or (ncclMax over 0/1: a sum
// would store 2 in a bool), min is logical and (ncclMin), as the MPI backend does. kAvg is for
// floating dtypes only (the public call checks).
ncclRedOp_t to_nccl_op(ReduceOp op, c10::ScalarType dtype);

}  // namespace zeroshard::comm
