// SPDX-License-Identifier: Apache-2.0
#pragma once
// NF4: 4-bit NormalFloat storage for frozen weights (the QLoRA paper's data type). Values are
// quantised in blocks of 64: each block keeps its absolute maximum (fp32) and, per element, the
// index of the nearest of 16 fixed values in [-1, 1] (the quantiles of a standard normal,
// normalised, with an exact 0) after division by that maximum. A block costs 32 bytes of codes
// plus 4 of scale: 4.5 bits per weight, 0.14 of fp32.
//
// Packed layout of n elements (n a multiple of 64): n/2 code bytes (element 2i in the low nibble
// of byte i, element 2i+1 in the high nibble), then n/64 fp32 block maxima (native byte order).
// A block of zeros keeps maximum 0 and code 7 (the value 0). Dequantising gives codebook[c] * max
// in fp32, rounded once to the output dtype; every path (scalar, AVX2, ATen ops on any device)
// gives the same bits. Quantising what dequantising gave reproduces the codes and maxima.

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "zeroshard/engine/unit_hook.h"

namespace zeroshard::nf4 {

constexpr int64_t kBlock = 64;

// The 16 values, ascending (index 7 is 0, 0 and 15 are -1 and 1).
const std::array<float, 16>& codebook();

// Bytes of the packed form of n elements (n a multiple of kBlock).
int64_t packed_bytes(int64_t n);

// Quantises the fp32 1-D `values` (numel a multiple of kBlock, any device) into a new packed uint8
// tensor on the same device. UsageError naming `what` when a value is not finite.
at::Tensor quantize(const at::Tensor& values, const std::string& what);

// Dequantises `packed` (numel packed_bytes(out.numel())) into `out` (1-D contiguous, fp32, bf16
// or fp16, on packed's device). CPU: AVX2 where the processor has it, else scalar; other
// devices: ATen operations.
void dequantize(const at::Tensor& packed, const at::Tensor& out);

// The codec the engine stores NF4 shards with (ShardCodec over quantize/dequantize above).
std::shared_ptr<const ShardCodec> codec();

// The unit hook that stores the "weight" of every frozen torch::nn::Linear and
// zeroshard::lora::Linear (not tied to another name) in NF4: precision.frozen_linear = NF4. Put it
// into ShardingOptions::unit_hooks.
std::shared_ptr<const UnitHook> frozen_linear_hook();

namespace detail {
enum class Path { kScalar, kAvx2, kAten };
bool avx2_available();
// One path by name, for tests (kScalar and kAvx2: CPU tensors; kAvx2 needs avx2_available()).
void dequantize_with(Path path, const at::Tensor& packed, const at::Tensor& out);
}  // namespace detail

}  // namespace zeroshard::nf4
