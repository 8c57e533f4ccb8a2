// SPDX-License-Identifier: Apache-2.0
// NF4 (4-bit NormalFloat) storage: the engine's quantiser against a reference written from the
// paper's definition (tests/common/nf4_reference.h), the three dequantisation paths (scalar,
// AVX2, ATen operations as a GPU runs them) bit for bit, the round trip, and the errors.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstring>

#include "common/nf4_reference.h"
#include "common/test_util.h"
#include "zeroshard/base/error.h"
#include "zeroshard/adapt/nf4.h"

namespace zs = zeroshard;
namespace nf4 = zeroshard::nf4;

namespace {

// Normal values in blocks of 64, and blocks that test the edges: all zero, one outlier, constant,
// negative maximum, tiny values.
at::Tensor test_values() {
  auto g = torch::make_generator<at::CPUGeneratorImpl>(42);
  at::Tensor x = torch::randn({64 * 40}, g);
  x.narrow(0, 64, 64).zero_();
  x.narrow(0, 128, 64).mul_(0.01);
  x[128 + 7] = 50;
  x.narrow(0, 192, 64).fill_(-3.25);
  x[256 + 10] = -9;
  x.narrow(0, 320, 64).mul_(1e-30);
  return x;
}

int code_of(const at::Tensor& packed, int64_t i) {
  const uint8_t byte = packed.data_ptr<uint8_t>()[i / 2];
  return i % 2 == 0 ? byte & 15 : byte >> 4;
}

float maximum_of(const at::Tensor& packed, int64_t n, int64_t block) {
  float m;
  std::memcpy(&m, packed.data_ptr<uint8_t>() + n / 2 + 4 * block, 4);
  return m;
}

TEST(Nf4, CodebookIsThePapers) {
  for (int k = 0; k < 16; ++k) EXPECT_EQ(nf4::codebook()[k], zs_test::nf4_values()[k]) << k;
  EXPECT_EQ(nf4::packed_bytes(128), 64 + 8);
}

TEST(Nf4, QuantiserMatchesTheReference) {
  const at::Tensor x = test_values();
  const int64_t n = x.numel();
  const at::Tensor packed = nf4::quantize(x, "test values");
  ASSERT_EQ(packed.numel(), n / 2 + n / 64 * 4);
  const zs_test::Nf4Reference ref = zs_test::nf4_reference_quantize(x);
  for (int64_t b = 0; b < n / 64; ++b) ASSERT_EQ(maximum_of(packed, n, b), ref.maxima[b]) << "block " << b;
  int64_t differ = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int got = code_of(packed, i), want = ref.codes[i];
    if (got == want) continue;
    // Only a value on a midpoint (to rounding) may go either way.
    const float m = ref.maxima[i / 64];
    const double v = x[i].item<float>() / m;
    const double dg = std::fabs(v - zs_test::nf4_values()[got]), dw = std::fabs(v - zs_test::nf4_values()[want]);
    EXPECT_LE(std::fabs(dg - dw), 1e-6) << "element " << i << ": code " << got << ", reference " << want;
    ++differ;
  }
  EXPECT_LE(differ, 2) << "codes that differ from the reference";
  // Dequantised: the reference's values exactly, within half the widest codebook gap of the input.
  at::Tensor out = at::empty({n}, at::kFloat);
  nf4::dequantize(packed, out);
  at::Tensor want = zs_test::nf4_reference_dequantize(ref);
  if (differ == 0) EXPECT_EQ(zs::test::max_abs_diff(out, want), 0.0);
  const at::Tensor err = (out - x).abs().view({-1, 64});
  double widest = 0;
  for (int k = 0; k < 15; ++k) widest = std::max(widest, double(zs_test::nf4_values()[k + 1]) - zs_test::nf4_values()[k]);
  const at::Tensor bound = x.abs().view({-1, 64}).amax(1, true) * (widest / 2 + 1e-6);
  EXPECT_TRUE((err <= bound).all().item<bool>()) << "an element is further from its value than half a gap";
  EXPECT_EQ(out.narrow(0, 64, 64).abs().max().item<float>(), 0.0f) << "a zero block stays zero";
  EXPECT_EQ(out[128 + 7].item<float>(), 50.0f) << "the block maximum is exact";
  EXPECT_EQ(out[256 + 10].item<float>(), -9.0f);
  // The relative error of normal data: QLoRA's point is that it is small for normal weights.
  const double rel = ((out - x).norm() / x.norm()).item<double>();
  EXPECT_LT(rel, 0.12) << "relative error " << rel;
  std::printf("  NF4 relative error on %lld normal values: %.4f (codes differing from the reference: %lld)\n",
              static_cast<long long>(n), rel, static_cast<long long>(differ));
}

