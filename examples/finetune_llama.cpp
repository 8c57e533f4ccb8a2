// SPDX-License-Identifier: Apache-2.0
// finetune_llama: fine-tunes a Llama-family Hugging Face model directory (config.json, the weights,
// the tokenizer files with their chat template) on JSONL data, fully sharded over the job's ranks.
//
//   mpirun -n 2 build/bin/finetune_llama MODEL_DIR --data chat.jsonl --seq-len 512 --global-batch 16
//       --steps 200 --lora-rank 8 [--nf4] --ckpt-dir ckpt --save-every 50 [--resume auto]
//   -> step 1 loss 2.71828183 samples [12, 40, 3, ...] time 1.2345 s   (one line per step, from rank 0)
//
// Records are {"text"}, {"prompt", "completion"} (the prompt untrained) or {"messages"} (rendered
// by the tokenizer's chat template, only assistant turns trained); each rank tokenizes them into
// token shards of its own (data/corpus_builder.h), or --data names a folder of shards that
// `zeroshard-data shards --tokenizer MODEL_DIR` made once; packed into samples of --seq-len tokens that
// keep the loss mask and never attend across documents (train/lm_data.h, data/packing.h). Every step trains on
// --global-batch samples of one global order (data/rank_stream.h), its loss the mean NLL over the
// global batch's trained tokens whatever the ranks and micro-batches. Checkpoints store the data
// position, so --resume continues with exactly the samples an uninterrupted run would have seen,
// at any number of ranks (with the same global batch). SIGTERM or SIGUSR1 (a scheduler's warning)
// stops every rank after the same step with a checkpoint and exit status 128 + the signal; the same
// command with --resume auto continues. Exports: zeroshard-ckpt export --format hf|peft|gguf on
// the checkpoint directory.

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "zeroshard/adapt/nf4.h"
#include "zeroshard/base/cli.h"
#include "zeroshard/base/error.h"
#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/core/main.h"
#include "zeroshard/core/session.h"
#include "zeroshard/data/rank_stream.h"
#include "zeroshard/data/shard_manifest.h"
#include "zeroshard/engine/engine.h"
#include "zeroshard/engine/sharded_init.h"
#include "zeroshard/models/hf_checkpoint.h"
#include "zeroshard/models/llama.h"
#include "zeroshard/models/lm_batch.h"
#include "zeroshard/text/tokenizer.h"
#include "zeroshard/train/lm_data.h"
#include "zeroshard/train/stop_signals.h"

namespace zs = zeroshard;
namespace zd = zeroshard::data;
namespace zm = zeroshard::models;
namespace fs = std::filesystem;

