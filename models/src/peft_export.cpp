// SPDX-License-Identifier: Apache-2.0
// A checkpoint's LoRA adapters as a PEFT adapter directory (hf_export.h): adapter_config.json and
// adapter_model.safetensors under PEFT's names.

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <set>

#include "export_dir.h"
#include "zeroshard/base/error.h"
#include "zeroshard/checkpoint/checkpoint_tensors.h"
#include "zeroshard/models/hf_export.h"

namespace zeroshard::models {
namespace {

std::string leaf(const std::string& module) {
  const size_t dot = module.rfind('.');
  return dot == std::string::npos ? module : module.substr(dot + 1);
}

std::string regex_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string(R"(\^$.|?*+()[]{})").find(c) != std::string::npos) out += '\\';
    out += c;
  }
  return out;
}

// PEFT's target_modules: the adapted layers' last name components, when those are exactly the
// layers with such names (PEFT adapts every module whose name ends in one of them); else a regular
// expression PEFT matches against whole module names (re.fullmatch).
void target_modules(const ckpt::CheckpointTensors& t, PeftExportReport& r) {
  std::set<std::string> leaves;
  for (const std::string& layer : t.adapted_layers()) leaves.insert(leaf(layer));
  const std::set<std::string> adapted(t.adapted_layers().begin(), t.adapted_layers().end());
  bool exact = true;
  for (const ckpt::SavedParam& p : t.params()) {
    if (p.shape.size() != 2 || !lora::has_leaf(p.name, "weight")) continue;
    const std::string module = p.name.substr(0, p.name.size() - 7);
    if (leaves.count(leaf(module)) && !adapted.count(module)) exact = false;
  }
  if (exact) {
    r.target_modules.assign(leaves.begin(), leaves.end());
    return;
  }
  for (const std::string& layer : t.adapted_layers()) r.target_regex += (r.target_regex.empty() ? "" : "|") + regex_escape(layer);
}

// config.json's _name_or_path, when the recorded config has one.
nlohmann::json base_model_name(const std::string& config_json, const std::string& given) {
  if (!given.empty()) return given;
  const nlohmann::json j = nlohmann::json::parse(config_json, nullptr, false);
  if (j.is_object() && j.contains("_name_or_path") && j["_name_or_path"].is_string() &&
      !j["_name_or_path"].get<std::string>().empty()) {
    return j["_name_or_path"];
  }
  return nullptr;
}

// adapter_config.json with the fields PEFT's LoraConfig writes (sorted, indent 2, as PEFT does).
std::string adapter_config(const PeftExportReport& r, const lora::Options& o, const nlohmann::json& base) {
  nlohmann::json alpha = o.alpha == std::floor(o.alpha) && std::fabs(o.alpha) < 1e15
                             ? nlohmann::json(static_cast<int64_t>(o.alpha)) : nlohmann::json(o.alpha);
  nlohmann::json targets = r.target_regex.empty() ? nlohmann::json(r.target_modules) : nlohmann::json(r.target_regex);
  const nlohmann::json j = {{"alpha_pattern", nlohmann::json::object()},
                            {"auto_mapping", nullptr},
                            {"base_model_name_or_path", base},
                            {"bias", "none"},
                            {"fan_in_fan_out", false},
                            {"inference_mode", true},
                            {"init_lora_weights", true},
                            {"layer_replication", nullptr},
                            {"layers_pattern", nullptr},
                            {"layers_to_transform", nullptr},
                            {"lora_alpha", alpha},
                            {"lora_dropout", o.dropout},
                            {"modules_to_save", nullptr},
                            {"peft_type", "LORA"},
                            {"r", o.rank},
                            {"rank_pattern", nlohmann::json::object()},
                            {"revision", nullptr},
                            {"target_modules", targets},
                            {"task_type", "CAUSAL_LM"},
                            {"use_dora", false},
                            {"use_rslora", false}};
  return j.dump(2) + "\n";
}

std::string peft_name(const std::string& layer, const char* which) {
  return "base_model.model." + layer + "." + which + ".weight";
}

}  // namespace

PeftExportReport export_peft_adapter(const std::string& ckpt, const std::string& out_dir, const PeftExportOptions& o) {
  ZS_REQUIRE(o.dtype == c10::kFloat || o.dtype == c10::kBFloat16 || o.dtype == c10::kHalf, UsageError,
             "a PEFT adapter export writes bf16, fp16 or fp32, not ", c10::toString(o.dtype));
  ckpt::CheckpointTensors t(ckpt);
  ZS_REQUIRE(!t.adapted_layers().empty(), CheckpointError, "checkpoint '", t.path(),
             "' has no LoRA adapters (no lora_A / lora_B parameters): there is no PEFT adapter to write "
             "(--format hf exports its weights)");
  PeftExportReport r;
  r.dir = out_dir;
  t.lora_scale();  // CheckpointError when the LoRA options were not recorded
  const lora::Options& lo = *t.lora();
  r.rank = lo.rank;
  r.alpha = lo.alpha;
  r.layers = static_cast<int64_t>(t.adapted_layers().size());
  target_modules(t, r);
  std::vector<TensorInfo> infos;
  std::vector<std::string> read;
  for (const std::string& layer : t.adapted_layers()) {
    for (const char* which : {"lora_A", "lora_B"}) {
      infos.push_back({peft_name(layer, which), o.dtype, t.param(layer + "." + which).shape});
      read.push_back(layer + "." + which);
    }
  }
  const detail::ExportDirectory out(out_dir, nullptr);
  try {
    SafetensorsWriter w(out.tmp() + "/adapter_model.safetensors", infos, {{"format", "pt"}});
    for (size_t i = 0; i < infos.size(); ++i) w.write(infos[i].name, t.read_whole(read[i]).to(o.dtype));
    w.finish();
    t.check_rest(read);
    out.write_file("adapter_config.json", adapter_config(r, lo, base_model_name(t.hf_config(), o.base_model_name_or_path)));
    out.publish();
  } catch (...) {
    out.discard();
    throw;
  }
  return r;
}

}  // namespace zeroshard::models
