// SPDX-License-Identifier: Apache-2.0
// bench_quantize: the one-pass int8 kernels of quantized collectives (zeroshard/comm/quantize.h)
// against the LibTorch ops they replace (quant::reference), in the same run, on fp32 CPU values.
//
//   build/bin/bench_quantize [--elements N] [--block B] [--reps N] [--threads T]
//
// encode: fp32 values to the encoded bytes (a collective's send side). decode+add: one rank's
// encoded part decoded and added to an fp32 sum (the receive side of a quantized reduce-scatter;
// the reference decodes into a temporary and adds it). GB/s counts the fp32 bytes read (encode) or
// read and written (decode+add) once; ratio = reference time / one-pass time, median of `reps`.

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/randn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "zeroshard/base/cli.h"
#include "zeroshard/comm/quantize.h"

namespace {

double median_seconds(int reps, const std::function<void()>& fn) {
  fn();  // warm-up: pages touched, threads started
  std::vector<double> v;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    v.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  namespace q = zeroshard::quant;
  int64_t elements = 16 << 20, block = 64, reps = 9, threads = 0;
  zeroshard::cli::App app("bench_quantize",
                          "The one-pass int8 encode and decode+add of quantized collectives against the LibTorch "
                          "ops they replace, in the same run.");
  app.add_int("--elements", &elements, "fp32 values per call (default 16777216)", 1);
  app.add_int("--block", &block, "quantization block (default 64)", 8);
  app.add_int("--reps", &reps, "timed calls per case, median kept (default 9)", 1);
  app.add_int("--threads", &threads, "intra-op threads (default: LibTorch's)", 0);
  try {
    if (!app.parse(argc, argv)) return 0;  // --help
    if (threads > 0) at::set_num_threads(static_cast<int>(threads));
    const at::Tensor v = at::randn({elements});
    const int64_t bytes = q::int8_encoded_bytes(elements, block);
    const at::Tensor enc = at::empty({bytes}, at::kByte), enc_ref = at::empty({bytes}, at::kByte);
    const double t_enc = median_seconds(static_cast<int>(reps), [&] { q::encode_int8_into(v, block, enc); });
    const double t_enc_ref =
        median_seconds(static_cast<int>(reps), [&] { q::reference::encode_int8_into(v, block, enc_ref); });
    at::Tensor sum = at::randn({elements});
    const double t_dec = median_seconds(static_cast<int>(reps), [&] { q::decode_int8_add(enc, block, sum); });
    const double t_dec_ref = median_seconds(static_cast<int>(reps), [&] {
      const at::Tensor tmp = at::empty_like(sum);
      q::reference::decode_int8(enc, block, tmp);
      sum.add_(tmp);
    });
    const double gb = static_cast<double>(elements) * 4 / 1e9;
    std::printf("bench_quantize: %lld fp32 values, block %lld, %d intra-op thread(s), median of %lld\n",
                static_cast<long long>(elements), static_cast<long long>(block), at::get_num_threads(),
                static_cast<long long>(reps));
    std::printf("%-12s %12s %12s %12s %12s %8s\n", "op", "one-pass ms", "GB/s", "LibTorch ms", "GB/s", "ratio");
    std::printf("%-12s %12.2f %12.2f %12.2f %12.2f %8.2f\n", "encode", t_enc * 1e3, gb / t_enc, t_enc_ref * 1e3,
                gb / t_enc_ref, t_enc_ref / t_enc);
    std::printf("%-12s %12.2f %12.2f %12.2f %12.2f %8.2f\n", "decode+add", t_dec * 1e3, 2 * gb / t_dec,
                t_dec_ref * 1e3, 2 * gb / t_dec_ref, t_dec_ref / t_dec);
    std::printf("{\"bench\":\"quantize\",\"elements\":%lld,\"block\":%lld,\"encode_ms\":%.3f,\"encode_ref_ms\":%.3f,"
                "\"decode_add_ms\":%.3f,\"decode_add_ref_ms\":%.3f}\n",
                static_cast<long long>(elements), static_cast<long long>(block), t_enc * 1e3, t_enc_ref * 1e3,
                t_dec * 1e3, t_dec_ref * 1e3);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_quantize: %s\n", e.what());
    return 2;
  }
  return 0;
}
