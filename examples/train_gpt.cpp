// train_gpt: a GPT-style byte-level language model trained with zeroshard on the fortunes corpus.
//
//   mpirun -n 2 build/bin/train_gpt [--config FILE] [--set key=value ...] [--metrics-out FILE]
//                                   [--check-loss-decreases]
//
// Everything else comes from the config (docs/config.md): model.* (shape), data.* (corpus, loader),
// train.* (steps, global batch, micro-batches, evaluation), optimizer.*, scheduler.*, precision.*
// (mixed precision, loss scaling), activation_checkpointing.*, sharding.* (FULL_SHARD by default),
// sample.* (the text generated at the end). The steps:
//   1. read the corpus (a missing one is an error naming the path and the Debian package) and hold
//      out data.val_fraction of every file for validation;
//   2. build the model under a ShardedInit: each block is initialised and sharded as it is built;
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
#include <sstream>

#include "common/report.h"
#include "zeroshard/core/config.h"
#include "common/training.h"
#include "gpt/gpt_model.h"
#include "zeroshard/base/error.h"
#include "zeroshard/core/host_memory.h"
#include "zeroshard/core/main.h"
#include "zeroshard/core/memory_report.h"
#include "zeroshard/train/text.h"
#include "zeroshard/sharding/sharded_init.h"

namespace zs = zeroshard;
namespace ex = zs_examples;

