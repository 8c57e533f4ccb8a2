#pragma once
// Command line shared by the GPT benchmarks (bench_step, bench_memory): model shape, batch and
// steps, plus flags only one benchmark has (`extra` returns true when it consumed `key`).

#include <functional>
#include <string>
#include <vector>

#include "sharding/models.h"
#include "zeroshard/base/error.h"

namespace zs_bench {

struct GptBenchArgs {
  zs_test::GptConfig model;
  int64_t batch = 8;
  int steps = 0;
};

inline GptBenchArgs parse_gpt_bench_args(const std::vector<std::string>& args, GptBenchArgs defaults,
                                         int warmup_steps, const std::string& usage,
                                         const std::function<bool(const std::string&, const std::string&)>& extra = {}) {
  GptBenchArgs o = defaults;
  for (size_t i = 1; i < args.size(); ++i) {
    ZS_REQUIRE(i + 1 < args.size(), zeroshard::UsageError, args[i], " needs a value; ", usage);
    const std::string k = args[i], v = args[++i];
    if (k == "--dim") o.model.dim = std::stoll(v);
    else if (k == "--layers") o.model.layers = std::stoll(v);
    else if (k == "--heads") o.model.heads = std::stoll(v);
    else if (k == "--seq") o.model.seq = std::stoll(v);
    else if (k == "--vocab") o.model.vocab = std::stoll(v);
    else if (k == "--batch") o.batch = std::stoll(v);
    else if (k == "--steps") o.steps = std::stoi(v);
    else if (!extra || !extra(k, v)) ZS_THROW(zeroshard::UsageError, "unknown argument '", k, "'; ", usage);
  }
  ZS_REQUIRE(o.steps > warmup_steps, zeroshard::UsageError, "--steps must be > ", warmup_steps, " (", warmup_steps,
             " warm-up)");
  return o;
}

}  // namespace zs_bench
