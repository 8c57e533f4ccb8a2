// SPDX-License-Identifier: Apache-2.0
// PEFT LoRA adapters onto a base Llama-family model (peft_adapter.h): adapter_config.json read as
// PEFT reads it, the adapter's tensors checked against the base, then loaded by name pattern.

#include "zeroshard/models/peft_adapter.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "zeroshard/base/error.h"
#include "zeroshard/formats/tensor_dir.h"
#include "zeroshard/models/hf_checkpoint.h"

namespace zeroshard::models {
namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// adapter_config.json with checked accessors; errors name the file and the key.
class AdapterConfig {
 public:
  explicit AdapterConfig(const std::string& dir) : path_(dir + "/adapter_config.json") {
    std::ifstream in(path_);
    ZS_REQUIRE(in.good(), IoError, "PEFT adapter '", dir, "' has no adapter_config.json (",
               fs::exists(dir) ? "a PEFT adapter directory holds adapter_config.json and adapter_model.safetensors"
                               : "the directory does not exist",
               ")");
    std::stringstream text;
    text << in.rdbuf();
    try {
      j_ = Json::parse(text.str());
    } catch (const Json::exception& e) {
      ZS_THROW(ConfigError, "'", path_, "' is not JSON: ", e.what());
    }
    ZS_REQUIRE(j_.is_object(), ConfigError, "'", path_, "' is not a JSON object");
  }
  const std::string& path() const { return path_; }
  [[noreturn]] void bad(const std::string& key, const std::string& what) const {
    ZS_THROW(ConfigError, "'", path_, "': key '", key, "' ", what);
  }
  const Json* find(const std::string& key) const {
    auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }
  std::string string_or(const std::string& key, const std::string& fallback) const {
    const Json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_string()) bad(key, "must be a string, got " + v->dump());
    return v->get<std::string>();
  }
  double number_or(const std::string& key, double fallback) const {
    const Json* v = find(key);
    if (v == nullptr) return fallback;
    if (!v->is_number()) bad(key, "must be a number, got " + v->dump());
    return v->get<double>();
  }
  bool flag(const std::string& key) const {
    const Json* v = find(key);
    if (v != nullptr && !v->is_boolean()) bad(key, "must be true or false, got " + v->dump());
    return v != nullptr && v->get<bool>();
  }
  // Refuses a key that is set to something other than null, false, {} or [].
  void refuse(const std::string& key, const std::string& why) const {
    const Json* v = find(key);
    if (v == nullptr || (v->is_boolean() && !v->get<bool>()) || (v->is_structured() && v->empty())) return;
    bad(key, "= " + v->dump() + " is not supported: " + why);
  }

 private:
  std::string path_;
  Json j_;
};

// The base's linear modules (their weights' names without ".weight"), in the model's order.
std::vector<std::string> linear_modules(const LlamaConfig& c) {
  std::vector<std::string> out;
  for (const TensorInfo& t : hf_tensors(c)) {
    if (t.shape.size() == 2 && ends_with(t.name, ".weight") && t.name != "model.embed_tokens.weight") {
      out.push_back(t.name.substr(0, t.name.size() - 7));
    }
  }
  return out;
}

