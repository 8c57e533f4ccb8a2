// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/adapt/nf4.h"

#include <torch/nn/modules/linear.h>

#include "zeroshard/adapt/lora.h"
#include "zeroshard/base/cpu_features.h"

#include <ATen/Parallel.h>
#include <ATen/ops/bucketize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/where.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

#include "nf4_kernels.h"
#include "zeroshard/base/error.h"

namespace zeroshard::nf4 {

static_assert(kBlock == detail::kKernelBlock);

const std::array<float, 16>& codebook() {
  // NormalFloat4 (Dettmers et al., QLoRA, 2023, appendix E).
  static const std::array<float, 16> values = {
      -1.0f,
      -0.6961928009986877f,
      -0.5250730514526367f,
      -0.39491748809814453f,
      -0.28444138169288635f,
      -0.18477343022823334f,
      -0.09105003625154495f,
      0.0f,
      0.07958029955625534f,
      0.16093020141124725f,
      0.24611230194568634f,
      0.33791524171829224f,
      0.44070982933044434f,
      0.5626170039176941f,
      0.7229568362236023f,
      1.0f};
  return values;
}

int64_t packed_bytes(int64_t n) { return n / 2 + n / kBlock * 4; }

namespace {

at::Tensor host_floats(const float* data, int64_t n) {
  at::Tensor t = at::empty({n}, at::TensorOptions().dtype(at::kFloat));
  std::memcpy(t.data_ptr<float>(), data, static_cast<size_t>(n) * sizeof(float));
  return t;
}

// The codebook (kind 0) and the midpoints between its values (kind 1) on `device`: made once per
// device, so a GPU's dequantisation does not copy 64 bytes from pageable memory every time.
const at::Tensor& table(int kind, c10::Device device) {
  static std::mutex mutex;
  static std::map<std::pair<int, std::string>, at::Tensor> tables;
  std::lock_guard<std::mutex> lock(mutex);
  at::Tensor& t = tables[{kind, device.str()}];
  if (!t.defined()) {
    const std::array<float, 16>& cb = codebook();
    std::array<float, 15> mids;
    for (size_t i = 0; i < mids.size(); ++i) mids[i] = (cb[i] + cb[i + 1]) / 2;
    t = kind == 0 ? host_floats(cb.data(), 16) : host_floats(mids.data(), 15);
    if (!device.is_cpu()) t = t.to(device);
  }
  return t;
}

void check_packed(const at::Tensor& packed, const at::Tensor& out) {
  const int64_t n = out.numel();
  ZS_CHECK(out.dim() == 1 && out.is_contiguous() && n % kBlock == 0, "nf4: output of ", n,
           " elements must be 1-D, contiguous, a multiple of ", kBlock);
  ZS_CHECK(packed.dim() == 1 && packed.is_contiguous() && packed.scalar_type() == at::kByte &&
               packed.numel() == packed_bytes(n) && packed.device() == out.device(),
           "nf4: packed tensor of ", packed.numel(), " bytes for ", n, " elements (want ", packed_bytes(n),
           " bytes of uint8 on ", out.device().str(), ")");
  const at::ScalarType t = out.scalar_type();
  ZS_CHECK(t == at::kFloat || t == at::kBFloat16 || t == at::kHalf, "nf4: cannot dequantise into ",
           c10::toString(t));
}

template <typename T>
void dequantize_scalar(const uint8_t* codes, const uint8_t* maxima, int64_t begin, int64_t end, T* out) {
  const std::array<float, 16>& cb = codebook();
  for (int64_t b = begin; b < end; ++b) {
    float scale;
    std::memcpy(&scale, maxima + 4 * b, 4);
    const uint8_t* c = codes + b * (kBlock / 2);
    T* o = out + b * kBlock;
    for (int64_t i = 0; i < kBlock / 2; ++i) {
      o[2 * i] = static_cast<T>(cb[c[i] & 15] * scale);
      o[2 * i + 1] = static_cast<T>(cb[c[i] >> 4] * scale);
    }
  }
}

void dequantize_cpu(bool simd, const at::Tensor& packed, const at::Tensor& out) {
  const int64_t n = out.numel();
  const uint8_t* codes = packed.data_ptr<uint8_t>();
  const uint8_t* maxima = codes + n / 2;
  const at::ScalarType t = out.scalar_type();
  void* dst = out.data_ptr();
  at::parallel_for(0, n / kBlock, 512, [&](int64_t begin, int64_t end) {
    if (simd) {
      const detail::OutKind kind = t == at::kFloat      ? detail::OutKind::kFloat
                                   : t == at::kBFloat16 ? detail::OutKind::kBFloat16
                                                        : detail::OutKind::kHalf;
      detail::dequantize_avx2(codebook().data(), codes, maxima, begin, end, dst, kind);
    } else if (t == at::kFloat) {
      dequantize_scalar(codes, maxima, begin, end, static_cast<float*>(dst));
    } else if (t == at::kBFloat16) {
      dequantize_scalar(codes, maxima, begin, end, static_cast<c10::BFloat16*>(dst));
    } else {
      dequantize_scalar(codes, maxima, begin, end, static_cast<c10::Half*>(dst));
    }
  });
}

// Elements per step of the ATen paths: their temporaries (an int64 index per element) stay a
// few MiB whatever the shard's size.
constexpr int64_t kChunk = int64_t{1} << 20;

// What runs on a GPU: the same products in fp32, one rounding in the copy to `out`.
void dequantize_aten(const at::Tensor& packed, const at::Tensor& out) {
  const int64_t n = out.numel();
  const at::Tensor maxima = packed.narrow(0, n / 2, n / kBlock * 4).view(at::kFloat);
  const at::Tensor& cb = table(0, out.device());
  for (int64_t at = 0; at < n; at += kChunk) {
    const int64_t len = std::min(kChunk, n - at);
    const at::Tensor codes = packed.narrow(0, at / 2, len / 2);
    const at::Tensor idx =
        at::stack({codes.bitwise_and(15), codes.__rshift__(4)}, 1).reshape({-1}).to(at::kLong);
    const at::Tensor values =
        cb.index_select(0, idx).view({-1, kBlock}).mul(maxima.narrow(0, at / kBlock, len / kBlock).unsqueeze(1));
    out.narrow(0, at, len).copy_(values.view({-1}));
  }
}

}  // namespace

at::Tensor quantize(const at::Tensor& values, const std::string& what) {
  const int64_t n = values.numel();
  ZS_CHECK(values.dim() == 1 && values.scalar_type() == at::kFloat && n % kBlock == 0, "nf4: quantising ", what,
           ": want a 1-D fp32 tensor of a multiple of ", kBlock, " elements");
  ZS_REQUIRE(at::isfinite(values).all().item<bool>(), UsageError, "NF4 quantisation of ", what,
             ": a value is not finite (nan or inf); the weights must be finite to be stored in 4 bits");
  // Nearest codebook value: below the midpoint between two neighbours goes to the lower one (a
  // value exactly on it too).
  const at::Tensor& bounds = table(1, values.device());
  at::Tensor packed = at::empty({packed_bytes(n)}, values.options().dtype(at::kByte));
  at::Tensor maxima = packed.narrow(0, n / 2, n / kBlock * 4).view(at::kFloat);
  for (int64_t at = 0; at < n; at += kChunk) {
    const int64_t len = std::min(kChunk, n - at);
    const at::Tensor blocks = values.narrow(0, at, len).reshape({-1, kBlock});
    at::Tensor m = maxima.narrow(0, at / kBlock, len / kBlock);
    m.copy_(blocks.abs().amax(1));
    const at::Tensor divisor = at::where(m.gt(0), m, at::ones_like(m)).unsqueeze(1);
    const at::Tensor codes = at::bucketize(blocks.div(divisor), bounds, /*out_int32=*/true).reshape({-1, 2});
    packed.narrow(0, at / 2, len / 2).copy_(codes.select(1, 0).add(codes.select(1, 1).mul(16)));
  }
  return packed;
}

void dequantize(const at::Tensor& packed, const at::Tensor& out) {
  detail::dequantize_with(!out.is_cpu()              ? detail::Path::kAten
                          : detail::avx2_available() ? detail::Path::kAvx2
                                                     : detail::Path::kScalar,
                          packed, out);
}

namespace detail {

bool avx2_available() {
  static const bool yes = __builtin_cpu_supports("avx2") && cpu_has_f16c();
  return yes;
}

void dequantize_with(Path path, const at::Tensor& packed, const at::Tensor& out) {
  check_packed(packed, out);
  if (path == Path::kAten) return dequantize_aten(packed, out);
  ZS_CHECK(out.is_cpu(), "nf4: the ", path == Path::kAvx2 ? "AVX2" : "scalar", " path runs on CPU tensors only");
  ZS_CHECK(path != Path::kAvx2 || avx2_available(), "nf4: this CPU has no AVX2");
  dequantize_cpu(path == Path::kAvx2, packed, out);
}

}  // namespace detail

namespace {

class Nf4Codec final : public ShardCodec {
 public:
  const char* name() const override { return "nf4"; }
  int64_t alignment() const override { return kBlock; }
  int64_t encoded_bytes(int64_t numel) const override { return packed_bytes(numel); }
  at::Tensor encode(const at::Tensor& values, const std::string& what) const override { return quantize(values, what); }
  void decode(const at::Tensor& encoded, const at::Tensor& out) const override { dequantize(encoded, out); }
};

class FrozenLinearHook final : public UnitHook {
 public:
  std::shared_ptr<const ShardCodec> codec_for(const torch::nn::Module& owner, const std::string& key) const override {
    const bool linear = dynamic_cast<const torch::nn::LinearImpl*>(&owner) != nullptr ||
                        dynamic_cast<const lora::LinearImpl*>(&owner) != nullptr;
    return linear && key == "weight" ? codec() : nullptr;
  }
};

}  // namespace

std::shared_ptr<const ShardCodec> codec() {
  static const auto c = std::make_shared<const Nf4Codec>();
  return c;
}

std::shared_ptr<const UnitHook> frozen_linear_hook() { return std::make_shared<const FrozenLinearHook>(); }

}  // namespace zeroshard::nf4
