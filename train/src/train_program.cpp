// SPDX-License-Identifier: Apache-2.0
// zeroshard-train (train_program.h): the Program for a config, and the run for each model kind.

#include "zeroshard/train/train_program.h"

#include <ATen/ops/argmax.h>
#include <ATen/ops/cross_entropy_loss.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "zeroshard/adapt/lora.h"
#include "zeroshard/base/error.h"
#include "zeroshard/base/format.h"
#include "zeroshard/core/host_memory.h"
#include "zeroshard/config/resolve.h"
#include "zeroshard/core/session.h"
#include "zeroshard/data/shard_manifest.h"
#include "zeroshard/engine/engine.h"
#include "zeroshard/engine/sharded_init.h"
#include "zeroshard/models/gpt.h"
#include "zeroshard/models/hf_checkpoint.h"
#include "zeroshard/models/llama.h"
#include "zeroshard/models/torchscript.h"
#include "zeroshard/text/tokenizer.h"
#include "zeroshard/train/generate.h"
#include "zeroshard/train/images.h"
#include "zeroshard/train/lm_data.h"
#include "zeroshard/train/text.h"
#include "zeroshard/train/trainer.h"

namespace zeroshard {

namespace fs = std::filesystem;

namespace {

constexpr const char* kUsage =
    "Trains a model with zeroshard: the built-in GPT (model.path empty), a Llama-family Hugging Face model "
    "directory, or a TorchScript file (model.path), on text bytes, JSONL records, token shards or Fashion-MNIST "
    "images (data.path, data.format). Every setting comes from the config (docs/train.md, docs/config.md).";

const ProgramFlag kExportFlag{"--export", true, "FILE.pt",
                               "TorchScript models: the trained module written there (torch.jit.load reads it)"};
const ProgramFlag kMinAccuracyFlag{"--min-accuracy", true, "X",
                                   "images: exit 1 unless the final test accuracy is at least X (a fraction)",
                                   ProgramFlag::Type::kNumber, 0, 1};

// A program flag's value, or "" when it was not given.
std::string flag_value(const TrainStart& start, const ProgramFlag& flag) {
  const auto it = start.flags.program.find(flag.name);
  return it == start.flags.program.end() ? std::string() : it->second;
}

const char* format_name(DataFormat f) {
  switch (f) {
    case DataFormat::kAuto: return "AUTO";
    case DataFormat::kBytes: return "BYTES";
    case DataFormat::kTokenShards: return "TOKEN_SHARDS";
    case DataFormat::kJsonl: return "JSONL";
    case DataFormat::kImages: return "IMAGES";
  }
  return "?";
}

const char* kind_name(ModelKind k) {
  switch (k) {
    case ModelKind::kGpt: return "the built-in GPT (model.path empty)";
    case ModelKind::kHuggingFace: return "a Hugging Face model";
    case ModelKind::kTorchScript: return "a TorchScript model";
  }
  return "?";
}

at::Tensor mean_cross_entropy(const at::Tensor& logits, const at::Tensor& targets) {
  return at::cross_entropy_loss(logits.to(at::kFloat).reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

// The mean loss per item (token or image) of every sample of the batch, fp32 [N].
at::Tensor per_sample_cross_entropy(const at::Tensor& logits, const at::Tensor& targets) {
  const at::Tensor per_item = at::cross_entropy_loss(logits.to(at::kFloat).reshape({-1, logits.size(-1)}),
                                                     targets.reshape({-1}), {}, at::Reduction::None);
  return per_item.view({targets.size(0), -1}).mean(1);
}

// The header line's name: the program's file name (zeroshard-train, train_gpt).
std::string program_name(const Run& run) {
  const std::string argv0 = run.args.empty() ? std::string("zeroshard-train") : run.args.front();
  return fs::path(argv0).filename().string();
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  ZS_REQUIRE(in.good(), IoError, "cannot read '", path, "'");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string checkpointing_line(bool enabled, int every, const char* what) {
  return enabled ? "every " + std::to_string(every) + " " + what : std::string("off");
}

// Byte text for a language model: data.path (default: the fortunes corpus), data.val_fraction held out.
struct ByteData {
  std::shared_ptr<TokenWindowDataset> train, val;
  std::string line;
};
ByteData byte_data(const DataOptions& d, int64_t seq_len) {
  set_memory_phase(memory_phase_id("dataset, loaded into memory"));
  const std::string path = d.path.empty() ? kFortunesDir : d.path;
  const TextCorpus corpus = load_text_corpus(path, d.val_fraction);
  ByteData out;
  out.train = std::make_shared<TokenWindowDataset>(corpus.train, seq_len);
  out.val = std::make_shared<TokenWindowDataset>(corpus.val, seq_len);
  out.line = "data: " + path + ": " + std::to_string(corpus.files.size()) + " file(s), " +
             std::to_string(corpus.train.numel()) + " train bytes (" + std::to_string(out.train->size()) +
             " windows), " + std::to_string(corpus.val.numel()) + " validation bytes (" +
             std::to_string(out.val->size()) + " windows)";
  set_memory_phase(0);
  return out;
}

void set_byte_lm_task(TrainTask& task, const ByteData& data, int64_t seq_len,
                      const std::function<at::Tensor(const at::Tensor&)>& forward) {
  task.train = data.train;
  task.loss = [forward](const Batch& b) { return mean_cross_entropy(forward(b.data), b.target); };
  task.eval.data = data.val;
  task.eval.metrics = {{"val_loss", "validation loss"}};
  task.eval.per_sample = [forward](const Batch& b) {
    return std::vector<at::Tensor>{per_sample_cross_entropy(forward(b.data), b.target)};
  };
  task.sample_noun = "sequences x " + std::to_string(seq_len) + " tokens";
  task.items = "tok";
  task.items_per_sample = seq_len;
}

// Rank 0 prints the sample: `text` after its header line.
void print_sample(const Session& s, const SampleOptions& o, const std::string& unit, const std::string& text) {
  if (s.rank() != 0) return;
  std::printf("--- sample: %d %s, temperature %g, top-k %d, seed %llu ---\n%s\n--- end of sample ---\n", o.tokens,
              unit.c_str(), o.temperature, o.top_k, static_cast<unsigned long long>(o.seed), text.c_str());
  std::fflush(stdout);
}

// Byte-level sampling after training: the prompt (a newline when empty) and what follows it.
std::function<void()> byte_sampler(Session& s, ShardingEngine& engine, torch::nn::Module& model, int64_t context,
                                   const SampleOptions& o, std::function<at::Tensor(const at::Tensor&)> forward) {
  return [&s, &engine, &model, context, o, forward] {
    if (o.tokens == 0) return;
    const std::string prompt = o.prompt.empty() ? std::string("\n") : o.prompt;
    const at::Tensor encoded = ByteTokenizer::encode(prompt);
    std::vector<int64_t> ids(encoded.data_ptr<int64_t>(), encoded.data_ptr<int64_t>() + encoded.numel());
    model.eval();
    const std::vector<int64_t> drawn = sample_tokens(s, ids, context, ByteTokenizer::kVocabSize, o,
                                                     [&](const at::Tensor& ctx) {
                                                       return engine.forward([&] { return forward(ctx); });
                                                     });
    model.train();
    std::string text = prompt;
    for (int64_t t : drawn) text.push_back(static_cast<char>(t));
    print_sample(s, o, "bytes", text);
  };
}

std::string lora_line(const lora::Options& o, const std::vector<std::string>& adapted) {
  return "LoRA: rank " + std::to_string(o.rank) + ", alpha " + format_double(o.alpha) + ", dropout " +
         format_double(o.dropout) + " on " + std::to_string(adapted.size()) + " layers (" +
         (adapted.empty() ? std::string("none") : adapted.front() + (adapted.size() > 1 ? ", ..." : "")) +
         "); the rest frozen";
}

// ---- the built-in GPT ---------------------------------------------------------------------

int train_gpt(Session& s, const Run& run, TrainStart start) {
  const RunOptions& o = run.options;
  const int64_t seq_len = o.model.seq_len;
  const ByteData data = byte_data(o.data, seq_len);
  set_memory_phase(memory_phase_id("model construction"));
  auto init = std::make_unique<ShardedInit>(s, o.sharding);
  at::manual_seed(o.session.seed);
  models::GptOptions mo = o.model;
  mo.device = s.device();
  models::Gpt model(mo);
  ShardingEngine engine(*init, model.ptr());
  set_memory_phase(0);
  // Checkpoints record the adapters' rank and alpha: zeroshard-ckpt merges them on export.
  if (o.lora.rank > 0) start.run.checkpoint.model.lora = o.lora;
  Trainer trainer(s, engine, start);
  TrainTask task;
  task.name = program_name(run);
  const auto forward = [&model](const at::Tensor& x) { return model->forward(x); };
  set_byte_lm_task(task, data, seq_len, forward);
  std::ostringstream m;
  m << "model: GPT, " << mo.n_layer << " layers, d_model " << mo.d_model << ", " << mo.n_head << " heads, context "
    << seq_len << ", vocab " << mo.vocab_size << ", dropout " << mo.dropout << ", activation checkpointing "
    << checkpointing_line(mo.checkpointing.enabled, mo.checkpointing.every_n_blocks, "block(s)");
  task.describe = {m.str(), data.line};
  if (o.lora.rank > 0) task.describe.push_back(lora_line(o.lora, lora::adapted_layers(*model)));
  task.after_training = byte_sampler(s, engine, *model, seq_len, o.sample, forward);
  return trainer.fit(task).exit_status;
}

// ---- a Llama-family Hugging Face model ------------------------------------------------------

int train_hf(Session& s, const Run& run, TrainStart start, DataFormat format) {
  const RunOptions& o = run.options;
  const std::string& dir = o.model_source.path;
  const models::LlamaConfig cfg = models::LlamaConfig::read(dir);
  const int64_t seq_len = o.model.seq_len;
  ZS_REQUIRE(seq_len <= cfg.max_position_embeddings, ConfigError, "model.seq_len = ", seq_len,
             " exceeds the model's max_position_embeddings of ", cfg.max_position_embeddings, " (", cfg.path, ")");
  cfg.check_sequence_length(seq_len);
  ZS_REQUIRE(!o.model.checkpointing.enabled || o.model.checkpointing.every_n_blocks == 1, ConfigError,
             "activation_checkpointing.every_n_blocks = ", o.model.checkpointing.every_n_blocks,
             ": a Hugging Face model recomputes every decoder layer when activation_checkpointing.enabled; "
             "leave every_n_blocks at 1");
  ZS_REQUIRE(!o.data.path.empty(), ConfigError, "data.path is empty: a Hugging Face model trains on JSONL records "
             "or a folder of token shards; set data.path");
  const std::unique_ptr<text::Tokenizer> tok = text::load_tokenizer(dir);
  set_memory_phase(memory_phase_id("dataset, loaded into memory"));
  ZS_REQUIRE(format != DataFormat::kTokenShards || data::is_shard_set(o.data.path), ConfigError,
             "data.format = TOKEN_SHARDS but data.path '", o.data.path, "' is not a folder of token shards");
  const TokenizedCorpus corpus({{o.data.path}, dir, cfg.vocab_size, seq_len, s.rank(), s.local_world_size()}, *tok);
  const std::shared_ptr<const data::SampleSource> samples = corpus.packed(seq_len);
  const int64_t n = samples->num_samples();
  const int64_t n_val = static_cast<int64_t>(static_cast<double>(n) * o.data.val_fraction);
  ZS_REQUIRE(n - n_val >= 1, DataError, "data.path '", o.data.path, "' packs into ", n, " samples of ", seq_len,
             " tokens, ", n_val, " of them held out by data.val_fraction = ", format_double(o.data.val_fraction),
             ": none is left to train on");
  auto train_set = std::make_shared<LmSampleDataset>(samples, 0, n - n_val, cfg.vocab_size);
  set_memory_phase(memory_phase_id("model construction"));
  ShardedInit init(s, o.sharding);
  at::manual_seed(o.session.seed);  // the adapters' initialisation, the same on every rank
  models::LlamaForCausalLM model(models::LlamaOptions{cfg, s.device(), o.model.checkpointing.enabled});
  ShardingEngine engine(init, model.ptr());
  models::load_hf_weights(engine, cfg, dir);
  set_memory_phase(0);
  // Checkpoints record the model's config.json and adapters: zeroshard-ckpt export reads them.
  start.run.checkpoint.model = {read_text(cfg.path), o.lora.rank > 0 ? std::optional<lora::Options>(o.lora)
                                                                     : std::nullopt};
  Trainer trainer(s, engine, start);
  TrainTask task;
  task.name = program_name(run);
  task.train = train_set;
  const auto forward = [&model](const Batch& b) { return model->forward(lm_ids(b), lm_positions(b), lm_documents(b)); };
  // The mean NLL over the global batch's trained tokens, whatever the ranks and micro-batches.
  task.loss = [forward](const Batch& b) { return lm_nll_sum(forward(b), b.target); };
  task.loss_items = [](const Batch& b) { return static_cast<double>(lm_trained_tokens(b)); };
  if (n_val > 0) {
    task.eval.data = std::make_shared<LmSampleDataset>(samples, n - n_val, n_val, cfg.vocab_size);
    task.eval.metrics = {{"val_loss", "validation loss"}};
    task.eval.per_sample = [forward](const Batch& b) {
      return std::vector<at::Tensor>{lm_per_sample_nll(forward(b), b.target)};
    };
  }
  task.sample_noun = "samples x " + std::to_string(seq_len) + " tokens";
  task.items = "tok";
  task.items_per_sample = seq_len;
  std::ostringstream m, d;
  m << "model: " << dir << " (" << cfg.model_type << "), " << cfg.num_hidden_layers << " layers, hidden "
    << cfg.hidden_size << ", vocab " << cfg.vocab_size << ", context " << seq_len << ", activation checkpointing "
    << (o.model.checkpointing.enabled ? "every layer" : "off");
  const data::ShardManifest& r = corpus.manifest();
  d << "data: " << o.data.path << " (" << format_name(format) << "): " << r.documents << " documents, " << r.tokens
    << " tokens (" << r.trained_tokens << " trained), " << train_set->size() << " training samples, " << n_val
    << " validation samples";
  task.describe = {m.str(), d.str()};
  if (o.lora.rank > 0) task.describe.push_back(lora_line(o.lora, lora::adapted_layers(*model)));
  task.after_training = [&] {
    const SampleOptions& so = o.sample;
    if (so.tokens == 0) return;
    std::vector<int32_t> prompt = tok->encode(so.prompt, /*add_special_tokens=*/true);
    if (prompt.empty() && tok->bos_id()) prompt.push_back(*tok->bos_id());
    if (prompt.empty() && tok->eos_id()) prompt.push_back(*tok->eos_id());
    ZS_REQUIRE(!prompt.empty(), ConfigError, "sample.prompt is empty and the tokenizer of '", dir,
               "' has no begin- or end-of-text token to start from: set sample.prompt or sample.tokens = 0");
    model->eval();
    const std::vector<int64_t> drawn =
        sample_tokens(s, std::vector<int64_t>(prompt.begin(), prompt.end()), seq_len, cfg.vocab_size, so,
                      [&](const at::Tensor& ctx) { return engine.forward([&] { return model->forward(ctx); }); });
    model->train();
    print_sample(s, so, "tokens", so.prompt + tok->decode(std::vector<int32_t>(drawn.begin(), drawn.end()), true));
  };
  return trainer.fit(task).exit_status;
}

// ---- a TorchScript model ------------------------------------------------------------------

int train_torchscript(Session& s, const Run& run, TrainStart start, DataFormat format,
                      const std::string& export_path, double required_accuracy) {
  const RunOptions& o = run.options;
  const std::string& path = o.model_source.path;
  TrainTask task;
  task.name = program_name(run);
  ByteData bytes;
  std::string data_line;
  if (format == DataFormat::kImages) {
    const std::string dir = o.data.path.empty() ? kFashionMnistDir : o.data.path;
    task.train = std::make_shared<ImageClassificationDataset>(load_fashion_mnist(dir, true), kFashionMnistMean,
                                                              kFashionMnistStd);
    task.eval.data = std::make_shared<ImageClassificationDataset>(load_fashion_mnist(dir, false), kFashionMnistMean,
                                                                  kFashionMnistStd);
    task.eval.metrics = {{"test_loss", "test loss"}, {"test_accuracy", "test accuracy"}};
    task.sample_noun = "images";
    data_line = "data: " + dir + " (IMAGES): " + std::to_string(task.train->size()) + " training images, " +
                std::to_string(task.eval.data->size()) + " test images";
  } else {
    bytes = byte_data(o.data, o.model.seq_len);
    data_line = bytes.line;
  }
  TorchScriptOptions units;
  units.units = o.model_source.units;
  units.unit_types = o.model_source.unit_types;
  ZS_REQUIRE(!units.units.empty() || !units.unit_types.empty(), ConfigError,
             "model.units and model.unit_types are empty: say which submodules of '", path,
             "' are sharded units (e.g. --set model.units='blocks.*')");
  units.checkpoint = o.model.checkpointing.enabled;
  units.checkpoint_every = o.model.checkpointing.every_n_blocks;
  TorchScriptModel model(path, units, s.device());
  // LoRA and NF4 on the module's torch.nn.Linear submodules: the model's own adapters and hook,
  // in place of the resolved ones (those act on zeroshard::lora::Linear layers).
  ShardingOptions sharding = o.sharding;
  sharding.unit_hooks.clear();
  std::vector<std::string> adapted;
  if (o.lora.rank > 0) {
    at::manual_seed(o.session.seed);  // the adapters' initialisation, the same on every rank
    adapted = model.add_lora(o.lora);
  }
  if (run.config.precision().frozen_linear() == config::PrecisionConfig::NF4) {
    sharding.unit_hooks.push_back(TorchScriptModel::frozen_linear_hook());
  }
  ShardingEngine engine(s, model.module(), sharding);
  if (o.lora.rank > 0) start.run.checkpoint.model.lora = o.lora;  // as train_gpt
  Trainer trainer(s, engine, start);
  const auto forward = [&model](const at::Tensor& x) { return model.forward(x); };
  if (format == DataFormat::kImages) {
    task.loss = [forward](const Batch& b) { return mean_cross_entropy(forward(b.data), b.target); };
    task.eval.per_sample = [forward](const Batch& b) {
      const at::Tensor logits = forward(b.data);
      return std::vector<at::Tensor>{per_sample_cross_entropy(logits, b.target),
                                     at::argmax(logits, -1).eq(b.target).to(at::kFloat)};
    };
  } else {
    set_byte_lm_task(task, bytes, o.model.seq_len, forward);
    task.after_training = byte_sampler(s, engine, *model.module(), o.model.seq_len, o.sample, forward);
  }
  std::ostringstream m;
  m << "model: " << path << " (TorchScript), " << model.unit_names().size() << " units, activation checkpointing "
    << checkpointing_line(units.checkpoint, units.checkpoint_every, "unit(s)");
  task.describe = {m.str(), data_line};
  if (o.lora.rank > 0) task.describe.push_back(lora_line(o.lora, adapted));
  const std::function<void()> sample = task.after_training;
  task.after_training = [&, sample] {
    if (sample) sample();
    if (export_path.empty()) return;
    const auto state = engine.full_state_dict();  // collective
    if (s.rank() == 0) {
      model.save(state, export_path);
      std::printf("exported the trained model to %s (TorchScript; torch.jit.load reads it)\n", export_path.c_str());
      std::fflush(stdout);
    }
  };
  if (required_accuracy >= 0) task.checks.push_back(at_least_check(s, 1, "test accuracy", required_accuracy));
  return trainer.fit(task).exit_status;
}

}  // namespace

ModelKind model_kind(const std::string& path) {
  if (path.empty()) return ModelKind::kGpt;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  ZS_REQUIRE(fs::exists(st), ConfigError, "model.path '", path, "': no such file or directory");
  if (fs::is_directory(st)) {
    ZS_REQUIRE(fs::exists(fs::path(path) / "config.json"), ConfigError, "model.path '", path,
               "' is a directory without config.json: a Hugging Face model directory holds config.json, its weights "
               "and tokenizer files");
    return ModelKind::kHuggingFace;
  }
  ZS_REQUIRE(fs::is_regular_file(st), ConfigError, "model.path '", path,
             "' is neither a Hugging Face model directory nor a TorchScript file");
  return ModelKind::kTorchScript;
}

DataFormat resolved_data_format(ModelKind kind, const DataOptions& data) {
  DataFormat f = data.format;
  if (f == DataFormat::kAuto) {
    switch (kind) {
      case ModelKind::kGpt: f = DataFormat::kBytes; break;
      case ModelKind::kHuggingFace:
        f = !data.path.empty() && data::is_shard_set(data.path) ? DataFormat::kTokenShards : DataFormat::kJsonl;
        break;
      case ModelKind::kTorchScript:
        ZS_THROW(ConfigError, "data.format is AUTO: a TorchScript model trains on IMAGES (Fashion-MNIST, logits "
                 "[N, 10]) or BYTES (text, logits [N, T, >= 256]); set data.format");
    }
  }
  const bool fits = kind == ModelKind::kGpt           ? f == DataFormat::kBytes
                    : kind == ModelKind::kHuggingFace ? f == DataFormat::kJsonl || f == DataFormat::kTokenShards
                                                      : f == DataFormat::kImages || f == DataFormat::kBytes;
  ZS_REQUIRE(fits, ConfigError, "data.format = ", format_name(f), " does not fit ", kind_name(kind),
             ": the GPT trains on BYTES, a Hugging Face model on JSONL or TOKEN_SHARDS, a TorchScript model on "
             "IMAGES or BYTES");
  return f;
}

Program train_program(const Config& config) {
  const ModelKind kind = model_kind(config.model().path());
  const DataFormat format = resolved_data_format(kind, resolve_data(config));
  const bool language = format != DataFormat::kImages;
  std::vector<std::string> own = {"model.path", "data.path", "data.format", "activation_checkpointing"};
  if (language) own.insert(own.end(), {"data.val_fraction", "model.seq_len", "sample"});
  if (kind == ModelKind::kGpt) {
    own.insert(own.end(), {"model.n_layer", "model.n_head", "model.d_model", "model.vocab_size", "model.mlp_ratio",
                           "model.dropout"});
  }
  if (kind == ModelKind::kTorchScript) own.insert(own.end(), {"model.units", "model.unit_types"});
  // LoRA and NF4: on the GPT's and the Llama family's zeroshard::lora::Linear layers, and on a
  // TorchScript module's torch.nn.Linear submodules.
  return Program{"zeroshard-train", {keys::engine(), keys::trainer(), keys::adapters(), own}};
}

int train_main(Session& s, const Run& run) {
  const ModelKind kind = model_kind(run.options.model_source.path);
  const DataFormat format = resolved_data_format(kind, run.options.data);
  const std::optional<TrainStart> start = start_training(s, run, kUsage, {kExportFlag, kMinAccuracyFlag});
  if (!start) return 0;  // --help, --version
  const std::string export_path = flag_value(*start, kExportFlag), accuracy = flag_value(*start, kMinAccuracyFlag);
  ZS_REQUIRE(export_path.empty() || kind == ModelKind::kTorchScript, UsageError,
             "--export writes a TorchScript model back as TorchScript; for ", kind_name(kind),
             " export the checkpoint (checkpoint.dir) with zeroshard-ckpt export");
  ZS_REQUIRE(accuracy.empty() || format == DataFormat::kImages, UsageError,
             "--min-accuracy checks the test accuracy of an image classifier (data.format IMAGES); this run's data is ",
             format_name(format));
  switch (kind) {
    case ModelKind::kGpt: return train_gpt(s, run, *start);
    case ModelKind::kHuggingFace: return train_hf(s, run, *start, format);
    case ModelKind::kTorchScript:
      return train_torchscript(s, run, *start, format, export_path, accuracy.empty() ? -1 : std::stod(accuracy));
  }
  return 1;
}

}  // namespace zeroshard
