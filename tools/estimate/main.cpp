// SPDX-License-Identifier: Apache-2.0
// zeroshard-estimate: per-rank memory of a training setup before running it.
//
//   zeroshard-estimate --params 1.3e9 [--unit-params 5e7] --world 8 --ranks-per-node 8 [--config F] [--set k=v]
//   zeroshard-estimate --gpt 24,2048,50304,1024[,16] --world 16 --ranks-per-node 8 --micro-batch 4
//   zeroshard-estimate --gpt 4,128,256,128 --world 4 --ranks-per-node 2 --link-gbps 0.1 [--latency-us 50] [--compute-s 0.3]
//
// Prints every strategy x offload mode (the configured one marked '*'), the configured setup
// category by category, and for --gpt the activations per micro-batch with and without activation
// checkpointing; with --link-gbps what a step of each strategy sends between the nodes, its
// communication time and (with --compute-s) the step time. Formulas:
// estimate/include/zeroshard/estimate/estimate.h and docs/tools.md.

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "zeroshard/base/cli.h"
#include "zeroshard/config/main.h"
#include "zeroshard/base/error.h"
#include "zeroshard/base/format.h"
#include "zeroshard/estimate/estimate.h"

namespace zs = zeroshard;

namespace {

// "1.3e9" or "1300000000" -> 1300000000; UsageError naming the option otherwise.
int64_t parse_count(const std::string& option, const std::string& text, int64_t min) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  ZS_REQUIRE(!text.empty() && end != nullptr && *end == '\0' && std::isfinite(v) && v >= static_cast<double>(min) &&
                 v < 9.0e18 && std::nearbyint(v) == v,
             zs::UsageError, option, " '", text, "' is not a whole number >= ", min, " (1.3e9 style allowed)");
  return static_cast<int64_t>(v);
}

zs::GptShape parse_gpt(const std::string& text) {
  std::vector<int64_t> v;
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) v.push_back(parse_count("--gpt", item, 1));
  ZS_REQUIRE(v.size() == 4 || v.size() == 5, zs::UsageError, "--gpt '", text,
             "': expected LAYERS,D_MODEL,VOCAB,SEQ or LAYERS,D_MODEL,VOCAB,SEQ,HEADS");
  zs::GptShape g;
  g.layers = v[0];
  g.d_model = v[1];
  g.vocab = v[2];
  g.seq = v[3];
  if (v.size() == 5) g.heads = v[4];
  return g;
}

std::string mib(int64_t bytes) { return zs::format_mib(bytes, 2); }

struct Args {
  int64_t params = 0, unit_params = 0, micro_batch = 1;
  int world = 1, ranks_per_node = 0;
  double link_gbps = 0, latency_us = 0, compute_s = 0;
  bool have_gpt = false;
  zs::GptShape gpt;
};

// The command line after --config/--set. Returns false after --help/--version.
bool parse(const std::vector<std::string>& rest, Args& a) {
  zs::cli::App app("zeroshard-estimate",
                   "Per-rank memory of a training setup before running it: every strategy x offload mode (the "
                   "configured one marked '*'), the configured setup by category, and for --gpt the activations.");
  app.usage("zeroshard-estimate (--params P | --gpt LAYERS,D_MODEL,VOCAB,SEQ[,HEADS]) [OPTIONS]");
  app.footer("Strategy, precision, optimizer, offload and activation checkpointing come from the config\n"
             "(docs/config.md). Formulas: docs/tools.md.");
  app.add_custom("--params", "P", "parameters of the model, e.g. 1.3e9",
                 [&](const std::string& v) { a.params = parse_count("--params", v, 1); });
  app.add_custom("--unit-params", "U", "parameters of the largest unit (e.g. a transformer block), with --params",
                 [&](const std::string& v) { a.unit_params = parse_count("--unit-params", v, 1); });
  app.add_custom("--gpt", "LAYERS,D_MODEL,VOCAB,SEQ[,HEADS]", "a GPT-style model (its units and activations)",
                 [&](const std::string& v) {
                   a.gpt = parse_gpt(v);
                   a.have_gpt = true;
                 });
  app.add_int("--world", &a.world, "ranks in the job (default 1)", 1);
  app.add_int("--ranks-per-node", &a.ranks_per_node, "ranks per node (default: --world)", 1);
  app.add_int("--micro-batch", &a.micro_batch, "sequences per micro-batch, for the activations (default 1)", 1);
  app.add_number("--link-gbps", &a.link_gbps,
                 "each node's link to the others, Gb/s each way: adds what a step sends over it per strategy", 1e-6);
  app.add_number("--latency-us", &a.latency_us, "with --link-gbps: one-way latency per message, microseconds", 0);
  app.add_number("--compute-s", &a.compute_s,
                 "with --link-gbps: a step's compute per rank with communication out of the way (e.g. the same job "
                 "on one node), seconds: adds the step time", 0);
  app.add_config_options();
  app.then([&] {
    if (a.have_gpt == (a.params > 0)) app.fail("give exactly one of --params and --gpt");
    if (a.unit_params != 0 && a.params == 0) app.fail("--unit-params goes with --params (--gpt knows its units)");
    if (a.link_gbps == 0 && (a.latency_us > 0 || a.compute_s > 0)) app.fail("--latency-us and --compute-s go with --link-gbps");
  });
  return app.parse(rest);
}

