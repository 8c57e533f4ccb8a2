// SPDX-License-Identifier: Apache-2.0
// train_gpt: a GPT-style byte-level language model trained with zeroshard on the fortunes corpus.
//
//   mpirun -n 2 build/bin/train_gpt [--config FILE] [--set key=value ...] [--metrics-out FILE]
//                                   [--tensorboard DIR] [--check-loss-decreases]   (--help lists all)
//
// Everything else comes from the config (docs/config.md): model.* (shape), data.* (corpus, loader),
// train.* (steps, global batch, micro-batches, evaluation), optimizer.*, scheduler.*, precision.*
// (mixed precision, loss scaling), activation_checkpointing.*, sharding.* (FULL_SHARD by default),
// sample.* (the text generated at the end). The steps:
//   1. read the corpus (a missing one is an error naming the path and the Debian package) and hold
//      out data.val_fraction of every file for validation;
//   2. build the model under a ShardedInit: each block is initialised and sharded as it is built
//      (with lora.rank > 0: each block's LoRA adapters added as it is sharded, the rest frozen);
//   3. evaluate the validation loss, train train.steps optimizer steps (each rank reads its own
//      shard of every epoch, reshuffled per epoch), evaluate again (and every train.eval_interval);
//   4. generate sample.tokens bytes: every rank runs the sharded forward, rank 0 draws and prints.
// --check-loss-decreases makes the exit status 1 unless the final validation loss is below 90% of
// the initial one (CI uses it).

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/multinomial.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/topk.h>
#include <ATen/ops/zeros.h>
#include <torch/nn/functional/loss.h>

#include <cstdio>
#include <limits>
#include <memory>
#include <sstream>

#include "zeroshard/adapt/lora.h"
#include "zeroshard/base/error.h"
#include "zeroshard/base/format.h"
#include "zeroshard/config/main.h"
#include "zeroshard/core/host_memory.h"
#include "zeroshard/core/memory_report.h"
#include "zeroshard/engine/sharded_init.h"
#include "zeroshard/models/gpt.h"
#include "zeroshard/train/text.h"
#include "zeroshard/train/trainer.h"

namespace zs = zeroshard;
namespace zm = zeroshard::models;
namespace F = torch::nn::functional;

