// SPDX-License-Identifier: Apache-2.0
// Block-wise int8 quantization (comm/quantize.h), against its stated bound, computed here from the
// data itself: every decoded value within absmax / 254 of the original, where absmax is the largest
// magnitude in its block of `block` elements (the last block may be partial); a block of zeros and
// each block's largest magnitude exact; encodings of equal-length parts concatenate; a block with
// an infinite or NaN value decodes to NaN throughout and the others are untouched; bf16/fp16 in and
// out; sizes and bad arguments refused by name.

#include <gtest/gtest.h>

#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/full.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "common/error_text.h"
#include "zeroshard/base/error.h"
#include "zeroshard/comm/quantize.h"

namespace q = zeroshard::quant;

namespace {

// Values whose blocks differ in scale by orders of magnitude, a block of zeros, and a tail.
at::Tensor mixed_values(int64_t block, int64_t blocks, int64_t tail) {
  at::manual_seed(5);
  at::Tensor v = at::randn({block * blocks + tail});
  for (int64_t b = 0; b < blocks; ++b) v.narrow(0, b * block, block).mul_(std::pow(10.0, static_cast<double>(b % 7) - 3));
  v.narrow(0, block, block).zero_();  // block 1: zeros
  return v;
}

at::Tensor round_trip(const at::Tensor& v, int64_t block, c10::ScalarType out_dtype = at::kFloat) {
  at::Tensor out = at::empty({v.numel()}, v.options().dtype(out_dtype));
  q::decode_int8(q::encode_int8(v, block), block, out);
  return out;
}

// The largest error over a block, as a multiple of that block's bound absmax / 254 (<= 1 holds the
// bound); NaN where a value came back NaN.
double worst_ratio(const at::Tensor& v, const at::Tensor& back, int64_t block) {
  double worst = 0;
  const at::Tensor a = v.to(at::kDouble), b = back.to(at::kDouble);
  for (int64_t pos = 0; pos < v.numel(); pos += block) {
    const int64_t n = std::min(block, v.numel() - pos);
    const at::Tensor x = a.narrow(0, pos, n), y = b.narrow(0, pos, n);
    if (y.isnan().any().item<bool>()) return std::numeric_limits<double>::quiet_NaN();
    const double absmax = x.abs().max().item<double>();
    const double err = (x - y).abs().max().item<double>();
    if (absmax == 0) {
      if (err != 0) return std::numeric_limits<double>::infinity();
      continue;
    }
    worst = std::max(worst, err / (absmax / 254.0));
  }
  return worst;
}

}  // namespace

TEST(Quantize, EveryValueWithinHalfAScaleOfItsBlock) {
  for (int64_t block : {8, 64, 256}) {
    const at::Tensor v = mixed_values(block, 9, block / 2 + 1);
    const at::Tensor back = round_trip(v, block);
    const double worst = worst_ratio(v, back, block);
    // fp32 arithmetic on top of the rounding: a hair over exactly half a scale.
    EXPECT_LE(worst, 1.0 + 1e-5) << "block " << block;
    EXPECT_GT(worst, 0.5) << "block " << block << ": the rounding error should come near its bound on random data";
    // The zero block is exact, and so is each block's largest magnitude.
    EXPECT_TRUE(back.narrow(0, block, block).eq(0).all().item<bool>());
    const int64_t i = v.narrow(0, 0, block).abs().argmax().item<int64_t>();
    EXPECT_EQ(back[i].item<float>(), v[i].item<float>());
  }
}

