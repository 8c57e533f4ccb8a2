// SPDX-License-Identifier: Apache-2.0
#pragma once
// Block-wise int8 quantization of the values a collective moves (quantized parameter
// all-gathers: sharding.gather_quantization). Each block of `block` consecutive elements keeps one
// fp32 scale, absmax / 127, and its values rounded to the nearest multiple of the scale as int8 in
// [-127, 127]. A decoded value differs from the original by at most half a scale, absmax / 254 of
// its block: a block of zeros stays exact, and so does the block's largest magnitude. A block
// with an infinite or NaN value decodes to NaN throughout (the loss then shows it). The encoded
// form is one uint8 tensor: the blocks' scales (4 bytes each, native byte order), then their
// values; encoded forms of equal-length inputs concatenate, so an all-gather of them is the
// encoded form of each rank's part side by side.
//
//   at::Tensor packed = zeroshard::quant::encode_int8(shard, 256);       // on the shard's device
//   ... all-gather `packed` from every rank into `all` ...
//   zeroshard::quant::decode_int8(all.narrow(0, r * packed.numel(), packed.numel()), 256, out_r);
// Thread-safe (pure functions of their arguments).

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace zeroshard::quant {

// Bytes of the encoded form of `numel` elements (the last block padded with zeros). UsageError for
// a block that is not a multiple of 4 in [8, 65536].
int64_t int8_encoded_bytes(int64_t numel, int64_t block);
// `values`: contiguous, 1-D, any floating dtype. Returns uint8 [int8_encoded_bytes(numel, block)].
at::Tensor encode_int8(const at::Tensor& values, int64_t block);
// The same, written into `out` (contiguous uint8 of int8_encoded_bytes(numel, block), e.g. a part
// of a send buffer) instead of a new tensor.
void encode_int8_into(const at::Tensor& values, int64_t block, const at::Tensor& out);
// Decodes `encoded` (as encode_int8 made it for out.numel() elements) into `out` (contiguous,
// any floating dtype, on the same device).
void decode_int8(const at::Tensor& encoded, int64_t block, const at::Tensor& out);
// Adds the decoded values to `out` (contiguous fp32): out[i] + decoded[i], rounded once, as
// out.add_(decoded) does.
void decode_int8_add(const at::Tensor& encoded, int64_t block, const at::Tensor& out);

// fp32 and bf16 values on the CPU take one pass per block (the functions above); fp16 and CUDA
// tensors take LibTorch ops. These are the LibTorch ops for any input, the reference the one-pass
// code is tested against (bit for bit; a NaN decoded into bf16 may differ in its payload).
namespace reference {
void encode_int8_into(const at::Tensor& values, int64_t block, const at::Tensor& out);
void decode_int8(const at::Tensor& encoded, int64_t block, const at::Tensor& out);
}  // namespace reference

namespace detail {
// For tests: the portable one-pass kernels even where the CPU has AVX2 (false: back to AVX2).
void use_portable_kernels(bool yes);
}  // namespace detail

}  // namespace zeroshard::quant
