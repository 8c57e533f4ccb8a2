// SPDX-License-Identifier: Apache-2.0
// What every tensor file format shares (tensor_file.h): format detection, positioned reads, dtype
// conversion and the checks of read()'s arguments.

#include "zeroshard/formats/tensor_file.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "source_file.h"
#include "tensor_file_internal.h"
#include "zeroshard/base/error.h"

namespace zeroshard {

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

const TensorInfo* TensorFile::find(const std::string& name) const {
  for (const TensorInfo& t : tensors()) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

namespace detail {

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

}  // namespace detail

std::unique_ptr<TensorFile> open_tensor_file(const std::string& path, std::shared_ptr<IoEngine> io) {
  unsigned char head[9] = {0};
  int64_t n = 0, size = 0;
  {
    detail::SourceFile file(path, io);
    n = file.read_some(head, sizeof(head), 0);
    size = file.size();
  }
  if (n >= 4 && head[0] == 'P' && head[1] == 'K' && head[2] == 3 && head[3] == 4) {
    return open_torch_zip_file(path, std::move(io));
  }
  // safetensors: the JSON header starts at byte 8. Its length is not checked here, so a truncated
  // file gets the safetensors reader's precise error rather than "not a tensor file".
  if (n == 9 && head[8] == '{') return open_safetensors_file(path, std::move(io));
  std::string shown;
  for (int64_t i = 0; i < n && i < 8; ++i) {
    char buf[8];
    std::snprintf(buf, sizeof(buf), "%02x", head[i]);
    shown += buf;
  }
  const char* legacy = n > 0 && head[0] == 0x80
                           ? " (a pickle: torch.save's legacy format, from PyTorch < 1.6 or "
                             "_use_new_zipfile_serialization=False; load it and torch.save it again in a current PyTorch)"
                           : "";
  ZS_THROW(IoError, "'", path, "' (", size, " bytes) is not a tensor file zeroshard reads: expected a zip archive "
           "(torch.save, torch.jit.save, zeroshard-ckpt consolidate; starts with \"PK\\3\\4\") or safetensors (an 8-byte "
           "header length, then '{'); its first bytes are ", shown.empty() ? std::string("none") : shown, legacy);
}

}  // namespace zeroshard
