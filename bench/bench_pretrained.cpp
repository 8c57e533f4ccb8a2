// SPDX-License-Identifier: Apache-2.0
// bench_pretrained: host memory per rank while a model is built sharded and its pretrained weights
// are loaded (load_pretrained), against the whole model's size and the bound the design promises
// (this rank's shards, the root unit's own parameters and one more unit), measured by the tracking
// allocator (core/host_memory.h), not
// by the engine's own accounting; and how long the load takes against reading the file's bytes.
//
//   mpirun -n 2 build/bin/bench_pretrained [--dim 256] [--layers 12] [--vocab 4096] [--seq 256]
//
// Rank 0 first writes the weights of a plain (unsharded) model as safetensors under $TMPDIR (or the
// build tree), then every rank frees everything and the measured part starts. Final line: JSON.

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "gpt_bench_args.h"
#include "engine/models.h"
#include "zeroshard/core/host_memory.h"
#include "zeroshard/config/main.h"
#include "zeroshard/core/session.h"
#include "zeroshard/formats/tensor_file.h"
#include "zeroshard/engine/engine.h"
#include "zeroshard/checkpoint/pretrained.h"
#include "zeroshard/engine/sharded_init.h"

namespace zs = zeroshard;

namespace {

void write_weights(const zs_test::GptConfig& c, const std::string& path, int64_t* model_bytes) {
  torch::manual_seed(1);
  zs_test::Gpt model(c);
  std::vector<zs::TensorInfo> infos;
  for (const auto& p : model->named_parameters()) {
    if (p.key() == "lm_head_weight") continue;  // tied to wte.weight: stored once
    infos.push_back({p.key(), p.value().scalar_type(), p.value().sizes().vec()});
    *model_bytes += static_cast<int64_t>(p.value().nbytes());
  }
  zs::SafetensorsWriter w(path, infos);
  for (const auto& p : model->named_parameters()) {
    if (p.key() != "lm_head_weight") w.write(p.key(), p.value().detach());
  }
  w.finish();
}

int run(zs::Session& s, const zs::Run&) {
  zs_bench::GptBenchArgs a;
  a.model = zs_test::GptConfig{4096, 256, 4, 12, 256};
  zs::cli::App app("bench_pretrained",
                   "Host memory per rank while a GPT is built sharded and its pretrained weights loaded, against the "
                   "whole model and the bound (this rank's shards plus one unit); the load time against reading the "
                   "file. Final line: JSON.");
  app.usage("mpirun -n N bench_pretrained [OPTIONS]");
  zs_bench::add_gpt_bench_args(app, a, -1);
  app.add_config_options();
  if (!app.parse(s.args(), s.rank() == 0)) return 0;
  const char* tmp = std::getenv("TMPDIR");
  const std::string path = std::string(tmp != nullptr ? tmp : ZS_BENCH_DEFAULT_DIR) + "/bench_pretrained." +
                           std::to_string(::getppid()) + ".safetensors";
  at::Tensor bytes = at::zeros({1}, at::kLong);
  if (s.rank() == 0) {
    int64_t b = 0;
    write_weights(a.model, path, &b);
    bytes[0] = b;
  }
  s.world()->broadcast(bytes, 0, "bench.bytes")->wait();
  const int64_t model_bytes = bytes[0].item<int64_t>();

  zs::begin_host_memory_window();
  zs::ShardedInit init(s, {});
  torch::manual_seed(2);
  zs_test::Gpt model(a.model);
  zs::ShardingEngine engine(init, model.ptr());
  const int64_t built = zs::host_memory_window_peak();
  const auto t0 = std::chrono::steady_clock::now();
  const zs::PretrainedReport r = zs::load_pretrained(engine, path);
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t peak = zs::host_memory_window_peak();
  // The bound: this rank's shards, the root's own parameters (the embeddings: built before the
  // blocks, whole until the engine takes the model) and the largest other unit (whole while built).
  int64_t shards = 0, root = 0, unit = 0;
  const std::vector<zs::FlatShard*> flats = engine.flat_shards();  // the root's first
  for (size_t i = 0; i < flats.size(); ++i) {
    shards += flats[i]->shard_numel() * 4;
    (i == 0 ? root : unit) = std::max<int64_t>(i == 0 ? root : unit, flats[i]->padded_numel() * 4);
  }
  at::Tensor peaks = at::zeros({s.world_size()}, at::kLong);
  peaks[s.rank()] = peak;
  s.world()->all_reduce(peaks, zs::ReduceOp::kSum, "bench.peaks")->wait();
  if (s.rank() == 0) {
    const double mib = 1048576.0;
    std::printf("bench_pretrained: %lld parameters (%.1f MiB fp32) over %d rank(s), safetensors file; per rank:\n",
                static_cast<long long>(engine.num_params()), model_bytes / mib, s.world_size());
    std::printf("  shards %.2f MiB + root unit %.2f MiB + largest block %.2f MiB = bound %.2f MiB\n", shards / mib,
                root / mib, unit / mib, (shards + root + unit) / mib);
    for (int q = 0; q < s.world_size(); ++q) {
      const int64_t p = peaks[q].item<int64_t>();
      std::printf("  rank %d: peak %.2f MiB = %.3f x the model, %.3f x the bound\n", q, p / mib,
                  static_cast<double>(p) / model_bytes, static_cast<double>(p) / (shards + root + unit));
    }
    std::printf("  built sharded: peak %.2f MiB; load: %.3f s, %.2f MiB read by rank 0 (%.0f MiB/s)\n", built / mib,
                load_s, r.bytes_read / mib, r.bytes_read / mib / load_s);
    const nlohmann::ordered_json j = {{"bench", "pretrained"},
                                      {"ranks", s.world_size()},
                                      {"model_bytes", model_bytes},
                                      {"shard_bytes", shards},
                                      {"root_unit_bytes", root},
                                      {"largest_unit_bytes", unit},
                                      {"peak_bytes_rank0", peaks[0].item<int64_t>()},
                                      {"load_s", load_s}};
    std::printf("%s\n", j.dump().c_str());
    std::filesystem::remove(path);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return zs::run_main(argc, argv, zs::Program{"bench_pretrained", {}}, run); }
