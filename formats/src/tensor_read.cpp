// SPDX-License-Identifier: Apache-2.0
// The tensor file readers' shared steps: open, scratch, dtype conversion, argument checks. See
// tensor_read.h.

#include "tensor_read.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "zeroshard/base/error.h"

namespace zeroshard::detail {

int open_for_read(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    ZS_THROW(IoError, "cannot open tensor file '", path, "': ", errno_string(e));
  }
  return fd;
}

at::Tensor scratch(int64_t bytes) { return at::empty({bytes}, at::TensorOptions().dtype(at::kByte)); }

bool convertible(c10::ScalarType from, c10::ScalarType to) {
  auto floating = [](c10::ScalarType t) {
    return t == c10::kFloat || t == c10::kBFloat16 || t == c10::kHalf || t == c10::kDouble;
  };
  return from == to || (floating(from) && floating(to));
}

void convert_into(const void* src, c10::ScalarType from, int64_t count, const at::Tensor& dst) {
  if (count == 0) return;
  if (from == dst.scalar_type()) {
    std::memcpy(dst.data_ptr(), src, static_cast<size_t>(count) * c10::elementSize(from));
    return;
  }
  at::Tensor view = at::from_blob(const_cast<void*>(src), {count}, at::TensorOptions().dtype(from));
  dst.view({count}).copy_(view);
}

const TensorInfo& find_tensor(const TensorFile& file, const std::string& name) {
  const TensorInfo* info = file.find(name);
  ZS_REQUIRE(info != nullptr, UsageError, "tensor file '", file.path(), "' has no tensor '", name, "' (it has ",
             file.tensors().size(), " tensors)");
  return *info;
}

void check_read(const std::string& path, const std::string& name, int64_t numel, c10::ScalarType dtype,
                int64_t begin, int64_t count, const at::Tensor& dst) {
  ZS_REQUIRE(begin >= 0 && count >= 0 && begin + count <= numel, UsageError, "reading elements [", begin, ", ",
             begin + count, ") of tensor '", name, "' in '", path, "': it has ", numel, " elements");
  ZS_REQUIRE(dst.defined() && dst.device().is_cpu() && dst.is_contiguous() && dst.numel() == count, UsageError,
             "reading tensor '", name, "' from '", path, "': the destination must be a contiguous CPU tensor of ",
             count, " elements");
  ZS_REQUIRE(convertible(dtype, dst.scalar_type()), UsageError, "tensor '", name, "' in '", path, "' is ",
             c10::toString(dtype), " and cannot be read as ", c10::toString(dst.scalar_type()),
             " (only float32, bfloat16, float16 and float64 convert into each other)");
}

}  // namespace zeroshard::detail