namespace {

constexpr const char* kUsage =
    "Trains a byte-level GPT on the fortunes corpus with zeroshard, then samples text from it. Every setting "
    "comes from the config (docs/config.md: model.*, data.*, train.*, sample.*, the engine's sections; "
    "model.init_from for pretrained weights, checkpoint.dir, offload.*).";

at::Tensor lm_loss(const at::Tensor& logits, const at::Tensor& targets) {
  return F::cross_entropy(logits.to(at::kFloat).reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

// The mean loss per token of every window in the batch.
at::Tensor per_window_loss(const at::Tensor& logits, const at::Tensor& targets) {
  const at::Tensor per_token = F::cross_entropy(logits.to(at::kFloat).reshape({-1, logits.size(-1)}),
                                                targets.reshape({-1}), F::CrossEntropyFuncOptions().reduction(torch::kNone));
  return per_token.view({targets.size(0), -1}).mean(1);
}

// Continues the prompt by `o.tokens` bytes. Every rank runs the forward (the sharded model needs
// all of them); rank 0 draws each byte and broadcasts it. Collective.
std::string generate(zs::Session& s, zs::ShardingEngine& engine, zm::Gpt& model, const zs::SampleOptions& o) {
  std::string prompt = o.prompt.empty() ? std::string("\n") : o.prompt;
  at::Tensor encoded = zs::ByteTokenizer::encode(prompt);
  std::vector<int64_t> tokens(encoded.data_ptr<int64_t>(), encoded.data_ptr<int64_t>() + encoded.numel());
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  const int64_t context = model->options.seq_len;
  std::string out;
  model->eval();
  torch::NoGradGuard no_grad;
  for (int i = 0; i < o.tokens; ++i) {
    const auto first = tokens.end() - std::min<int64_t>(context, static_cast<int64_t>(tokens.size()));
    at::Tensor ctx = at::tensor(std::vector<int64_t>(first, tokens.end()), at::kLong).view({1, -1}).to(s.device());
    at::Tensor logits = engine.forward([&] { return model->forward(ctx); });
    at::Tensor next = at::zeros({1}, at::kLong);
    if (s.rank() == 0) {
      // Only the 256 byte values: padded vocabulary entries never occur in the data.
      at::Tensor l = logits[0][-1].narrow(0, 0, zs::ByteTokenizer::kVocabSize).to(at::kFloat).cpu() / o.temperature;
      if (o.top_k > 0 && o.top_k < l.numel()) {
        at::Tensor kth = std::get<0>(at::topk(l, o.top_k)).min();
        l = l.masked_fill(l < kth, -std::numeric_limits<float>::infinity());
      }
      next = at::multinomial(at::softmax(l, -1), 1, /*replacement=*/false, gen);
    }
    s.world()->broadcast(next, 0, "example.sample")->wait();
    tokens.push_back(next.item<int64_t>());
    out.push_back(static_cast<char>(tokens.back()));
  }
  model->train();
  return prompt + out;
}

int run(zs::Session& s, const zs::Run& run) {
  const std::optional<zs::TrainStart> start = zs::start_training(s, run, kUsage);
  if (!start) return 0;  // --help
  const zs::RunOptions& o = run.options;
  const int64_t seq_len = o.model.seq_len;

  // 1. Data, before any model memory: a missing corpus fails here. (Memory phases label what each
  // allocation is for in memory summaries and out-of-memory reports, docs/memory.md.)
  zs::set_memory_phase(zs::memory_phase_id("dataset, loaded into memory"));
  const std::string path = o.data.path.empty() ? zs::kFortunesDir : o.data.path;
  const zs::TextCorpus corpus = zs::load_text_corpus(path, o.data.val_fraction);
  auto train_set = std::make_shared<zs::TokenWindowDataset>(corpus.train, seq_len);
  auto val_set = std::make_shared<zs::TokenWindowDataset>(corpus.val, seq_len);

  // 2. The model, sharded block by block as it is built (the same initial weights on every rank).
  // With LoRA (lora.rank > 0) each block gets its adapters as it is sharded (the rest frozen; with
  // precision.frozen_linear = NF4 its Linear weights are quantised then): both are unit hooks in
  // o.sharding, and the engine adapts what lies outside the blocks: the whole base never exists
  // on a rank.
  zs::set_memory_phase(zs::memory_phase_id("model construction"));
  const bool lora = o.lora.rank > 0;
  auto init = std::make_unique<zs::ShardedInit>(s, o.sharding);
  at::manual_seed(o.session.seed);
  zm::GptOptions model_options = o.model;
  model_options.device = s.device();
  zm::Gpt model(model_options);
  auto engine_ptr = std::make_unique<zs::ShardingEngine>(*init, model.ptr());
  zs::ShardingEngine& engine = *engine_ptr;
  std::string lora_line;
  if (lora) {
    const std::vector<std::string> adapted = zs::lora::adapted_layers(*model);
    lora_line = "LoRA: rank " + std::to_string(o.lora.rank) + ", alpha " + zs::format_double(o.lora.alpha) +
                ", dropout " + zs::format_double(o.lora.dropout) + " on " + std::to_string(adapted.size()) +
                " layers (" + adapted.front() + (adapted.size() > 1 ? ", ..." : "") + "); the rest frozen";
  }
  zs::set_memory_phase(0);

  // 3. Train (from model.init_from's weights if set), evaluating the validation loss before, every
  // train.eval_interval steps and at the end; then 4. sample.
  zs::Trainer trainer(s, engine, *start);
  zs::TrainTask task;
  task.name = "train_gpt";
  task.train = train_set;
  task.loss = [&](const zs::Batch& b) { return lm_loss(model->forward(b.data), b.target); };
  task.eval.data = val_set;
  task.eval.metrics = {{"val_loss", "validation loss"}};
  task.eval.per_sample = [&](const zs::Batch& b) {
    return std::vector<at::Tensor>{per_window_loss(model->forward(b.data), b.target)};
  };
  task.sample_noun = "sequences x " + std::to_string(seq_len) + " tokens";
  task.items = "tok";
  task.items_per_sample = seq_len;
  const zm::GptOptions& m = o.model;
  std::ostringstream model_line, data_line;
  model_line << "model: " << m.n_layer << " layers, d_model " << m.d_model << ", " << m.n_head << " heads, context "
             << seq_len << ", vocab " << m.vocab_size << ", dropout " << m.dropout << ", activation checkpointing "
             << (m.checkpointing.enabled ? "every " + std::to_string(m.checkpointing.every_n_blocks) + " block(s)"
                                         : std::string("off"));
  data_line << "data: " << path << ": " << corpus.files.size() << " file(s), " << corpus.train.numel()
            << " train bytes (" << train_set->size() << " windows), " << corpus.val.numel() << " validation bytes ("
            << val_set->size() << " windows)";
  task.describe = {model_line.str(), data_line.str()};
  if (lora) task.describe.push_back(lora_line);
  task.after_training = [&] {
    if (o.sample.tokens == 0) return;
    const std::string text = generate(s, engine, model, o.sample);
    if (s.rank() != 0) return;
    std::printf("--- sample: %d bytes, temperature %g, top-k %d, seed %lld ---\n%s\n--- end of sample ---\n",
                o.sample.tokens, o.sample.temperature, o.sample.top_k, static_cast<long long>(o.sample.seed),
                text.c_str());
  };
  return trainer.fit(task).exit_status;
}

}  // namespace

int main(int argc, char** argv) {
  const zs::Program program{"train_gpt",
                            {zs::keys::engine(), zs::keys::adapters(), zs::keys::trainer(),
                             {"model", "activation_checkpointing", "data.path", "data.val_fraction", "sample"}}};
  return zs::run_main(argc, argv, program, run);
}