TEST(Nf4, EveryDequantisationPathGivesTheSameBits) {
  const at::Tensor x = test_values().mul(37.5);
  const at::Tensor packed = nf4::quantize(x, "test values");
  for (at::ScalarType t : {at::kFloat, at::kBFloat16, at::kHalf}) {
    at::Tensor aten = at::empty({x.numel()}, t), scalar = at::empty_like(aten), simd = at::empty_like(aten);
    nf4::detail::dequantize_with(nf4::detail::Path::kAten, packed, aten);
    nf4::detail::dequantize_with(nf4::detail::Path::kScalar, packed, scalar);
    const at::ScalarType bits = t == at::kFloat ? at::kInt : at::kShort;
    EXPECT_TRUE(at::equal(aten.view(bits), scalar.view(bits))) << "scalar vs ATen, " << c10::toString(t);
    if (nf4::detail::avx2_available()) {
      nf4::detail::dequantize_with(nf4::detail::Path::kAvx2, packed, simd);
      EXPECT_TRUE(at::equal(aten.view(bits), simd.view(bits))) << "AVX2 vs ATen, " << c10::toString(t);
    } else {
      std::printf("  this CPU has no AVX2: the AVX2 path was not compared\n");
    }
    // One rounding from the fp32 product: the same as rounding the fp32 result.
    at::Tensor fp32 = at::empty({x.numel()}, at::kFloat);
    nf4::detail::dequantize_with(nf4::detail::Path::kScalar, packed, fp32);
    EXPECT_TRUE(at::equal(fp32.to(t).view(bits), scalar.view(bits))) << c10::toString(t);
  }
}

// More than one step of the ATen paths (2^20 elements per step): every block still right.
TEST(Nf4, ShardsLongerThanOneStepAreWholeAcrossTheSteps) {
  auto g = torch::make_generator<at::CPUGeneratorImpl>(7);
  const at::Tensor x = torch::randn({(int64_t{1} << 20) + 3 * 64}, g);
  const int64_t n = x.numel();
  const at::Tensor packed = nf4::quantize(x, "a long shard");
  const zs_test::Nf4Reference ref = zs_test::nf4_reference_quantize(x);
  int64_t wrong_max = 0, differ = 0;
  for (int64_t b = 0; b < n / 64; ++b) wrong_max += maximum_of(packed, n, b) != ref.maxima[b];
  for (int64_t i = 0; i < n; ++i) differ += code_of(packed, i) != ref.codes[i];
  EXPECT_EQ(wrong_max, 0);
  EXPECT_LE(differ, 2) << "codes that differ from the reference (a value on a midpoint may)";
  at::Tensor aten = at::empty({n}, at::kBFloat16), scalar = at::empty_like(aten);
  nf4::detail::dequantize_with(nf4::detail::Path::kAten, packed, aten);
  nf4::detail::dequantize_with(nf4::detail::Path::kScalar, packed, scalar);
  EXPECT_TRUE(at::equal(aten.view(at::kShort), scalar.view(at::kShort)));
  EXPECT_LE(zs::test::max_abs_diff(scalar.narrow(0, n - 64, 64).to(at::kFloat),
                                   zs_test::nf4_reference_dequantize(ref).narrow(0, n - 64, 64).to(at::kBFloat16).to(at::kFloat)),
            differ == 0 ? 0.0 : 1.0)
      << "the last block, past the first step";
}

TEST(Nf4, QuantisingWhatDequantisingGaveReproducesTheBytes) {
  const at::Tensor packed = nf4::quantize(test_values(), "test values");
  at::Tensor out = at::empty({test_values().numel()}, at::kFloat);
  nf4::dequantize(packed, out);
  EXPECT_TRUE(at::equal(nf4::quantize(out, "dequantised values"), packed));
}

TEST(Nf4, NonFiniteValuesAreAnErrorNamingTheTensor) {
  at::Tensor x = test_values();
  x[300] = std::nan("");
  EXPECT_TRUE(zs::test::contains(zs::test::error_text_of<zs::UsageError>([&] { nf4::quantize(x, "unit 'x'"); }),
                                 "NF4 quantisation of unit 'x': a value is not finite"));
  x[300] = INFINITY;
  EXPECT_TRUE(zs::test::contains(zs::test::error_text_of<zs::UsageError>([&] { nf4::quantize(x, "unit 'x'"); }),
                                 "not finite"));
}

}  // namespace