int run(int argc, char** argv) {
  // The config file of the training run to estimate: it sets keys only the training program acts on
  // (train.*, model.*), which are accepted from the file; the estimate reads the ones below (a --set
  // of another key, e.g. offload.io_backend or precision.frozen_linear, is refused: it would not
  // change the estimate).
  zs::Program program{"zeroshard-estimate",
                      {{"sharding.strategy", "sharding.hybrid_group_size", "sharding.hpz_group_size", "sharding.forward_prefetch",
                        "sharding.backward_prefetch", "sharding.limit_all_gathers", "precision.param_dtype", "precision.reduce_dtype", "optimizer.type",
                        "optimizer.momentum", "offload.optimizer", "offload.params", "offload.grads",
                        "offload.keep_param_dtype_shard", "offload.buffer_count", "offload.block_size",
                        "offload.nvme_generations", "activation_checkpointing", "sharding.gather_quantization",
                        "sharding.gather_quantization_block", "sharding.reduce_quantization",
                        "sharding.reduce_quantization_block", "comm.node_stages",
                        "comm.reduce_scatter_ring"}}};
  program.accept_unread_in_file = true;
  const zs::Run run = zs::load_run(argc, argv, program);
  Args args;
  if (!parse(run.args, args)) return 0;
  const int64_t params = args.params, unit_params = args.unit_params, micro_batch = args.micro_batch;
  const int world = args.world;
  int ranks_per_node = args.ranks_per_node;
  const bool have_gpt = args.have_gpt;
  const zs::GptShape gpt = args.gpt;
  if (ranks_per_node == 0) ranks_per_node = world;
  zs::EstimateOptions options = run.options.estimate;
  options.world_size = world;
  options.ranks_per_node = ranks_per_node;
  const zs::ModelShape model = have_gpt ? zs::gpt_model_shape(gpt) : zs::uniform_model_shape(params, unit_params);
  std::fputs(zs::format_estimates(model, options).c_str(), stdout);
  if (params > 0 && unit_params == 0) {
    std::printf("  (no --unit-params: the model counts as one unit, so the gathered/unsharded peaks are the whole "
                "model's; give the largest unit's size for a tighter figure)\n");
  }
  if (have_gpt) {
    const auto dtype = run.config.precision().param_dtype();
    const int every = run.options.model.checkpointing.every_n_blocks;
    const int dtype_bytes = dtype == zs::config::PrecisionConfig::FP32 ? 4 : 2;
    const zs::ActivationEstimate a = zs::estimate_gpt_activations(gpt, micro_batch, dtype_bytes, every);
    const bool ckpt = run.options.model.checkpointing.enabled;
    std::printf("\nactivations per micro-batch of %lld x %lld tokens (%s, %lld heads), per rank:\n",
                static_cast<long long>(micro_batch), static_cast<long long>(gpt.seq),
                zs::config::PrecisionConfig::DType_Name(dtype).c_str(), static_cast<long long>(gpt.effective_heads()));
    std::printf("%s without checkpointing   %14s  (%s per block, %s head)\n", ckpt ? " " : "*", mib(a.plain).c_str(),
                mib(a.per_block).c_str(), mib(a.head).c_str());
    std::printf("%s with checkpointing      %14s  (every %d block(s))\n", ckpt ? "*" : " ", mib(a.checkpointed).c_str(),
                every);
  }
  if (args.link_gbps > 0) {
    const zs::LinkOptions link{args.link_gbps * 1e9 / 8, args.latency_us * 1e-6, args.compute_s};
    std::fputs(zs::format_step_comm(model, options, link).c_str(), stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const zs::UsageError& e) {
    std::fprintf(stderr, "zeroshard-estimate: usage error: %s\n", e.message().c_str());
    return 2;
  } catch (const zs::Error& e) {
    std::fprintf(stderr, "zeroshard-estimate: error: %s\n", e.message().c_str());
    return 1;
  }
}