TEST(Quantize, EncodedSizeAndConcatenation) {
  constexpr int64_t block = 32;
  EXPECT_EQ(q::int8_encoded_bytes(0, block), 0);
  EXPECT_EQ(q::int8_encoded_bytes(1, block), 4 + block);
  EXPECT_EQ(q::int8_encoded_bytes(64, block), 2 * (4 + block));
  EXPECT_EQ(q::int8_encoded_bytes(65, block), 3 * (4 + block));
  // Each rank's part encoded on its own and the encodings concatenated (what an all-gather of them
  // holds) decode part by part to the parts' round trips.
  const at::Tensor v = mixed_values(block, 6, 0);
  const int64_t part = 3 * block;
  const at::Tensor e0 = q::encode_int8(v.narrow(0, 0, part), block), e1 = q::encode_int8(v.narrow(0, part, part), block);
  const at::Tensor all = at::cat({e0, e1});
  at::Tensor out = at::empty({2 * part});
  q::decode_int8(all.narrow(0, 0, e0.numel()), block, out.narrow(0, 0, part));
  q::decode_int8(all.narrow(0, e0.numel(), e1.numel()), block, out.narrow(0, part, part));
  EXPECT_TRUE(at::equal(out, round_trip(v, block)));
}

TEST(Quantize, NonFiniteValuesPoisonOnlyTheirBlock) {
  constexpr int64_t block = 16;
  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    at::Tensor v = mixed_values(block, 4, 0);
    v[2 * block + 3] = bad;
    const at::Tensor back = round_trip(v, block);
    EXPECT_TRUE(back.narrow(0, 2 * block, block).isnan().all().item<bool>()) << bad;
    const at::Tensor others = at::cat({back.narrow(0, 0, 2 * block), back.narrow(0, 3 * block, block)});
    EXPECT_FALSE(others.isnan().any().item<bool>()) << bad;
  }
}

TEST(Quantize, HalfPrecisionInAndOut) {
  constexpr int64_t block = 64;
  const at::Tensor v = mixed_values(block, 5, 7);
  for (c10::ScalarType t : {at::kBFloat16, at::kHalf}) {
    const at::Tensor low = v.to(t);
    // Encoding a low-precision tensor quantizes its values; decoding into one rounds the result.
    const at::Tensor back = round_trip(low, block);
    EXPECT_LE(worst_ratio(low.to(at::kFloat), back, block), 1.0 + 1e-5) << c10::toString(t);
    const at::Tensor back_low = round_trip(v, block, t);
    EXPECT_TRUE(at::equal(back_low, round_trip(v, block).to(t))) << c10::toString(t);
  }
}