namespace {

struct Args {
  std::string model, ckpt_dir, resume, lora_targets = "q_proj,v_proj";
  std::vector<std::string> data;
  int64_t seq_len = 512, global_batch = 8, steps = 100, save_every = 0, lora_rank = 0, seed = 0;
  int micro_batches = 1;
  double lr = 1e-4, weight_decay = 0, lora_alpha = 16, stop_deadline = 0;
  bool no_shuffle = false, nf4 = false;
};

void check_args(zs::cli::App& app, const Args& a) {
  for (const std::string& f : a.data) {
    if (!fs::exists(f)) app.fail("--data '" + f + "': no such file or folder");
  }
  if (a.data.empty()) app.fail("give the training data with --data FILE.jsonl");
  if (a.save_every > 0 && a.ckpt_dir.empty()) app.fail("--save-every needs --ckpt-dir");
  if (!a.resume.empty() && a.ckpt_dir.empty()) app.fail("--resume needs --ckpt-dir (where the resumed run saves)");
  if (a.lora_rank == 0 && (app.given("--lora-alpha") || app.given("--lora-targets"))) {
    app.fail("--lora-alpha and --lora-targets apply to LoRA: give --lora-rank");
  }
  if (a.nf4 && a.lora_rank == 0) {
    app.fail("--nf4 stores the frozen base weights in 4 bits: it needs LoRA adapters to train (--lora-rank N)");
  }
}

std::optional<Args> parse(const zs::Session& s) {
  Args a;
  zs::cli::App app("finetune_llama",
                   "Fine-tunes a Llama-family Hugging Face model directory on JSONL data ({\"text\"}, "
                   "{\"prompt\", \"completion\"} or {\"messages\"}) with its own tokenizer and chat template, "
                   "fully sharded over the job's ranks, with LoRA or all weights.");
  app.usage("mpirun -n N finetune_llama MODEL_DIR --data FILE.jsonl [OPTIONS]");
  app.add_text("MODEL_DIR", &a.model, "a Hugging Face model directory: config.json, the weights, tokenizer files",
               "DIR")->required();
  app.add_list("--data", &a.data,
               "a JSONL file of records (repeatable; read in the order given), or a folder of token shards that "
               "zeroshard-data shards made with this model's tokenizer",
               "FILE|DIR");
  app.add_int("--seq-len", &a.seq_len, "tokens per packed sample (default 512)", 1);
  app.add_int("--global-batch", &a.global_batch, "samples per optimizer step over all ranks (default 8)", 1);
  app.add_int("--micro-batches", &a.micro_batches, "forward/backward passes per rank per step (default 1)", 1);
  app.add_int("--steps", &a.steps, "optimizer steps of the whole run, a resumed one included (default 100)", 1);
  app.add_number("--lr", &a.lr, "AdamW learning rate (default 1e-4)", 0);
  app.add_number("--weight-decay", &a.weight_decay, "AdamW decoupled weight decay (default 0)", 0);
  app.add_int("--seed", &a.seed, "seed of the data order and the adapters' initialisation (default 0)", 0);
  app.add_flag("--no-shuffle", &a.no_shuffle, "train on the samples in file order");
  app.add_int("--lora-rank", &a.lora_rank, "LoRA adapters of this rank, the base frozen (default 0: all weights)", 0);
  app.add_number("--lora-alpha", &a.lora_alpha, "the adapters' output is scaled by alpha / rank (default 16)", 0);
  app.add_text("--lora-targets", &a.lora_targets, "the layers that get adapters (default q_proj,v_proj)", "LIST");
  app.add_flag("--nf4", &a.nf4,
               "QLoRA: keep the frozen weights of the projections in 4-bit NF4 (needs --lora-rank); "
               "they are dequantised to fp32 when a layer runs");
  app.add_text("--ckpt-dir", &a.ckpt_dir, "where checkpoints are saved (at the end, and every --save-every steps)",
               "DIR");
  app.add_int("--save-every", &a.save_every, "save a checkpoint every N steps", 1);
  app.add_text("--resume", &a.resume, "auto (the newest checkpoint in --ckpt-dir, if any) or a checkpoint",
               "auto|PATH");
  app.add_number("--stop-deadline", &a.stop_deadline,
                 "after SIGTERM/SIGUSR1, exit with status 124 if stopping and saving takes longer (default 0: no "
                 "deadline)", 0);
  app.then([&] { check_args(app, a); });
  if (!app.parse(s.args(), s.rank() == 0)) return std::nullopt;
  return a;
}

// "q_proj,v_proj" -> {"*.q_proj", "*.v_proj"} (Hugging Face's module names inside any layer).
zs::lora::Options lora_options(const Args& a) {
  zs::lora::Options o;
  o.rank = a.lora_rank;
  o.alpha = a.lora_alpha;
  std::stringstream list(a.lora_targets);
  for (std::string t; std::getline(list, t, ',');) {
    ZS_REQUIRE(!t.empty(), zs::UsageError, "--lora-targets '", a.lora_targets, "' has an empty name");
    o.targets.push_back("*." + t);
  }
  return o;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  ZS_REQUIRE(in.good(), zs::IoError, "cannot read '", path, "'");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// What a checkpoint of this program stores besides the tensors.
constexpr const char* kDataKey = "finetune.data";
constexpr const char* kBatchKey = "finetune.global_batch";

// Loads the checkpoint --resume names (none for auto without one) and moves the stream to its data
// position; returns the completed steps.
int64_t resume(const Args& a, zs::Checkpointer& ckpt, zs::ShardedOptimizer& opt, zd::RankStream& stream) {
  std::string path = a.resume;
  if (a.resume == "auto") path = fs::exists(fs::path(a.ckpt_dir) / "latest") ? a.ckpt_dir : "";
  if (path.empty()) return 0;
  const zs::TrainingState st = ckpt.load(opt, path);
  const auto data = st.global.find(kDataKey), batch = st.global.find(kBatchKey);
  ZS_REQUIRE(data != st.global.end() && batch != st.global.end(), zs::CheckpointError, "checkpoint '", st.path,
             "' holds no data position (", kDataKey, "): it was not saved by finetune_llama");
  ZS_REQUIRE(batch->second == std::to_string(a.global_batch), zs::UsageError, "--resume: checkpoint '", st.path,
             "' was trained with --global-batch ", batch->second, ", this run has --global-batch ", a.global_batch,
             ": resuming the data exactly needs the same global batch");
  stream.restore_json(data->second);
  return st.step;
}

struct Step {
  double loss = 0;
  std::vector<int64_t> samples;  // the global batch's sample ids, in the global order
  int stop_signal = 0;           // a stop signal some rank received (the same on every rank); 0: none
};

// One optimizer step: every micro-batch's summed NLL scaled so that the gradients (averaged over
// the ranks by the engine) are those of the mean over the global batch's trained tokens.
Step train_step(zs::Session& s, zs::ShardingEngine& engine, zm::LlamaForCausalLM& model,
                zs::ShardedOptimizer& opt, zd::RankStream& stream, int micro_batches, int64_t step,
                const zs::StopSignals& stop) {
  std::vector<zm::LmBatch> batches;
  std::vector<int64_t> ids;
  double trained = 0;
  for (int m = 0; m < micro_batches; ++m) {
    const zd::SampleBatch b = stream.next_micro_batch();
    ids.insert(ids.end(), b.sample_ids.begin(), b.sample_ids.end());
    batches.push_back(zm::to_lm_batch(b, model->config().vocab_size, s.device()));
    trained += static_cast<double>(batches.back().trained);
  }
  at::Tensor totals = at::tensor(std::vector<double>{trained}, at::kDouble);
  s.world()->all_reduce(totals, zs::ReduceOp::kSum, "finetune.trained")->wait();
  const double global_trained = totals[0].item<double>();
  ZS_REQUIRE(global_trained > 0, zs::DataError, "step ", step,
             ": no sample of the global batch has a token to train on");
  const double scale = static_cast<double>(s.world_size()) / global_trained;
  double nll_sum = 0;
  for (const zm::LmBatch& b : batches) {
    const at::Tensor nll = engine.forward(
        [&] { return zm::next_token_nll(model->forward(b.ids, b.positions, b.documents), b.targets); });
    (nll.sum() * scale).backward();
    nll_sum += nll.detach().to(at::kDouble).sum().item<double>();
  }
  engine.step(opt);
  engine.zero_grad();
  // The loss all-reduce also carries who received which stop signal: every rank stops after the
  // same step.
  const int received = stop.received();
  std::vector<double> values = {nll_sum};
  for (int sig : stop.signals()) values.push_back(received == sig ? 1.0 : 0.0);
  at::Tensor sums = at::tensor(values, at::kDouble);
  s.world()->all_reduce(sums, zs::ReduceOp::kSum, "finetune.loss")->wait();
  int stop_signal = 0;
  for (size_t i = 0; i < stop.signals().size() && stop_signal == 0; ++i) {
    if (sums[static_cast<int64_t>(i) + 1].item<double>() > 0) stop_signal = stop.signals()[i];
  }
  at::Tensor all = at::empty({static_cast<int64_t>(ids.size()) * s.world_size()}, at::kLong);
  s.world()->all_gather_into(all, at::tensor(ids, at::kLong), "finetune.samples")->wait();
  return {sums[0].item<double>() / global_trained,
          std::vector<int64_t>(all.data_ptr<int64_t>(), all.data_ptr<int64_t>() + all.numel()), stop_signal};
}

// `seconds`: rank 0's wall time of the step: reading its samples, forward, backward, the optimizer
// step, and the collectives that end it (so the slowest rank's work is in it too).
void print_step(int64_t step, const Step& r, double seconds) {
  std::string ids;
  for (size_t i = 0; i < r.samples.size(); ++i) ids += (i ? ", " : "") + std::to_string(r.samples[i]);
  std::printf("step %lld loss %.9f samples [%s] time %.4f s\n", static_cast<long long>(step), r.loss, ids.c_str(),
              seconds);
  std::fflush(stdout);
}

void save(zs::Checkpointer& ckpt, zs::ShardedOptimizer& opt, const zd::RankStream& stream, const Args& a,
          int64_t step, int rank) {
  zs::TrainingState st;
  st.step = step;
  st.global[kDataKey] = stream.state_json();
  st.global[kBatchKey] = std::to_string(a.global_batch);
  const std::string dir = ckpt.save(opt, st);
  if (rank == 0) std::printf("saved %s\n", dir.c_str());
}

int run(zs::Session& s) {
  const std::optional<Args> args = parse(s);
  if (!args) return 0;
  const Args& a = *args;
  // Intra-op threads: this host's cores shared by its ranks (as the training library's programs do;
  // the Session shares OpenBLAS's the same way), not every core in every rank.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  at::set_num_threads(std::max(1, static_cast<int>(cores) / std::max(1, s.local_world_size())));
  const zm::LlamaConfig cfg = zm::LlamaConfig::read(a.model);
  ZS_REQUIRE(a.seq_len <= cfg.max_position_embeddings, zs::UsageError, "--seq-len ", a.seq_len,
             " exceeds the model's max_position_embeddings of ", cfg.max_position_embeddings, " (", cfg.path, ")");
  cfg.check_sequence_length(a.seq_len);
  const std::unique_ptr<zs::text::Tokenizer> tok = zs::text::load_tokenizer(a.model);
  // JSONL tokenized by every rank into a folder of its own (removed at exit), or a shard set.
  const zs::TokenizedCorpus shards({a.data, a.model, cfg.vocab_size, a.seq_len, s.rank(), s.local_world_size(), "--data"},
                                   *tok);
  const std::shared_ptr<const zd::SampleSource> samples = shards.packed(a.seq_len);
  zd::RankStream stream(samples, {a.global_batch, a.micro_batches, !a.no_shuffle, static_cast<uint64_t>(a.seed)},
                        s.rank(), s.world_size());
  if (s.rank() == 0) {
    const zd::ShardManifest& r = shards.manifest();
    std::printf("data: %lld documents, %lld tokens (%lld trained), %lld samples of %lld tokens, %lld steps per epoch\n",
                static_cast<long long>(r.documents), static_cast<long long>(r.tokens),
                static_cast<long long>(r.trained_tokens), static_cast<long long>(samples->num_samples()),
                static_cast<long long>(a.seq_len), static_cast<long long>(stream.steps_per_epoch()));
  }
  torch::manual_seed(static_cast<uint64_t>(a.seed));  // the adapters' initialisation (broadcast from rank 0)
  zs::ShardingOptions sharding;
  const std::optional<zs::lora::Options> lora =
      a.lora_rank > 0 ? std::optional<zs::lora::Options>(lora_options(a)) : std::nullopt;
  if (lora) sharding.unit_hooks.push_back(zs::lora::unit_hook(*lora));
  // After LoRA's hook: the frozen base weight of every adapted projection (and every projection
  // without adapters, frozen too) is quantised as the HF weights are loaded into its shard.
  if (a.nf4) sharding.unit_hooks.push_back(zs::nf4::frozen_linear_hook());
  zs::ShardedInit init(s, sharding);
  zm::LlamaForCausalLM model(zm::LlamaOptions{cfg, s.device()});
  zs::ShardingEngine engine(init, model.ptr());
  zm::load_hf_weights(engine, cfg, a.model);
  zs::AdamOptions ao;
  ao.lr = a.lr;
  ao.weight_decay = a.weight_decay;
  const std::unique_ptr<zs::ShardedOptimizer> opt = zs::make_adamw(ao);
  std::unique_ptr<zs::Checkpointer> ckpt;
  if (!a.ckpt_dir.empty()) {
    zs::CheckpointOptions co;
    co.dir = a.ckpt_dir;
    co.model = {read_text(cfg.path), lora};
    ckpt = std::make_unique<zs::Checkpointer>(engine, co);
  }
  int64_t step = a.resume.empty() ? 0 : resume(a, *ckpt, *opt, stream);
  if (s.rank() == 0 && step > 0) std::printf("resumed at step %lld\n", static_cast<long long>(step));
  model->train();
  // SIGTERM / SIGUSR1: stop after the step, with a checkpoint (within --stop-deadline seconds).
  const zs::StopSignals stop({SIGTERM, SIGUSR1}, a.stop_deadline, "rank " + std::to_string(s.rank()));
  while (step < a.steps) {
    const auto started = std::chrono::steady_clock::now();
    const Step r = train_step(s, engine, model, *opt, stream, a.micro_batches, step + 1, stop);
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - started;
    ++step;
    if (s.rank() == 0) print_step(step, r, took.count());
    const bool due = (a.save_every > 0 && step % a.save_every == 0) || step == a.steps;
    if (ckpt && (due || (r.stop_signal != 0 && step < a.steps))) save(*ckpt, *opt, stream, a, step, s.rank());
    if (r.stop_signal != 0 && step < a.steps) {
      if (s.rank() == 0) {
        std::printf("stopped by %s after step %lld of %lld: %s\n", zs::signal_name(r.stop_signal).c_str(),
                    static_cast<long long>(step), static_cast<long long>(a.steps),
                    ckpt ? "run again with --resume auto to continue" : "no --ckpt-dir, so nothing was saved");
        std::fflush(stdout);
      }
      return 128 + r.stop_signal;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return zs::run_main(argc, argv, run); }