// The modules target_modules picks, as PEFT picks them; each entry must pick one.
std::vector<std::string> targeted(const AdapterConfig& ac, const LlamaConfig& c) {
  const Json* t = ac.find("target_modules");
  if (t == nullptr) ac.bad("target_modules", "is missing: PEFT needs the modules the adapter applies to");
  const std::vector<std::string> modules = linear_modules(c);
  std::set<std::string> leaves;
  for (const std::string& m : modules) leaves.insert(m.substr(m.rfind('.') + 1));
  std::string known;
  for (const std::string& l : leaves) known += (known.empty() ? "" : ", ") + l;
  std::set<std::string> picked;
  auto none = [&](const std::string& entry) {
    ac.bad("target_modules", "entry '" + entry + "' names no linear module of the base model '" + c.path +
                                 "' (its linear modules end in " + known + ")");
  };
  if (t->is_string()) {
    std::regex re;
    try {
      re = std::regex(t->get<std::string>(), std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      ac.bad("target_modules", "= " + t->dump() + " is not a valid regular expression (" + e.what() + ")");
    }
    for (const std::string& m : modules) {
      if (std::regex_match(m, re)) picked.insert(m);
    }
    if (picked.empty()) none(t->get<std::string>());
  } else if (t->is_array()) {
    for (const Json& e : *t) {
      if (!e.is_string()) ac.bad("target_modules", "must hold module names, got " + e.dump());
      const std::string entry = e.get<std::string>();
      if (entry == "embed_tokens" || ends_with(entry, ".embed_tokens") || entry == "model.embed_tokens") {
        ac.bad("target_modules", "entry '" + entry + "' is the embedding: zeroshard adapts linear layers only");
      }
      bool any = false;
      for (const std::string& m : modules) {
        if (m != entry && !ends_with(m, "." + entry)) continue;
        picked.insert(m);
        any = true;
      }
      if (!any) none(entry);
    }
  } else {
    ac.bad("target_modules", "must be a list of module names or a regular expression, got " + t->dump());
  }
  std::vector<std::string> out;
  for (const std::string& m : modules) {
    if (picked.count(m)) out.push_back(m);
  }
  return out;
}

// LoRA targets as globs: the decoder-layer modules by their name inside a layer (which must be
// adapted in every layer alike), the others by their full name.
std::vector<std::string> layer_globs(const AdapterConfig& ac, const LlamaConfig& c, const std::vector<std::string>& layers) {
  std::map<std::string, std::set<std::string>> in_layers;  // name inside the layer -> layer numbers
  std::vector<std::string> globs;
  const std::string prefix = "model.layers.";
  for (const std::string& m : layers) {
    if (m.rfind(prefix, 0) != 0) {
      globs.push_back(m);
      continue;
    }
    const size_t dot = m.find('.', prefix.size());
    in_layers[m.substr(dot + 1)].insert(m.substr(prefix.size(), dot - prefix.size()));
  }
  for (const auto& [name, numbers] : in_layers) {
    if (static_cast<int64_t>(numbers.size()) != c.num_hidden_layers) {
      ac.bad("target_modules", "adapts '" + name + "' in " + std::to_string(numbers.size()) + " of the " +
                                   std::to_string(c.num_hidden_layers) +
                                   " decoder layers: zeroshard adapts every decoder layer alike");
    }
    globs.push_back("*." + name);
  }
  return globs;
}

lora::Options lora_options(const AdapterConfig& ac, const LlamaConfig& c, std::vector<std::string>& layers) {
  const std::string type = ac.string_or("peft_type", "");
  ZS_REQUIRE(type == "LORA", ConfigError, "'", ac.path(), "': peft_type \"", type,
             "\" is not supported (zeroshard loads LoRA adapters: \"LORA\")");
  const std::string task = ac.string_or("task_type", "CAUSAL_LM");
  if (task != "CAUSAL_LM") ac.bad("task_type", "= \"" + task + "\" is not supported (a Llama-family model here is a causal LM: \"CAUSAL_LM\")");
  const std::string bias = ac.string_or("bias", "none");
  if (bias != "none") ac.bad("bias", "= \"" + bias + "\" is not supported: zeroshard's adapters have no bias terms (\"none\")");
  ac.refuse("use_dora", "DoRA's magnitude vectors are not implemented");
  ac.refuse("fan_in_fan_out", "the base's linear layers store [out, in]");
  ac.refuse("rank_pattern", "every adapted layer has rank r here");
  ac.refuse("alpha_pattern", "every adapted layer has lora_alpha here");
  ac.refuse("layers_to_transform", "zeroshard adapts every decoder layer alike");
  ac.refuse("modules_to_save", "only the adapters are loaded");
  lora::Options o;
  const double r = ac.number_or("r", 8);
  if (r < 1 || r != std::floor(r)) ac.bad("r", "must be a positive integer, got " + std::to_string(r));
  o.rank = static_cast<int64_t>(r);
  const double alpha = ac.number_or("lora_alpha", 8);
  if (!(alpha > 0)) ac.bad("lora_alpha", "must be positive");
  o.alpha = ac.flag("use_rslora") ? alpha * std::sqrt(r) : alpha;  // scale alpha / sqrt(r) = o.alpha / r
  o.dropout = ac.number_or("lora_dropout", 0);
  if (!(o.dropout >= 0 && o.dropout < 1)) ac.bad("lora_dropout", "must be in [0, 1)");
  layers = targeted(ac, c);
  o.targets = layer_globs(ac, c, layers);
  return o;
}

std::string all_of(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? "; " : "") + items[i];
  return out;
}

std::string peft_name(const std::string& module, const std::string& which) {
  return "base_model.model." + module + "." + which + ".weight";
}

