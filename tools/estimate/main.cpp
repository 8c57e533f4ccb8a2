// zeroshard-estimate: per-rank memory of a training setup before running it.
//
//   zeroshard-estimate --params 1.3e9 [--unit-params 5e7] --world 8 --ranks-per-node 8 [--config F] [--set k=v]
//   zeroshard-estimate --gpt 24,2048,50304,1024[,16] --world 16 --ranks-per-node 8 --micro-batch 4
//
// Prints every strategy x offload mode (the configured one marked '*'), the configured setup
// category by category, and for --gpt the activations per micro-batch with and without activation
// checkpointing. Formulas: sharding/include/zeroshard/sharding/estimate.h and docs/tools.md.

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "zeroshard/core/config.h"
#include "zeroshard/base/error.h"
#include "zeroshard/base/format.h"
#include "zeroshard/sharding/estimate.h"

namespace zs = zeroshard;

namespace {

const char* kUsage =
    "usage: zeroshard-estimate (--params P [--unit-params U] | --gpt LAYERS,D_MODEL,VOCAB,SEQ[,HEADS])\n"
    "                          [--world N] [--ranks-per-node R] [--micro-batch B] [--config FILE] [--set KEY=VALUE]...\n"
    "P and U accept 1.3e9-style numbers. Strategy, precision, optimizer, offload and activation\n"
    "checkpointing come from the config (docs/config.md).\n";

// "1.3e9" or "1300000000" -> 1300000000; UsageError naming the option otherwise.
int64_t parse_count(const std::string& option, const std::string& text, int64_t min) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  ZS_REQUIRE(!text.empty() && end != nullptr && *end == '\0' && std::isfinite(v) && v >= static_cast<double>(min) &&
                 v < 9.0e18 && std::nearbyint(v) == v,
             zs::UsageError, option, " '", text, "': expected a whole number >= ", min, " (1.3e9 style allowed)");
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

int run(int argc, char** argv) {
  const zs::CommandLine cl = zs::parse_command_line(argc, argv);
  int64_t params = 0, unit_params = 0, micro_batch = 1;
  int world = 1, ranks_per_node = 0;
  bool have_gpt = false;
  zs::GptShape gpt;
  const auto& rest = cl.rest;
  for (size_t i = 1; i < rest.size(); ++i) {
    const std::string& arg = rest[i];
    auto value = [&]() -> std::string {
      ZS_REQUIRE(i + 1 < rest.size(), zs::UsageError, arg, " needs a value\n", kUsage);
      return rest[++i];
    };
    if (arg == "--params") {
      params = parse_count(arg, value(), 1);
    } else if (arg == "--unit-params") {
      unit_params = parse_count(arg, value(), 1);
    } else if (arg == "--gpt") {
      gpt = parse_gpt(value());
      have_gpt = true;
    } else if (arg == "--world") {
      world = static_cast<int>(parse_count(arg, value(), 1));
    } else if (arg == "--ranks-per-node") {
      ranks_per_node = static_cast<int>(parse_count(arg, value(), 1));
    } else if (arg == "--micro-batch") {
      micro_batch = parse_count(arg, value(), 1);
    } else if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else {
      ZS_THROW(zs::UsageError, "unknown argument '", arg, "'\n", kUsage);
    }
  }
  ZS_REQUIRE(have_gpt != (params > 0), zs::UsageError, "give exactly one of --params and --gpt\n", kUsage);
  ZS_REQUIRE(unit_params == 0 || params > 0, zs::UsageError, "--unit-params goes with --params (--gpt knows its units)");
  if (ranks_per_node == 0) ranks_per_node = world;
  const zs::Config cfg = zs::build_config(cl);
  const zs::EstimateOptions options = zs::EstimateOptions::from_config(cfg, world, ranks_per_node);
  const zs::ModelShape model = have_gpt ? zs::gpt_model_shape(gpt) : zs::uniform_model_shape(params, unit_params);
  std::fputs(zs::format_estimates(model, options).c_str(), stdout);
  if (params > 0 && unit_params == 0) {
    std::printf("  (no --unit-params: the model counts as one unit, so the gathered/unsharded peaks are the whole "
                "model's; give the largest unit's size for a tighter figure)\n");
  }
  if (have_gpt) {
    const auto dtype = cfg.precision().param_dtype();
    const int every = cfg.activation_checkpointing().every_n_blocks();
    const int dtype_bytes = dtype == zs::config::PrecisionConfig::FP32 ? 4 : 2;
    const zs::ActivationEstimate a = zs::estimate_gpt_activations(gpt, micro_batch, dtype_bytes, every);
    const bool ckpt = cfg.activation_checkpointing().enabled();
    std::printf("\nactivations per micro-batch of %lld x %lld tokens (%s, %lld heads), per rank:\n",
                static_cast<long long>(micro_batch), static_cast<long long>(gpt.seq),
                zs::config::PrecisionConfig::DType_Name(dtype).c_str(), static_cast<long long>(gpt.effective_heads()));
    std::printf("%s without checkpointing   %14s  (%s per block, %s head)\n", ckpt ? " " : "*", mib(a.plain).c_str(),
                mib(a.per_block).c_str(), mib(a.head).c_str());
    std::printf("%s with checkpointing      %14s  (every %d block(s))\n", ckpt ? "*" : " ", mib(a.checkpointed).c_str(),
                every);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const zs::UsageError& e) {
    std::fprintf(stderr, "zeroshard-estimate: error: %s\n", e.message().c_str());
    return 2;
  } catch (const zs::Error& e) {
    std::fprintf(stderr, "zeroshard-estimate: error: %s\n", e.message().c_str());
    return 1;
  }
}
