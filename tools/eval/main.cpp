// SPDX-License-Identifier: Apache-2.0
// zeroshard-eval: next-token negative log-likelihood and perplexity of a Hugging Face
// Llama-family model (config.json + weights; or a zeroshard checkpoint of one; or a base directory
// with --adapter, a PEFT LoRA adapter directory) on token ids, or a greedy continuation, sharded
// over the ranks it runs on (every rank holds only its shards of the weights).
//
//   mpirun -n 2 zeroshard-eval HF_DIR|CKPT [--adapter PEFT_DIR] --ids ids.json [--context 2048]
//     -> {"nll": 2.3456, "ppl": 10.44, "tokens": 4095}      (the last line, from rank 0)
//   mpirun -n 2 zeroshard-eval HF_DIR --generate 32 --prompt-ids 1,2,3
//     -> {"prompt": [1, 2, 3], "generated": [...]}
//
// Ids are cut into windows of --context tokens that overlap by one, so every id but the first is
// predicted once; the ranks take the windows in turn. nll is the mean over the predicted ids.

#include <ATen/ops/argmax.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "model_source.h"
#include "token_ids.h"
#include "zeroshard/base/cli.h"
#include "zeroshard/base/error.h"
#include "zeroshard/config/main.h"
#include "zeroshard/core/session.h"
#include "zeroshard/models/hf_checkpoint.h"
#include "zeroshard/models/llama.h"
#include "zeroshard/engine/engine.h"
#include "zeroshard/engine/sharded_init.h"

namespace zs = zeroshard;
namespace zm = zeroshard::models;

namespace {

struct Args {
  std::string model, adapter, ids, ids_dtype, prompt_ids;
  int64_t context = 2048;
  int64_t generate = 0;
  std::vector<std::string> ignore_keys;
};

std::optional<Args> parse(const zs::Session& s, const std::vector<std::string>& args) {
  Args a;
  zs::cli::App app("zeroshard-eval",
                   "Mean next-token negative log-likelihood and perplexity of a Hugging Face Llama-family model on "
                   "token ids, or its greedy continuation of a prompt, sharded over the job's ranks.");
  app.usage("mpirun -n N zeroshard-eval HF_DIR|CKPT [--adapter DIR] (--ids FILE | --generate N --prompt-ids IDS) "
            "[OPTIONS]");
  app.add_text("MODEL", &a.model, "a directory with config.json and the weights, or a zeroshard checkpoint of a "
               "Llama-family model", "DIR")->required();
  app.add_text("--adapter", &a.adapter, "a PEFT LoRA adapter directory to apply to the base MODEL", "DIR");
  app.add_text("--ids", &a.ids, "token ids to score: a .json array or a .bin of --ids-dtype values", "FILE");
  app.add_choice("--ids-dtype", &a.ids_dtype, {"uint16", "uint32"}, "how a .bin file stores the ids");
  app.add_int("--context", &a.context, "tokens per window (default 2048, at most max_position_embeddings)", 2);
  app.add_int("--generate", &a.generate, "greedy continuation of --prompt-ids by N tokens", 1);
  app.add_text("--prompt-ids", &a.prompt_ids, "the prompt: ids \"1,2,3\" or a file as for --ids", "IDS");
  app.add_list("--ignore-config-key", &a.ignore_keys, "accept this config.json key as harmless (repeatable)", "KEY");
  app.add_config_options();
  app.then([&] {
    if (a.generate == 0 && a.ids.empty()) app.fail("give --ids FILE to score, or --generate N with --prompt-ids");
    if (a.generate > 0 && a.prompt_ids.empty()) app.fail("--generate needs --prompt-ids");
    if (a.generate > 0 && !a.ids.empty()) app.fail("--ids and --generate are separate runs: give one");
    if (a.generate == 0 && !a.prompt_ids.empty()) app.fail("--prompt-ids applies to --generate");
  });
  if (!app.parse(args, s.rank() == 0)) return std::nullopt;
  return a;
}

// Summed NLL and count of this rank's windows. Every rank runs the same number of forwards (the
// sharded model needs all of them): a rank out of windows scores window 0 with every label ignored.
std::pair<double, double> score(zs::ShardingEngine& engine, zm::LlamaForCausalLM& model,
                                const std::vector<int64_t>& ids, int64_t context, int rank, int ranks,
                                c10::Device device) {
  const int64_t n = static_cast<int64_t>(ids.size()), step = context - 1;
  const int64_t windows = std::max<int64_t>(1, (n - 1 + step - 1) / step);
  double sum = 0, count = 0;
  for (int64_t first = 0; first < windows; first += ranks) {
    const int64_t w = first + rank;
    const int64_t begin = w < windows ? w * step : 0, len = std::min(context, n - begin);
    at::Tensor x =
        at::tensor(std::vector<int64_t>(ids.begin() + begin, ids.begin() + begin + len), at::kLong).view({1, -1});
    at::Tensor labels = w < windows ? x.clone() : at::full_like(x, -100);
    at::Tensor nll =
        engine.forward([&] { return zm::causal_lm_token_nll(model->forward(x.to(device)), labels.to(device)); });
    sum += nll.sum().item<double>();
    count += static_cast<double>((labels.narrow(1, 1, len - 1) != -100).sum().item<int64_t>());
  }
  return {sum, count};
}

std::vector<int64_t> generate(zs::Session& s, zs::ShardingEngine& engine, zm::LlamaForCausalLM& model,
                              std::vector<int64_t> tokens, int64_t n) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) {
    at::Tensor x = at::tensor(tokens, at::kLong).view({1, -1}).to(s.device());
    at::Tensor logits = engine.forward([&] { return model->forward(x); });
    at::Tensor next = at::argmax(logits[0][-1].to(at::kFloat)).to(at::kCPU).view({1});
    s.world()->broadcast(next, 0, "eval.generate")->wait();  // every rank continues with rank 0's choice
    tokens.push_back(next.item<int64_t>());
    out.push_back(tokens.back());
  }
  return out;
}

