// SPDX-License-Identifier: Apache-2.0
// bench_torchscript: a GPT written in Python and scripted (TorchScriptModel) against the same GPT
// written in C++ (tests/sharding/models.h), both trained sharded by the engine in the same run,
// alternately step by step, on the same batches; tokens/s of each and their ratio (goal: the
// scripted model within 10% of the C++ one).
//
//   /usr/bin/python3 tests/python/make_script_models.py --gpt /tmp/gpt.pt [--dim 256 --layers 12 ...]
//   mpirun -n 2 build/bin/bench_torchscript --script /tmp/gpt.pt [--dim 256 --layers 12 ...]
//
// The shape flags must be the ones the file was written with: the bench copies the script's
// weights into the C++ model (h.N.* into hN.*), so both start equal, and refuses to run when a
// shape differs or when the first step's losses differ by more than 1e-5 (relative; e.g. another
// head count), so the two variants do the same arithmetic. Units: the blocks (h.*), FULL_SHARD
// unless --strategy says otherwise; AdamW. Final line: JSON.

#include <ATen/Parallel.h>
#include <torch/nn/functional/loss.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

#include "bench_util.h"
#include "gpt_bench_args.h"
#include "engine/models.h"
#include "zeroshard/base/error.h"
#include "zeroshard/config/main.h"
#include "zeroshard/core/session.h"
#include "zeroshard/engine/engine.h"
#include "zeroshard/models/torchscript.h"

namespace zs = zeroshard;

namespace {

// TorchScript's profiling executor profiles the first runs and optimizes the graph after them.
constexpr int kWarmup = 5;

using zs_bench::median;
using zs_bench::time_step;

using zs_bench::lm_loss;

// The script's name of a C++ parameter: "h3.fc.weight" -> "h.3.fc.weight".
std::string script_name(const std::string& cpp) {
  if (cpp.size() > 1 && cpp[0] == 'h' && std::isdigit(static_cast<unsigned char>(cpp[1]))) {
    return "h." + cpp.substr(1);
  }
  return cpp;
}

// Copies the script model's weights into the C++ model; UsageError naming the first tensor whose
// name or shape does not match.
void copy_weights(const torch::nn::Module& script, torch::nn::Module& cpp, const std::string& file) {
  std::map<std::string, at::Tensor> from;
  for (const auto& p : script.named_parameters()) from.emplace(p.key(), p.value());
  torch::NoGradGuard no_grad;
  size_t copied = 0;
  for (auto& p : cpp.named_parameters()) {
    const std::string name = script_name(p.key());
    auto it = from.find(name);
    ZS_REQUIRE(it != from.end(), zs::UsageError, "bench_torchscript: '", file, "' has no parameter '", name,
               "' (the C++ GPT's ", p.key(), "); write it with make_script_models.py --gpt and the same shape flags");
    ZS_REQUIRE(it->second.sizes() == p.value().sizes(), zs::UsageError, "bench_torchscript: '", file, "' parameter '",
               name, "' has shape ", it->second.sizes(), ", the C++ GPT's ", p.value().sizes(),
               " (pass the shape flags the file was written with)");
    p.value().copy_(it->second);
    ++copied;
  }
  ZS_REQUIRE(copied == cpp.named_parameters().size() && from.size() <= copied, zs::UsageError, "bench_torchscript: '",
             file, "' has ", from.size(), " parameters, the C++ GPT ", copied);
}

struct Variant {
  std::shared_ptr<torch::nn::Module> module;
  std::function<at::Tensor(const at::Tensor&)> forward;
  std::unique_ptr<zs::ShardingEngine> engine;
  std::unique_ptr<zs::ShardedOptimizer> opt;
};

}  // namespace