namespace {

constexpr const char* kUsage =
    "usage: mpirun -n N train_gpt [--config FILE] [--set key=value ...] [--metrics-out FILE] "
    "[--check-loss-decreases] [--resume] [--memory-trial] [--memory-summary]; config keys: docs/config.md (checkpoint.dir, offload.*)";

at::Tensor lm_loss(const at::Tensor& logits, const at::Tensor& targets) {
  return torch::nn::functional::cross_entropy(logits.to(at::kFloat).reshape({-1, logits.size(-1)}),
                                              targets.reshape({-1}));
}

// Mean loss per token over the first `samples` windows of `data`, each counted once (the padding
// the sampler adds so every rank runs as many forwards is weighted 0). Collective.
double evaluate(zs::Session& s, zs::ShardingEngine& engine, ex::Gpt& model, std::shared_ptr<const zs::Dataset> data,
                int64_t samples, int64_t batch, const zs::Config& cfg) {
  zs::DistributedSampler sampler(samples, s.world_size(), s.rank(), {/*shuffle=*/false, 0, /*drop_last=*/false});
  zs::DataLoader loader(std::move(data), ex::loader_options(cfg, batch, /*drop_last=*/false, s.device()));
  loader.start(sampler.indices());
  const int64_t max_batches = cfg.train().eval_batches();
  double sum = 0, count = 0;
  model->eval();
  {
    torch::NoGradGuard no_grad;
    int64_t position = 0;  // in this rank's list of sample indices
    for (int64_t k = 0; max_batches == 0 || k < max_batches; ++k) {
      c10::optional<zs::Batch> b = loader.next();
      if (!b) break;
      at::Tensor logits = engine.forward([&] { return model->forward(b->data); });
      at::Tensor per_token = torch::nn::functional::cross_entropy(
          logits.reshape({-1, logits.size(-1)}), b->target.reshape({-1}),
          torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
      at::Tensor per_sample = per_token.view({b->size(), -1}).mean(1).to(at::kDouble).cpu();
      at::Tensor keep = at::arange(b->size(), at::kLong) + position < sampler.num_unique_samples();
      sum += per_sample.masked_select(keep).sum().item<double>();
      count += keep.sum().item<double>();
      position += b->size();
    }
  }
  model->train();
  auto totals = ex::all_reduce_sum(s, {sum, count}, "example.eval");
  ZS_REQUIRE(totals[1] > 0, zs::DataError, "the validation set is empty");
  return totals[0] / totals[1];
}

// Continues the prompt by `cfg.tokens()` bytes. Every rank runs the forward (the sharded model
// needs all of them); rank 0 draws each byte and broadcasts it. Collective.
std::string generate(zs::Session& s, zs::ShardingEngine& engine, ex::Gpt& model, const zs::config::SampleConfig& cfg) {
  std::string prompt = cfg.prompt().empty() ? std::string("\n") : cfg.prompt();
  at::Tensor encoded = zs::ByteTokenizer::encode(prompt);
  std::vector<int64_t> tokens(encoded.data_ptr<int64_t>(), encoded.data_ptr<int64_t>() + encoded.numel());
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(cfg.seed());
  const int64_t context = model->options.seq_len;
  std::string out;
  model->eval();
  torch::NoGradGuard no_grad;
  for (int i = 0; i < cfg.tokens(); ++i) {
    const auto first = tokens.end() - std::min<int64_t>(context, static_cast<int64_t>(tokens.size()));
    at::Tensor ctx = at::tensor(std::vector<int64_t>(first, tokens.end()), at::kLong).view({1, -1}).to(s.device());
    at::Tensor logits = engine.forward([&] { return model->forward(ctx); });
    at::Tensor next = at::zeros({1}, at::kLong);
    if (s.rank() == 0) {
      // Only the 256 byte values: padded vocabulary entries never occur in the data.
      at::Tensor l = logits[0][-1].narrow(0, 0, zs::ByteTokenizer::kVocabSize).to(at::kFloat).cpu() / cfg.temperature();
      if (cfg.top_k() > 0 && cfg.top_k() < l.numel()) {
        at::Tensor kth = std::get<0>(at::topk(l, cfg.top_k())).min();
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

int run(zs::Session& s) {
  const std::optional<ex::ExampleStart> started = ex::start_example(s, kUsage, /*accuracy_flag=*/false);
  if (!started) return 0;  // --help
  const ex::ExampleArgs& args = started->args;
  const ex::BatchPlan& plan = started->plan;
  const zs::Config& cfg = s.config();
  const int64_t seq_len = cfg.model().seq_len();

  // 1. Data, before any model memory: a missing corpus fails here. (Memory phases label what each
  // allocation is for in memory summaries and out-of-memory reports, docs/memory.md.)
  zs::set_memory_phase(zs::memory_phase_id("dataset, loaded into memory"));
  const std::string path = cfg.data().path().empty() ? zs::kFortunesDir : cfg.data().path();
  const zs::TextCorpus corpus = zs::load_text_corpus(path, cfg.data().val_fraction());
  auto train_set = std::make_shared<zs::TokenWindowDataset>(corpus.train, seq_len);
  auto val_set = std::make_shared<zs::TokenWindowDataset>(corpus.val, seq_len);
  auto limit = [](int64_t n, int64_t lim) { return lim > 0 ? std::min(n, lim) : n; };
  const int64_t train_samples = limit(train_set->size(), cfg.data().limit_train_samples());
  const int64_t val_samples = limit(val_set->size(), cfg.data().limit_eval_samples());
  ex::BatchStream stream(train_set, train_samples, s, cfg, plan.micro_batch_size);
  const int64_t steps_per_epoch = stream.batches_per_epoch() / plan.micro_batches;
  ZS_REQUIRE(steps_per_epoch > 0 || cfg.train().steps() > 0, zs::ConfigError, "one epoch holds ",
             stream.batches_per_epoch(), " micro-batches per rank, fewer than train.micro_batches = ",
             plan.micro_batches, "; set train.steps or use more data");
  const int64_t steps = cfg.train().steps() > 0 ? cfg.train().steps() : cfg.train().epochs() * steps_per_epoch;

  // 2. The model, sharded block by block as it is built.
  zs::set_memory_phase(zs::memory_phase_id("model construction"));
  const zs::ShardingOptions sharding = zs::ShardingOptions::from_config(cfg.sharding(), cfg.precision());
  zs::ShardedInit init(s, sharding);
  ex::seed_model_init(cfg);
  ex::Gpt model(ex::GptOptions::from_config(cfg, s.device()));
  zs::ShardingEngine engine(init, model.ptr());
  ex::seed_training(cfg, s.rank());
  zs::set_memory_phase(0);
  ex::Trainer trainer(s, engine, cfg);
  // One micro-batch: the next batch of this rank's stream through the sharded model.
  auto micro_loss = [&](int) {
    zs::Batch b = stream.next();
    return engine.forward([&] { return lm_loss(model->forward(b.data), b.target); });
  };
  if (args.memory_trial) return ex::run_memory_trial(s, trainer, plan, micro_loss);

  ex::ReportOptions ro;
  ro.total_steps = steps;
  ro.items_name = "tok";
  ro.log_interval = cfg.train().log_interval();
  ro.metrics_path = args.metrics_out;
  ro.reduce_dtype = sharding.reduce_dtype;
  ex::TrainingReport report(s, engine, ro);
  {
    const auto& m = cfg.model();
    std::ostringstream os;
    os << "train_gpt: " << s.world_size() << " rank(s) on " << s.device().str() << ", "
       << zs::config::ShardingConfig::Strategy_Name(cfg.sharding().strategy()) << ", "
       << ex::describe_precision(sharding) << ", activation checkpointing "
       << (cfg.activation_checkpointing().enabled()
               ? "every " + std::to_string(cfg.activation_checkpointing().every_n_blocks()) + " block(s)"
               : std::string("off"))
       << "\n  model: " << m.n_layer() << " layers, d_model " << m.d_model() << ", " << m.n_head() << " heads, context "
       << seq_len << ", vocab " << m.vocab_size() << ", dropout " << m.dropout() << ": "
       << ex::format_params(engine.num_params()) << " parameters\n  data: " << path << ": " << corpus.files.size()
       << " file(s), " << corpus.train.numel() << " train bytes (" << train_samples << " windows), "
       << corpus.val.numel() << " validation bytes (" << val_samples << " windows)\n  batch: " << plan.global_batch
       << " sequences x " << seq_len << " tokens per step (" << plan.micro_batch_size << " per rank x "
       << plan.micro_batches << " micro-batch(es)); " << steps << " steps; " << trainer.optimizer().describe()
       << ", " << trainer.scheduler().describe();
    report.note(os.str());
  }

  // 3. Train, evaluating before, every eval_interval steps, and at the end.
  // Evaluation runs micro-batches too: the size training showed fits (zeroshard-launch
  // --auto-micro-batches picks it), and without gradients it needs less memory than training.
  const int64_t eval_batch = plan.micro_batch_size;
  auto eval_now = [&](int64_t step) {
    const double loss = evaluate(s, engine, model, val_set, val_samples, eval_batch, cfg);
    char text[96];
    std::snprintf(text, sizeof(text), "step %lld: val loss %.4f", static_cast<long long>(step), loss);
    report.eval(step, "val_loss", loss, text);
    return loss;
  };
  const int64_t start = args.resume ? trainer.resume(stream) : 0;
  if (start > 0) report.note("resumed at step " + std::to_string(start));
  const double initial_val = eval_now(start);
  double last_loss = 0;
  for (int64_t step = start; step < steps; ++step) {
    auto r = trainer.step(micro_loss);
    last_loss = r.loss;
    report.step(step + 1, r.loss, r.lr, plan.global_batch * seq_len, r.seconds);
    const int64_t every = cfg.train().eval_interval();
    if (every > 0 && (step + 1) % every == 0 && step + 1 < steps) eval_now(step + 1);
    trainer.save_if_due(stream, step + 1 == steps);
  }
  report.finish_progress();
  const double final_val = eval_now(steps);
  const double tokens_per_s = trainer.train_seconds() > 0
                                  ? static_cast<double>(steps * plan.global_batch * seq_len) / trainer.train_seconds()
                                  : 0;

  // 4. Sample.
  if (cfg.sample().tokens() > 0) {
    const std::string text = generate(s, engine, model, cfg.sample());
    std::ostringstream os;
    os << "--- sample: " << cfg.sample().tokens() << " bytes, temperature " << cfg.sample().temperature() << ", top-k "
       << cfg.sample().top_k() << ", seed " << cfg.sample().seed() << " ---\n"
       << text << "\n--- end of sample ---";
    report.note(os.str());
  }
  char summary[256];
  std::snprintf(summary, sizeof(summary),
                "done: %lld steps in %.1f s of training, %.0f tokens/s; val loss %.4f -> %.4f; last train loss %.4f",
                static_cast<long long>(steps), trainer.train_seconds(), tokens_per_s, initial_val, final_val,
                last_loss);
  report.summary({{"steps", static_cast<double>(steps)},
                  {"train_seconds", trainer.train_seconds()},
                  {"tokens_per_s", tokens_per_s},
                  {"initial_val_loss", initial_val},
                  {"final_val_loss", final_val},
                  {"final_train_loss", last_loss},
                  {"skipped_steps", static_cast<double>(trainer.scaler().skipped_steps())}},
                 summary);
  if (args.memory_summary && s.rank() == 0) std::printf("%s", zs::memory_summary().c_str());
  if (args.check_loss_decreases) {
    const bool ok = final_val < 0.9 * initial_val;
    if (s.rank() == 0) {
      std::printf("CHECK %s: validation loss %.4f -> %.4f (%s 90%% of the initial value)\n", ok ? "PASSED" : "FAILED",
                  initial_val, final_val, ok ? "below" : "not below");
    }
    return ok ? 0 : 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return zs::run_main(argc, argv, run); }
