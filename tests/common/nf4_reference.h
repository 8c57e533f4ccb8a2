// SPDX-License-Identifier: Apache-2.0
#pragma once
// A reference NF4 quantiser for tests, written from the QLoRA paper's definition and independent
// of the engine's (adapt/src/nf4.cpp): blocks of 64 consecutive elements, each divided by the
// block's absolute maximum and rounded to the nearest of the 16 NormalFloat values (distances
// measured in double, the lower value on a tie), a block of zeros keeping maximum 0.

#include <torch/torch.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

namespace zs_test {

// The NormalFloat4 values (QLoRA, appendix E), as the paper lists them.
inline const std::array<float, 16>& nf4_values() {
  static const std::array<float, 16> v = {-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
                                          -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
                                          0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f,
                                          0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,
                                          0.7229568362236023f, 1.0f};
  return v;
}

struct Nf4Reference {
  std::vector<int> codes;     // one per element
  std::vector<float> maxima;  // one per block of 64
};

// `flat`: fp32, 1-D, a multiple of 64 elements.
inline Nf4Reference nf4_reference_quantize(const at::Tensor& flat) {
  const at::Tensor x = flat.contiguous();
  const float* p = x.data_ptr<float>();
  const int64_t n = x.numel();
  Nf4Reference r;
  r.codes.resize(n);
  for (int64_t b = 0; b < n / 64; ++b) {
    float m = 0;
    for (int64_t i = 0; i < 64; ++i) m = std::max(m, std::fabs(p[b * 64 + i]));
    r.maxima.push_back(m);
    for (int64_t i = 0; i < 64; ++i) {
      const float v = m > 0 ? p[b * 64 + i] / m : 0.0f;
      int best = 0;
      for (int k = 1; k < 16; ++k) {
        if (std::fabs(double(v) - nf4_values()[k]) < std::fabs(double(v) - nf4_values()[best])) best = k;
      }
      r.codes[b * 64 + i] = best;
    }
  }
  return r;
}

inline at::Tensor nf4_reference_dequantize(const Nf4Reference& r) {
  at::Tensor out = at::empty({static_cast<int64_t>(r.codes.size())}, at::kFloat);
  float* o = out.data_ptr<float>();
  for (size_t i = 0; i < r.codes.size(); ++i) o[i] = nf4_values()[r.codes[i]] * r.maxima[i / 64];
  return out;
}

// What a tensor becomes stored in NF4 as the engine stores a parameter: flattened, zero-padded to
// whole blocks, quantised, dequantised, and cut back to its shape.
inline at::Tensor nf4_reference_roundtrip(const at::Tensor& w) {
  const int64_t n = w.numel(), padded = (n + 63) / 64 * 64;
  at::Tensor flat = at::zeros({padded}, at::kFloat);
  flat.narrow(0, 0, n).copy_(w.detach().reshape({-1}));
  return nf4_reference_dequantize(nf4_reference_quantize(flat)).narrow(0, 0, n).view(w.sizes()).clone();
}

}  // namespace zs_test