int main(int argc, char** argv) {
  const zs::Program program{"bench_torchscript", {}};
  return zs::run_main(argc, argv, program, [](zs::Session& s, const zs::Run&) {
    zs_bench::GptBenchArgs a;
    a.model = zs_test::GptConfig{4096, 256, 4, 12, 256};
    a.batch = 4;
    a.steps = 20;
    std::string script, strategy = "FULL_SHARD", optimize_graph = "0";
    zs::cli::App app("bench_torchscript",
                     "Tokens/s of a GPT scripted in Python (TorchScriptModel) against the same GPT written in C++, "
                     "both trained sharded in the same run. Final line: JSON.");
    app.usage("mpirun -n N bench_torchscript --script FILE [OPTIONS]");
    app.add_text("--script", &script, "the scripted GPT (make_script_models.py --gpt FILE, same shape flags)", "FILE")
        ->required();
    zs_bench::add_gpt_bench_args(app, a, kWarmup);
    app.add_choice("--strategy", &strategy, {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"},
                   "sharding strategy (default FULL_SHARD)");
    app.add_choice("--optimize-graph", &optimize_graph, {"0", "1"},
                   "TorchScriptOptions::optimize_graph: TorchScript's graph optimizer on (1) or off (0, default)");
    app.add_config_options();
    if (!app.parse(s.args(), s.rank() == 0)) return 0;
    ZS_REQUIRE(!s.device().is_cuda(), zs::UsageError, "bench_torchscript runs on the CPU; this session's device is ",
               s.device().str());
    const int n = s.world_size(), rank = s.rank();
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    at::set_num_threads(std::max(1, static_cast<int>(cores) / s.local_world_size()));
    auto& world = *s.world();

    zs::ShardingOptions o;
    for (auto st : {zs::ShardingStrategy::kFullShard, zs::ShardingStrategy::kShardGradOp, zs::ShardingStrategy::kNoShard,
                    zs::ShardingStrategy::kHybridShard}) {
      if (strategy == zs::to_string(st)) o.strategy = st;  // add_choice allowed only these names
    }

    // (a) the scripted GPT, its blocks the units.
    zs::TorchScriptOptions script_options;
    script_options.units = {"h.*"};
    script_options.optimize_graph = optimize_graph == "1";
    zs::TorchScriptModel scripted(script, script_options, s.device());
    // (b) the C++ GPT of the same shape, with the script's weights.
    zs_test::Gpt cpp(a.model);
    copy_weights(*scripted.module(), *cpp, script);

    Variant vs, vc;
    vs.module = scripted.module();
    vs.forward = [&](const at::Tensor& x) { return scripted.forward(x); };
    vc.module = cpp.ptr();
    vc.forward = [&](const at::Tensor& x) { return cpp->forward(x); };
    int64_t params = 0;
    for (Variant* v : {&vs, &vc}) {
      v->engine = std::make_unique<zs::ShardingEngine>(s, v->module, o);
      v->opt = zs::make_adamw(zs::AdamOptions{});
    }
    for (const auto& p : cpp->parameters()) params += p.numel();
    params -= cpp->wte->weight.numel();  // lm_head_weight is wte.weight: counted twice above

    auto batch_for = [&](int step) {
      auto g = torch::make_generator<at::CPUGeneratorImpl>(100000 * rank + step);
      return std::pair{torch::randint(a.model.vocab, {a.batch, a.model.seq}, g),
                       torch::randint(a.model.vocab, {a.batch, a.model.seq}, g)};
    };
    auto train_step = [&](Variant& v, int step) {
      auto [x, y] = batch_for(step);
      at::Tensor loss = v.engine->forward([&] { return lm_loss(v.forward(x), y); });
      loss.backward();
      v.engine->step(*v.opt);
      v.engine->zero_grad();
      return loss.item<double>();
    };

    // The variants alternate step by step, so slow phases of the machine hit both alike; the
    // ratio is the median of the per-step ratios.
    std::vector<double> ts, tc, ratios;
    double first_s = 0, first_c = 0;
    for (int step = 0; step < a.steps; ++step) {
      double ls = 0, lc = 0;
      const double t_s = time_step(world, [&] { ls = train_step(vs, step); });
      const double t_c = time_step(world, [&] { lc = train_step(vc, step); });
      if (step == 0) {
        first_s = ls, first_c = lc;
        ZS_REQUIRE(std::abs(ls - lc) <= 1e-5 * std::max(1.0, std::abs(lc)), zs::UsageError,
                   "bench_torchscript: rank ", rank, ": the first step's loss is ", ls, " for '", script,
                   "' but ", lc, " for the C++ GPT with its weights: the two do not compute the same model "
                   "(--heads as when the file was written?)");
      }
      if (step >= kWarmup) ts.push_back(t_s), tc.push_back(t_c), ratios.push_back(t_c / t_s);
    }
    const double tokens = static_cast<double>(a.batch) * a.model.seq * n;  // per step, all ranks
    const double tok_s = tokens / median(ts), tok_c = tokens / median(tc), ratio = median(ratios);
    if (rank == 0) {
      std::printf("bench_torchscript: GPT dim=%lld layers=%lld heads=%lld seq=%lld vocab=%lld, %lld params, local batch "
                  "%lld, %d rank(s), %s, %d intra-op thread(s), %d timed steps, graph optimizer %s\n",
                  (long long)a.model.dim, (long long)a.model.layers, (long long)a.model.heads, (long long)a.model.seq,
                  (long long)a.model.vocab, (long long)params, (long long)a.batch, n, strategy.c_str(),
                  at::get_num_threads(), a.steps - kWarmup, optimize_graph == "1" ? "on" : "off");
      std::printf("  first loss     scripted %.6f   C++ %.6f\n", first_s, first_c);
      std::printf("  tokens/s       scripted %10.1f   C++ %10.1f   scripted/C++ %.3f (goal >= 0.90)\n", tok_s, tok_c,
                  ratio);
      std::ostringstream js;
      js << "{\"bench\":\"torchscript\",\"ranks\":" << n << ",\"strategy\":\"" << strategy << "\",\"optimize_graph\":" << optimize_graph << ",\"params\":" << params
         << ",\"scripted_tokens_per_s\":" << tok_s << ",\"cpp_tokens_per_s\":" << tok_c << ",\"ratio\":" << ratio
         << ",\"first_loss_scripted\":" << first_s << ",\"first_loss_cpp\":" << first_c << "}";
      std::printf("%s\n", js.str().c_str());
    }
    return 0;
  });
}
