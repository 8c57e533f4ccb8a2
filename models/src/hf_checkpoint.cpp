// SPDX-License-Identifier: Apache-2.0
// Hugging Face checkpoints in (hf_checkpoint.h): the expected tensors from config.json, the strict
// check against a model directory, and the sharded load.

#include "zeroshard/models/hf_checkpoint.h"

#include <ATen/ops/ones.h>

#include <exception>
#include <map>
#include <sstream>

#include "zeroshard/base/error.h"
#include "zeroshard/comm/communicator.h"
#include "zeroshard/formats/tensor_dir.h"
#include "zeroshard/engine/engine.h"

namespace zeroshard::models {
namespace {

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

bool is_float(c10::ScalarType t) { return t == c10::kFloat || t == c10::kBFloat16 || t == c10::kHalf; }

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

struct Problems {
  std::vector<std::string> missing, unexpected, mismatched, not_float, untied;
  bool empty() const {
    return missing.empty() && unexpected.empty() && mismatched.empty() && not_float.empty() && untied.empty();
  }
};

std::string all_of(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? "; " : "") + items[i];
  return out;
}

// The file of `dir` holding tensor `name`: its shard for a model directory, else the file itself.
std::string file_of(const TensorFile& dir, const std::string& name) {
  const auto* d = dynamic_cast<const TensorDirectory*>(&dir);
  return d != nullptr ? d->file_of(name) : dir.path();
}

// The tied head stored in the files: fine when it is the embedding's alias, else a problem.
void check_tied_head(const LlamaConfig& c, const TensorFile& dir, const TensorInfo& t, Problems& p) {
  const std::map<std::string, std::string> aliases = dir.aliases();
  const std::string embed = "model.embed_tokens.weight";
  auto root = [&](const std::string& n) {
    auto it = aliases.find(n);
    return it == aliases.end() ? n : it->second;
  };
  if (root(t.name) != root(embed)) {
    p.untied.push_back("lm_head.weight in " + file_of(dir, t.name) + ": config.json ties it to " + embed +
                       " (tie_word_embeddings) but the checkpoint stores it as a separate tensor");
  }
}

// Throws on every rank when `fn` failed on any: this rank's own error where it failed.
void on_every_rank(Communicator& world, const std::string& dir, const std::function<void()>& fn) {
  std::exception_ptr error;
  try {
    fn();
  } catch (...) {
    error = std::current_exception();
  }
  at::Tensor failed = at::ones({1}, at::kFloat) * (error ? 1.0 : 0.0);
  world.all_reduce(failed, ReduceOp::kMax, "zs.hf_checkpoint.check")->wait();
  if (error) std::rethrow_exception(error);
  ZS_REQUIRE(failed.item<float>() == 0.0f, CheckpointError, "checking the Hugging Face checkpoint '", dir,
             "' failed on another rank (its error is in that rank's output)");
}

}  // namespace

std::vector<TensorInfo> hf_tensors(const LlamaConfig& c) {
  std::vector<TensorInfo> out;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    out.push_back({name, c10::kFloat, std::move(shape)});
  };
  const int64_t h = c.hidden_size, q = c.q_size(), kv = c.kv_size(), i = c.intermediate_size;
  add("model.embed_tokens.weight", {c.vocab_size, h});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {h});
    for (const auto& [name, rows] : {std::pair{"q_proj", q}, {"k_proj", kv}, {"v_proj", kv}}) {
      add(p + "self_attn." + name + ".weight", {rows, h});
      if (c.qkv_bias) add(p + "self_attn." + name + ".bias", {rows});
    }
    add(p + "self_attn.o_proj.weight", {h, q});
    if (c.o_bias) add(p + "self_attn.o_proj.bias", {h});
    add(p + "post_attention_layernorm.weight", {h});
    for (const auto& [name, rows, cols] : {std::tuple{"gate_proj", i, h}, {"up_proj", i, h}, {"down_proj", h, i}}) {
      add(p + "mlp." + name + ".weight", {rows, cols});
      if (c.mlp_bias) add(p + "mlp." + name + ".bias", {rows});
    }
  }
  add("model.norm.weight", {h});
  if (!c.tie_word_embeddings) add("lm_head.weight", {c.vocab_size, h});
  return out;
}

void check_hf_checkpoint(const LlamaConfig& c, const TensorFile& dir) {
  Problems p;
  std::map<std::string, std::vector<int64_t>> expected;
  for (const TensorInfo& t : hf_tensors(c)) {
    expected[t.name] = t.shape;
    const TensorInfo* got = dir.find(t.name);
    if (got == nullptr) {
      p.missing.push_back(t.name + " " + shape_str(t.shape));
    } else if (got->shape != t.shape) {
      p.mismatched.push_back(t.name + " in " + file_of(dir, t.name) + ": file " + shape_str(got->shape) +
                             ", config.json " + shape_str(t.shape));
    } else if (!is_float(got->dtype)) {
      p.not_float.push_back(t.name + " in " + file_of(dir, t.name) + ": " + c10::toString(got->dtype));
    }
  }
  for (const TensorInfo& t : dir.tensors()) {
    if (expected.count(t.name) || ends_with(t.name, ".self_attn.rotary_emb.inv_freq")) continue;
    if (c.tie_word_embeddings && t.name == "lm_head.weight") {
      check_tied_head(c, dir, t, p);
      continue;
    }
    p.unexpected.push_back(t.name + " " + shape_str(t.shape) + " in " + file_of(dir, t.name));
  }
  if (p.empty()) return;
  std::ostringstream os;
  os << "Hugging Face checkpoint '" << dir.path() << "' does not fit its config '" << c.path << "':";
  if (!p.missing.empty()) os << " " << p.missing.size() << " missing (" << all_of(p.missing) << ");";
  if (!p.unexpected.empty()) os << " " << p.unexpected.size() << " unexpected (" << all_of(p.unexpected) << ");";
  if (!p.mismatched.empty()) os << " " << p.mismatched.size() << " of another shape (" << all_of(p.mismatched) << ");";
  if (!p.not_float.empty()) {
    os << " " << p.not_float.size() << " not bf16, fp16 or fp32 (" << all_of(p.not_float) << ");";
  }
  if (!p.untied.empty()) os << " " << all_of(p.untied) << ";";
  std::string text = os.str();
  text.pop_back();
  ZS_THROW(CheckpointError, text);
}

PretrainedReport load_hf_weights(ShardingEngine& engine, const LlamaConfig& c, const std::string& dir) {
  Communicator& world = *engine.session().world();
  on_every_rank(world, dir, [&] { check_hf_checkpoint(c, *TensorDirectory::open(dir)); });
  // The check made names and shapes match config.json exactly; what load_pretrained would refuse
  // strictly is only what the check allows (inv_freq buffers, adapters that start from zero).
  PretrainedOptions o;
  o.strict = false;
  o.not_required = {"*lora_A", "*lora_B"};
  PretrainedReport r = load_pretrained(engine, dir, o);
  std::vector<std::string> wrong = r.mismatched;
  for (const std::string& m : r.missing) {
    if (m.find("lora_A") == std::string::npos && m.find("lora_B") == std::string::npos) wrong.push_back(m);
  }
  ZS_REQUIRE(wrong.empty(), CheckpointError, "the model does not match config.json '", c.path, "' of '", dir,
             "' (was it built from another config?): ", all_of(wrong));
  return r;
}

}  // namespace zeroshard::models
