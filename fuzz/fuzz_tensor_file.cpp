// SPDX-License-Identifier: Apache-2.0
// Tensor files (safetensors, torch.save zip + pickle, TorchScript archives): open, list, and read
// the first elements of every tensor (formats/tensor_file.h).

#include <ATen/ops/empty.h>

#include <algorithm>

#include "fuzz_input.h"
#include "zeroshard/formats/tensor_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = zs_fuzz::write_input(data, size, "tensors.bin");
  zs_fuzz::expect_clean([&] {
    auto f = zeroshard::open_tensor_file(path);
    for (const auto& t : f->tensors()) {
      const int64_t n = std::min<int64_t>(t.numel(), 16);
      if (n <= 0) continue;
      at::Tensor out = at::empty({n}, at::kFloat);
      f->read(t.name, 0, n, out);
    }
  });
  return 0;
}
