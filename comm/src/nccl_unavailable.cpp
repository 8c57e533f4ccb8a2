// SPDX-License-Identifier: Apache-2.0
// Build without NCCL (CUDA toolkit or NCCL not found at configure time): the factory says so.
#include "zeroshard/comm/factory.h"
#include "zeroshard/base/error.h"

namespace zeroshard {

bool nccl_compiled() { return false; }

std::shared_ptr<Communicator> make_nccl_communicator(const std::shared_ptr<Communicator>& bootstrap,
                                                     int cuda_device, const CommOptions& options) {
  ZS_THROW(CommError, "cannot create NCCL communicator '", options.name, "' on CUDA device ",
           cuda_device,
           ": zeroshard was built without NCCL: configure with the CUDA toolkit and NCCL "
           "(see FindNCCL: CUDA_HOME/NCCL_ROOT)");
}

}  // namespace zeroshard