// fp32 on the CPU takes the one-pass kernels; their bytes and decoded values must be the LibTorch
// reference's, bit for bit: random blocks of every scale, zeros, ties of the rounding (values at
// k + 0.5 scales), infinities and NaN, partial last blocks, and several blocks per task.
TEST(Quantize, OnePassKernelsMatchTheLibTorchReferenceBitForBit) {
  struct Restore {
    ~Restore() { q::detail::use_portable_kernels(false); }
  } restore;
  for (bool portable : {false, true}) {
    SCOPED_TRACE(portable ? "portable kernels" : "AVX2 kernels where the CPU has them");
    q::detail::use_portable_kernels(portable);
    for (int64_t block : {8, 12, 64, 256, 4096}) {
      for (int64_t tail : {int64_t{0}, int64_t{1}, block / 2 + 3}) {
        at::Tensor v = mixed_values(block, 40, tail);
        // Ties: block 2 holds 127 at its largest and k + 0.5 elsewhere, so y = v / scale lands on halves.
        at::Tensor ties = v.narrow(0, 2 * block, block);
        ties.copy_(at::arange(block, at::kFloat).sub_(block / 2).add_(0.5).clamp_(-126.5, 126.5));
        ties[0] = 127.0f;
        v[5 * block + 1] = std::numeric_limits<float>::infinity();
        v[7 * block + 2] = -std::numeric_limits<float>::infinity();
        v[9 * block] = std::numeric_limits<float>::quiet_NaN();
        const int64_t bytes = q::int8_encoded_bytes(v.numel(), block);
        const at::Tensor fast = q::encode_int8(v, block), ref = at::empty({bytes}, at::kByte);
        q::reference::encode_int8_into(v, block, ref);
        ASSERT_TRUE(at::equal(fast, ref)) << "block " << block << ", tail " << tail;
        at::Tensor back = at::empty({v.numel()}), back_ref = at::empty({v.numel()});
        q::decode_int8(fast, block, back);
        q::reference::decode_int8(ref, block, back_ref);
        // NaN-safe: equal bits, NaN included.
        EXPECT_TRUE(at::equal(back.view(at::kInt), back_ref.view(at::kInt))) << "block " << block << ", tail " << tail;
        EXPECT_TRUE(back.narrow(0, 5 * block, block).isnan().all().item<bool>());

        // decode_int8_add: out + decoded, rounded once, as add_ does.
        const at::Tensor base = at::randn({v.numel()});
        at::Tensor sum = base.clone();
        q::decode_int8_add(fast, block, sum);
        const at::Tensor expected = base.add(back_ref);
        EXPECT_TRUE(at::equal(sum.view(at::kInt), expected.view(at::kInt))) << "block " << block << ", tail " << tail;
      }
    }
  }
  // bf16 in (encode) and out (decode): the same bytes as the reference, and decoded values equal
  // bit for bit or NaN in both (LibTorch's own conversions give NaN payloads that depend on where
  // in a tensor the value lies).
  for (bool portable : {false, true}) {
    SCOPED_TRACE(portable ? "portable kernels, bf16" : "AVX2 kernels where the CPU has them, bf16");
    q::detail::use_portable_kernels(portable);
    for (int64_t block : {8, 64, 1000}) {
      at::Tensor v = mixed_values(block, 20, block / 2 + 5);
      v[3 * block + 1] = std::numeric_limits<float>::infinity();
      v[6 * block] = std::numeric_limits<float>::quiet_NaN();
      const at::Tensor low = v.to(at::kBFloat16);
      const int64_t bytes = q::int8_encoded_bytes(v.numel(), block);
      const at::Tensor fast = q::encode_int8(low, block), ref = at::empty({bytes}, at::kByte);
      q::reference::encode_int8_into(low, block, ref);
      ASSERT_TRUE(at::equal(fast, ref)) << "block " << block;
      at::Tensor back = at::empty({v.numel()}, at::kBFloat16), back_ref = at::empty({v.numel()}, at::kBFloat16);
      q::decode_int8(fast, block, back);
      q::reference::decode_int8(ref, block, back_ref);
      const at::Tensor same_bits = back.view(at::kShort).eq(back_ref.view(at::kShort));
      const at::Tensor both_nan = back.isnan().logical_and(back_ref.isnan());
      EXPECT_TRUE(same_bits.logical_or(both_nan).all().item<bool>()) << "block " << block;
      EXPECT_TRUE(back.narrow(0, 3 * block, block).isnan().all().item<bool>());
      EXPECT_GE(same_bits.sum().item<int64_t>(), v.numel() - 2 * block) << "only the poisoned blocks may differ";
    }
  }
  // Rounding ties of the narrowing to bf16: scales whose low 16 bits are exactly half a bf16 step
  // (0x8000), with an even and an odd bf16 below them, and their neighbours, times q of 1, -1, 2
  // (exact) and others, encoded by hand.
  {
    const uint32_t scale_bits[] = {0x3F808000u, 0x3F818000u, 0x3F807FFFu, 0x3F808001u, 0x42AA8000u, 0x42AB8000u};
    const int8_t qs[8] = {1, -1, 2, 0, 127, -127, 3, -2};
    constexpr int64_t block = 8, nb = 6;
    at::Tensor enc = at::empty({nb * (4 + block)}, at::kByte);
    std::memcpy(enc.data_ptr<uint8_t>(), scale_bits, sizeof(scale_bits));
    for (int64_t b = 0; b < nb; ++b) std::memcpy(enc.data_ptr<uint8_t>() + nb * 4 + b * block, qs, block);
    for (bool portable : {false, true}) {
      q::detail::use_portable_kernels(portable);
      at::Tensor back = at::empty({nb * block}, at::kBFloat16), back_ref = at::empty({nb * block}, at::kBFloat16);
      q::decode_int8(enc, block, back);
      q::reference::decode_int8(enc, block, back_ref);
      EXPECT_TRUE(at::equal(back.view(at::kShort), back_ref.view(at::kShort))) << (portable ? "portable" : "AVX2");
    }
    q::detail::use_portable_kernels(false);
  }

  // Into a part of a larger buffer (a send buffer), leaving the rest alone.
  const at::Tensor v = mixed_values(64, 3, 5);
  const int64_t bytes = q::int8_encoded_bytes(v.numel(), 64);
  at::Tensor buffer = at::full({bytes + 20}, 7, at::kByte);
  q::encode_int8_into(v, 64, buffer.narrow(0, 10, bytes));
  EXPECT_TRUE(at::equal(buffer.narrow(0, 10, bytes), q::encode_int8(v, 64)));
  EXPECT_TRUE(buffer.narrow(0, 0, 10).eq(7).all().item<bool>());
  EXPECT_TRUE(buffer.narrow(0, 10 + bytes, 10).eq(7).all().item<bool>());
  EXPECT_NE(zeroshard::test::error_text_of<zeroshard::UsageError>(
                [&] { q::encode_int8_into(v, 64, buffer.narrow(0, 0, bytes - 1)); })
                .find("encode_int8_into: the output must be a contiguous uint8 tensor of " + std::to_string(bytes)),
            std::string::npos);
  EXPECT_NE(zeroshard::test::error_text_of<zeroshard::UsageError>(
                [&] { q::decode_int8_add(q::encode_int8(v, 64), 64, at::empty({v.numel()}, at::kDouble)); })
                .find("decode_int8_add: the output must be fp32, got Double"),
            std::string::npos);
}

