// SPDX-License-Identifier: Apache-2.0
#pragma once
// The steps every tensor file reader (tensor_file.h: safetensors, torch zip, model directories)
// takes the same way: the open that names the file, scratch bytes, the dtype conversion from stored
// bytes into the caller's tensor, and the checks of read()'s arguments (the reads themselves:
// source_file.h).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "zeroshard/formats/tensor_file.h"

namespace zeroshard::detail {

// Opens `path` for reading; IoError naming it.
int open_for_read(const std::string& path);

// Scratch bytes for a read (converting or gathering), from LibTorch's CPU allocator so memory
// accounting (core/host_memory.h) sees them like every other tensor.
at::Tensor scratch(int64_t bytes);

// Whether stored `from` can be read into a tensor of `to` (the same dtype, or both among float32,
// bfloat16, float16, float64).
bool convertible(c10::ScalarType from, c10::ScalarType to);
// `count` elements of dtype `from` at `src` into `dst` (contiguous CPU, `count` elements), converted
// as Tensor::to does.
void convert_into(const void* src, c10::ScalarType from, int64_t count, const at::Tensor& dst);
// The tensor `name` of `file`; UsageError naming it and the file when there is none.
const TensorInfo& find_tensor(const TensorFile& file, const std::string& name);
// Checks a read() call's arguments (of a known tensor): a range inside it, and a dst that fits.
// `numel`/`dtype`: the stored tensor's.
void check_read(const std::string& path, const std::string& name, int64_t numel, c10::ScalarType dtype,
                int64_t begin, int64_t count, const at::Tensor& dst);

}  // namespace zeroshard::detail