// The adapter's tensors against the base's weights: every pair present, nothing else, shapes
// [r, in] and [out, r] of the base weight as the base directory stores it.
void check_tensors(const PeftAdapter& a, const LlamaConfig& c, const std::string& base_dir) {
  const std::unique_ptr<TensorFile> f = open_safetensors_file(a.weights);
  const std::unique_ptr<TensorDirectory> base = TensorDirectory::open(base_dir);
  std::map<std::string, std::vector<int64_t>> config_shapes;
  for (const TensorInfo& t : hf_tensors(c)) config_shapes[t.name] = t.shape;
  std::vector<std::string> missing, unexpected, mismatched;
  std::set<std::string> expected;
  const int64_t r = a.lora.rank;
  for (const std::string& m : a.layers) {
    const std::string weight = m + ".weight";
    const TensorInfo* bw = base->find(weight);
    const std::vector<int64_t> ws = bw != nullptr ? bw->shape : config_shapes.at(weight);
    const std::string where = bw != nullptr ? base_dir + "/" + base->file_of(weight) : c.path;
    const std::vector<std::pair<std::string, std::vector<int64_t>>> pair = {{"lora_A", {r, ws.at(1)}},
                                                                            {"lora_B", {ws.at(0), r}}};
    for (const auto& [which, want] : pair) {
      const std::string name = peft_name(m, which);
      expected.insert(name);
      const TensorInfo* t = f->find(name);
      if (t == nullptr) {
        missing.push_back(name + " " + shape_str(want));
      } else if (t->shape != want || !at::isFloatingType(t->dtype)) {
        mismatched.push_back(name + " is " + shape_str(t->shape) + " " + c10::toString(t->dtype) + ", but the base's " +
                             weight + " in '" + where + "' is " + shape_str(ws) + ", so " + which +
                             " must be a floating " + shape_str(want) + " (r = " + std::to_string(r) + ")");
      }
    }
  }
  for (const TensorInfo& t : f->tensors()) {
    if (!expected.count(t.name)) unexpected.push_back(t.name + " " + shape_str(t.shape));
  }
  if (missing.empty() && unexpected.empty() && mismatched.empty()) return;
  std::ostringstream os;
  os << "PEFT adapter '" << a.weights << "' does not fit the base model '" << base_dir << "':";
  if (!mismatched.empty()) os << " " << mismatched.size() << " of another shape (" << all_of(mismatched) << ");";
  if (!missing.empty()) os << " " << missing.size() << " missing (" << all_of(missing) << ");";
  if (!unexpected.empty()) {
    os << " " << unexpected.size() << " unexpected (" << all_of(unexpected) << "), for target_modules in '" << a.dir
       << "/adapter_config.json';";
  }
  std::string text = os.str();
  text.pop_back();
  ZS_THROW(CheckpointError, text);
}

}  // namespace

PeftAdapter read_peft_adapter(const std::string& dir, const LlamaConfig& base, const std::string& base_dir) {
  const AdapterConfig ac(dir);
  PeftAdapter a;
  a.dir = dir;
  a.weights = dir + "/adapter_model.safetensors";
  a.lora = lora_options(ac, base, a.layers);
  a.base_model_name_or_path = ac.string_or("base_model_name_or_path", "");
  std::error_code ec;
  ZS_REQUIRE(fs::exists(a.weights, ec), IoError, "PEFT adapter '", dir, "' has no adapter_model.safetensors",
             fs::exists(dir + "/adapter_model.bin", ec)
                 ? " (its adapter_model.bin is not read: save the adapter as safetensors, PEFT's default)"
                 : " (a PEFT adapter directory holds adapter_config.json and adapter_model.safetensors)");
  check_tensors(a, base, base_dir);
  return a;
}

PretrainedReport load_peft_adapter(ShardingEngine& engine, const PeftAdapter& a) {
  PretrainedOptions o;
  o.strict = false;  // the base's weights are not in the adapter's file
  o.rename_patterns.push_back({RenamePattern::Kind::kRegex, R"(base_model\.model\.(.+)\.(lora_[AB])\.weight)", "$1.$2"});
  PretrainedReport r = load_pretrained(engine, a.weights, o);
  std::vector<std::string> wrong = r.unexpected;
  wrong.insert(wrong.end(), r.mismatched.begin(), r.mismatched.end());
  for (const std::string& m : r.missing) {
    if (m.find(".lora_A ") != std::string::npos || m.find(".lora_B ") != std::string::npos) wrong.push_back(m + " missing");
  }
  ZS_REQUIRE(wrong.empty(), CheckpointError, "PEFT adapter '", a.weights,
             "' does not fit the model's adapters (build the model with read_peft_adapter's lora options): ",
             all_of(wrong));
  return r;
}

}  // namespace zeroshard::models