TEST(Quantize, BadArgumentsAreRefusedByName) {
  EXPECT_NE(zeroshard::test::error_text_of<zeroshard::UsageError>([] { q::int8_encoded_bytes(10, 6); })
                .find("int8 quantization block of 6 elements: a block is a multiple of 4 in [8, 65536]"),
            std::string::npos);
  const at::Tensor enc = q::encode_int8(at::zeros({40}), 8);
  at::Tensor out = at::empty({41});
  EXPECT_NE(zeroshard::test::error_text_of<zeroshard::UsageError>([&] { q::decode_int8(enc, 8, out); })
                .find("decode_int8: 60 encoded bytes for 41 elements in blocks of 8 (expected 72)"),
            std::string::npos);
  EXPECT_NE(zeroshard::test::error_text_of<zeroshard::UsageError>([] { q::encode_int8(at::zeros({4, 4}), 8); })
                .find("encode_int8: the values must be a contiguous 1-D floating tensor"),
            std::string::npos);
  EXPECT_NE(zeroshard::test::error_text_of<zeroshard::UsageError>([] { q::encode_int8(at::zeros({40}, at::kInt), 8); })
                .find("encode_int8: the values must be a contiguous 1-D floating tensor, got [40] Int"),
            std::string::npos);
  // Every other element of 80: 40 elements, not contiguous; and an integer output.
  const at::Tensor strided = at::empty({80}).slice(0, 0, 80, 2);
  EXPECT_NE(zeroshard::test::error_text_of<zeroshard::UsageError>([&] { q::decode_int8(enc, 8, strided); })
                .find("decode_int8: the output must be a contiguous floating tensor"),
            std::string::npos);
  EXPECT_NE(zeroshard::test::error_text_of<zeroshard::UsageError>(
                [&] { q::decode_int8(enc, 8, at::empty({40}, at::kLong)); })
                .find("decode_int8: the output must be a contiguous floating tensor"),
            std::string::npos);
  EXPECT_NE(zeroshard::test::error_text_of<zeroshard::UsageError>([] { q::int8_encoded_bytes(-1, 8); })
                .find("int8 quantization of -1 elements"),
            std::string::npos);
}
