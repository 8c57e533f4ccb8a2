// SPDX-License-Identifier: Apache-2.0
// bench_overlap_step: the host optimizer's step after backward (engine.step) against the same step
// run during backward (engine.step_during_backward, offload.overlap_step), on two copies of one GPT
// trained side by side, step by step alternately, so that slow phases of the machine hit both.
//
//   mpirun -n N bench_overlap_step [--dim 512 --layers 8 --batch 8 --steps 12] [--max-norm 1e9]
//
// Prints per variant the median step (forward + backward + clip + step), the median time of the
// plain variant's step() alone (what the overlap can hide at best), the ratio overlapped / plain,
// and the share of the step() time hidden; checks that both copies end bit for bit equal. The clip
// at --max-norm (default 1e9: a factor of exactly 1, every step kept; a small one makes every step
// a redo, the worst case). AdamW from the config's optimizer section, its state in host memory.
// Final line: JSON.

#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "engine/models.h"
#include "gpt_bench_args.h"
#include "zeroshard/base/error.h"
#include "zeroshard/config/main.h"
#include "zeroshard/core/session.h"
#include "zeroshard/engine/engine.h"
#include "zeroshard/offload/offload_optimizer.h"

namespace zs = zeroshard;

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Args : zs_bench::GptBenchArgs {
  double max_norm = 1e9;
};

std::optional<Args> parse(const std::vector<std::string>& args, bool print) {
  Args a;
  a.model.vocab = 256, a.model.dim = 512, a.model.heads = 8, a.model.layers = 8, a.model.seq = 64;
  a.batch = 8;
  a.steps = 12;
  zs::cli::App app("bench_overlap_step",
                   "The host optimizer's step after backward against the same step during backward "
                   "(offload.overlap_step), on two copies of one GPT trained alternately. Final line: JSON.");
  app.usage("mpirun -n N bench_overlap_step [OPTIONS]");
  zs_bench::add_gpt_bench_args(app, a, 2);
  app.add_number("--max-norm", &a.max_norm, "clip norm (default 1e9: a factor of 1, every step kept)", 1e-12);
  app.add_config_options();
  if (!app.parse(args, print)) return std::nullopt;
  return a;
}

struct Copy {
  explicit Copy(zs::Session& s, const zs_test::GptConfig& cfg, const zs::RunOptions& run) : model(cfg) {
    torch::manual_seed(1);
    model = zs_test::Gpt(cfg);
    engine = std::make_unique<zs::ShardingEngine>(s, model.ptr(), run.sharding);
    zs::OffloadOptions o = run.offload;
    o.target = zs::OffloadTarget::kCpu;
    o.params = zs::OffloadTarget::kDevice;
    opt = std::make_unique<zs::OffloadedOptimizer>(run.optimizer, o, s.rank(), &engine->memory());
  }
  zs_test::Gpt model;
  std::unique_ptr<zs::ShardingEngine> engine;
  std::unique_ptr<zs::OffloadedOptimizer> opt;
};

}  // namespace

int main(int argc, char** argv) {
  const zs::Program program{"bench_overlap_step", {zs::keys::engine(), {"optimizer"}}};
  return zs::run_main(argc, argv, program, [](zs::Session& s, const zs::Run& run) {
    const std::optional<Args> parsed = parse(run.args, s.rank() == 0);
    if (!parsed) return 0;
    const Args& a = *parsed;
    ZS_REQUIRE(s.device().is_cpu(), zs::UsageError, "bench_overlap_step runs on the CPU (this session's device is ",
               s.device().str(), "); on a GPU, bench_step --preset gpt-offload --set offload.overlap_step=true");
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    at::set_num_threads(std::max(1, static_cast<int>(cores) / s.local_world_size()));
    auto& world = *s.world();
    Copy plain(s, a.model, run.options), overlapped(s, a.model, run.options);
    std::vector<double> t_plain, t_overlapped, t_step;
    auto run_step = [&](Copy& c, int step, bool overlap, double* step_s) {
      auto g = torch::make_generator<at::CPUGeneratorImpl>(100000 * s.rank() + step);
      const at::Tensor x = torch::randint(a.model.vocab, {a.batch, a.model.seq}, g);
      const at::Tensor y = torch::randint(a.model.vocab, {a.batch, a.model.seq}, g);
      at::Tensor loss = c.engine->forward([&] { return zs_bench::lm_loss(c.model->forward(x), y); });
      if (overlap) c.engine->step_during_backward(*c.opt);
      loss.backward();
      c.engine->clip_grad_norm(a.max_norm);
      const auto t = Clock::now();
      c.engine->step(*c.opt);
      if (step_s != nullptr) *step_s = seconds_since(t);
      c.engine->zero_grad();
    };
    for (int step = 0; step < a.steps; ++step) {
      double opt_s = 0;
      const double p = zs_bench::time_step(world, [&] { run_step(plain, step, false, &opt_s); });
      const double o = zs_bench::time_step(world, [&] { run_step(overlapped, step, true, nullptr); });
      if (step >= 2) t_plain.push_back(p), t_overlapped.push_back(o), t_step.push_back(opt_s);
    }
    const double mp = zs_bench::median(t_plain), mo = zs_bench::median(t_overlapped), ms = zs_bench::median(t_step);
    // Bit for bit the same training: every parameter of the two copies.
    const auto pa = plain.engine->full_state_dict(), pb = overlapped.engine->full_state_dict();
    bool equal = pa.size() == pb.size();
    for (const auto& [name, t] : pa) equal = equal && pb.count(name) > 0 && at::equal(t, pb.at(name));
    const zs::ShardingEngine::OverlapStats st = overlapped.engine->overlap_stats();
    const int64_t params = plain.engine->num_padded_trainable_params();
    if (s.rank() == 0) {
      std::printf("GPT d_model %lld x %lld layers, %lld x %lld tokens per rank, %d rank(s), %.1fM parameters, AdamW on "
                  "the host, clip %g; %d steps, the first 2 not timed\n",
                  static_cast<long long>(a.model.dim), static_cast<long long>(a.model.layers),
                  static_cast<long long>(a.batch), static_cast<long long>(a.model.seq), s.world_size(), params / 1e6,
                  a.max_norm, a.steps);
      std::printf("step after backward: %.1f ms (of which step() %.1f ms); during backward: %.1f ms; ratio %.3fx; "
                  "step() time hidden %.0f%%\n",
                  mp * 1e3, ms * 1e3, mo * 1e3, mo / mp, ms > 0 ? 100.0 * (mp - mo) / ms : 0.0);
      std::printf("during backward: %lld steps, %lld shard updates, %lld redone; parameters bit for bit equal: %s\n",
                  static_cast<long long>(st.steps), static_cast<long long>(st.shards), static_cast<long long>(st.redone),
                  equal ? "yes" : "NO");
      std::printf("{\"bench\":\"overlap_step\",\"ranks\":%d,\"params\":%lld,\"plain_ms\":%.3f,\"step_ms\":%.3f,"
                  "\"overlapped_ms\":%.3f,\"ratio\":%.4f,\"redone\":%lld,\"bitwise\":%s}\n",
                  s.world_size(), static_cast<long long>(params), mp * 1e3, ms * 1e3, mo * 1e3, mo / mp,
                  static_cast<long long>(st.redone), equal ? "true" : "false");
    }
    return equal ? 0 : 1;
  });
}
