// SPDX-License-Identifier: Apache-2.0
// What every tensor file format shares (tensor_file.h): TensorInfo, and format detection.

#include "zeroshard/formats/tensor_file.h"

#include <cstdio>

#include "source_file.h"
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
