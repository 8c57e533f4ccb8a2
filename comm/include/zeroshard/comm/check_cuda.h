// SPDX-License-Identifier: Apache-2.0
#pragma once
// Check macros for the CUDA runtime and NCCL, in zeroshard's error family.
//
// Optional header: it includes <cuda_runtime.h> and <nccl.h>, so only translation units that are
// compiled with the CUDA toolkit and NCCL include paths (and link cudart / nccl) may include it.
// No other public zeroshard header includes it.
//
//   ZS_CUDA_CHECK(cudaStreamWaitEvent(stream, ev, 0));
//     -> throws zeroshard::CudaError "cudaStreamWaitEvent(stream, ev, 0) failed:
//     cudaErrorInvalidValue
//        (invalid argument)" with rank, host and file:line.
//   ZS_NCCL_CHECK(ncclAllReduce(...), comm);       // comm may be nullptr (e.g. before init)
//     -> throws zeroshard::CommError with ncclGetErrorString and ncclGetLastError(comm).
//
// Both evaluate `call` exactly once. Thread-safe as far as the checked call is.

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "zeroshard/base/error.h"

namespace zeroshard::detail {

[[noreturn]] inline void throw_cuda_error(cudaError_t rc, const char* call, const char* file,
                                          int line) {
  // Clear the runtime's last-error slot, or LibTorch's next launch check would report this error
  // as its own (sticky errors stay: the context is unusable anyway).
  (void)cudaGetLastError();
  throw CudaError(
      concat(call, " failed: ", cudaGetErrorName(rc), " (", cudaGetErrorString(rc), ")"), file,
      line);
}

[[noreturn]] inline void throw_nccl_error(ncclResult_t rc, ncclComm_t comm, const char* call,
                                          const char* file, int line) {
  const char* last = ncclGetLastError(comm);
  std::string detail = (last != nullptr && last[0] != '\0') ? concat("; NCCL says: ", last) : "";
  throw CommError(
      concat(call, " failed: ", ncclGetErrorString(rc), " (ncclResult ", static_cast<int>(rc), ")",
             detail, ". Run with NCCL_DEBUG=WARN (or INFO) for NCCL's own log."),
      file, line);
}

}  // namespace zeroshard::detail

#define ZS_CUDA_CHECK(call)                                                          \
  do {                                                                               \
    cudaError_t zs_cuda_rc_ = (call);                                                \
    if (zs_cuda_rc_ != cudaSuccess) {                                                \
      ::zeroshard::detail::throw_cuda_error(zs_cuda_rc_, #call, __FILE__, __LINE__); \
    }                                                                                \
  } while (0)

#define ZS_NCCL_CHECK(call, comm_or_null)                                                 \
  do {                                                                                    \
    ncclResult_t zs_nccl_rc_ = (call);                                                    \
    if (zs_nccl_rc_ != ncclSuccess) {                                                     \
      ::zeroshard::detail::throw_nccl_error(zs_nccl_rc_, (comm_or_null), #call, __FILE__, \
                                            __LINE__);                                    \
    }                                                                                     \
  } while (0)