int run(zs::Session& s, const zs::Run& run) {
  const std::optional<Args> args = parse(s, run.args);
  if (!args) return 0;
  const Args& a = *args;
  zm::LlamaConfigOptions co;
  co.ignore_keys = a.ignore_keys;
  const zs_eval::EvalModel source = zs_eval::resolve_model(a.model, a.adapter, co);
  const zm::LlamaConfig& cfg = source.config;
  const int64_t context = std::min(a.context, cfg.max_position_embeddings);
  std::vector<int64_t> ids =
      a.generate > 0 ? zs_eval::token_ids_argument("--prompt-ids", a.prompt_ids, a.ids_dtype, cfg.vocab_size)
                     : zs_eval::read_token_ids(a.ids, a.ids_dtype, cfg.vocab_size);
  ZS_REQUIRE(a.generate > 0 || ids.size() >= 2, zs::UsageError, "--ids '", a.ids,
             "': scoring needs at least 2 token ids");
  ZS_REQUIRE(a.generate == 0 || static_cast<int64_t>(ids.size()) + a.generate <= context, zs::UsageError, "--generate ",
             a.generate, " after a prompt of ", ids.size(), " ids exceeds the context of ", context, " tokens");
  cfg.check_sequence_length(a.generate > 0 ? static_cast<int64_t>(ids.size()) + a.generate
                                           : std::min<int64_t>(context, static_cast<int64_t>(ids.size())));
  zs::ShardingOptions sharding = run.options.sharding;
  if (source.lora) sharding.unit_hooks.push_back(zs::lora::unit_hook(*source.lora));
  zs::ShardedInit init(s, sharding);
  zm::LlamaForCausalLM model(zm::LlamaOptions{cfg, s.device()});
  zs::ShardingEngine engine(init, model.ptr());
  source.load(engine);
  model->eval();
  torch::NoGradGuard no_grad;
  nlohmann::ordered_json line;
  if (a.generate > 0) {
    const std::vector<int64_t> out = generate(s, engine, model, ids, a.generate);
    line["prompt"] = ids;
    line["generated"] = out;
  } else {
    const auto [sum, count] = score(engine, model, ids, context, s.rank(), s.world_size(), s.device());
    at::Tensor totals = at::tensor(std::vector<double>{sum, count}, at::kDouble);
    s.world()->all_reduce(totals, zs::ReduceOp::kSum, "eval.nll")->wait();
    const double nll = totals[0].item<double>() / totals[1].item<double>();
    line["nll"] = nll;
    line["ppl"] = std::exp(nll);
    line["tokens"] = static_cast<int64_t>(totals[1].item<double>());
  }
  if (s.rank() == 0) std::printf("%s\n", line.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const zs::Program program{"zeroshard-eval", {zs::keys::engine()}};
  return zs::run_main(argc, argv, program, run);
}
