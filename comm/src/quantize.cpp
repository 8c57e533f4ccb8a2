// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/comm/quantize.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/amax.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full_like.h>
#include <ATen/ops/nan_to_num.h>
#include <ATen/ops/reciprocal.h>
#include <ATen/ops/round.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/GradMode.h>

#include <cmath>

#include "zeroshard/base/error.h"

namespace zeroshard::quant {
namespace {

void check_block(int64_t block) {
  ZS_REQUIRE(block >= 8 && block <= 65536 && block % 4 == 0, UsageError, "int8 quantization block of ", block,
             " elements: a block is a multiple of 4 in [8, 65536]");
}

int64_t blocks_of(int64_t numel, int64_t block) { return (numel + block - 1) / block; }

}  // namespace

int64_t int8_encoded_bytes(int64_t numel, int64_t block) {
  check_block(block);
  ZS_REQUIRE(numel >= 0, UsageError, "int8 quantization of ", numel, " elements");
  return blocks_of(numel, block) * (4 + block);
}

at::Tensor encode_int8(const at::Tensor& values, int64_t block) {
  const int64_t n = values.numel();
  const int64_t bytes = int8_encoded_bytes(n, block);
  ZS_REQUIRE(values.dim() == 1 && values.is_contiguous() && at::isFloatingType(values.scalar_type()), UsageError,
             "encode_int8: the values must be a contiguous 1-D floating tensor, got ", values.sizes(), " ",
             c10::toString(values.scalar_type()));
  c10::AutoGradMode no_grad(false);
  at::Tensor out = at::empty({bytes}, values.options().dtype(at::kByte));
  if (n == 0) return out;
  const int64_t nb = blocks_of(n, block);
  at::Tensor x = values.to(at::kFloat);
  if (nb * block != n) x = at::constant_pad_nd(x, {0, nb * block - n}, 0);
  x = x.view({nb, block});
  const at::Tensor scale = at::amax(at::abs(x), {1}).div_(127.0f);
  // 1 / scale where the scale is positive; an all-zero block keeps zeros (and a NaN scale NaN).
  const at::Tensor inv = at::where(scale > 0, at::reciprocal(scale), at::zeros_like(scale));
  // Non-finite values (their block decodes to NaN from its scale) are 0 here, so that every value
  // converted to int8 is in range.
  const at::Tensor q = at::round(at::nan_to_num(x, 0, 0, 0) * inv.unsqueeze(1)).clamp_(-127, 127).to(at::kChar);
  out.narrow(0, 0, nb * 4).copy_(scale.view(at::kByte));
  out.narrow(0, nb * 4, nb * block).copy_(q.view(at::kByte).view({-1}));
  return out;
}

void decode_int8(const at::Tensor& encoded, int64_t block, const at::Tensor& out) {
  const int64_t n = out.numel();
  ZS_REQUIRE(encoded.dim() == 1 && encoded.scalar_type() == at::kByte && encoded.numel() == int8_encoded_bytes(n, block),
             UsageError, "decode_int8: ", encoded.numel(), " encoded bytes for ", n, " elements in blocks of ", block,
             " (expected ", int8_encoded_bytes(n, block), ")");
  ZS_REQUIRE(out.is_contiguous() && at::isFloatingType(out.scalar_type()), UsageError,
             "decode_int8: the output must be a contiguous floating tensor");
  if (n == 0) return;
  c10::AutoGradMode no_grad(false);
  const int64_t nb = blocks_of(n, block);
  // The scales are copied out so that their view as fp32 starts aligned wherever `encoded` lies.
  const at::Tensor scale = encoded.narrow(0, 0, nb * 4).clone().view(at::kFloat);
  const at::Tensor q = encoded.narrow(0, nb * 4, nb * block).view(at::kChar).view({nb, block});
  // A block whose scale is not finite decodes to NaN: 0 x inf would give NaN for some of its values
  // and 0 for its zeros, hiding how much of it was lost.
  const at::Tensor finite = scale.isfinite();
  at::Tensor v = q.to(at::kFloat).mul_(at::where(finite, scale, at::full_like(scale, NAN)).unsqueeze(1));
  out.view({-1}).copy_(v.view({-1}).narrow(0, 0, n));
}

}  // namespace zeroshard::quant
