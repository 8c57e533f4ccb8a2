// SPDX-License-Identifier: Apache-2.0
// Loading a Hugging Face tokenizer.json into the pipeline (pipeline.h).

#include "bpe.h"
#include "json_file.h"
#include "loaders.h"
#include "pipeline.h"

namespace zeroshard::text::detail {

namespace {

std::unique_ptr<Model> make_model(const JsonAt& model) {
  // Files written by old versions may leave out "type"; a model with merges is BPE.
  const std::string type = model.has("type") ? model.str("type") : (model.has("merges") ? "BPE" : "");
  if (type == "BPE") return make_bpe_model(model);
  if (type.empty()) model.fail("no 'type' and no 'merges': not a BPE model");
  model.unsupported_type(type, "BPE");
}

std::vector<AddedToken> parse_added_tokens(const JsonAt& root) {
  std::vector<AddedToken> out;
  const auto list = root.find("added_tokens");
  if (!list) return out;
  for (const JsonAt& entry : list->items()) {
    AddedToken t;
    const int64_t id = entry.integer("id");
    if (id < 0 || id > kMaxTokenId) entry.at("id").fail("expected an id in [0, 2^24), got " + std::to_string(id));
    t.id = static_cast<int32_t>(id);
    t.content = entry.str("content");
    t.single_word = entry.flag_or("single_word", false);
    t.lstrip = entry.flag_or("lstrip", false);
    t.rstrip = entry.flag_or("rstrip", false);
    t.special = entry.flag_or("special", false);
    t.normalized = entry.flag_or("normalized", !t.special);
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& path, const TokenizerConfig& config) {
  const Json json = read_json_file(path);
  const JsonAt root(json, path, "");
  if (!json.is_object()) root.fail(std::string("expected an object, got ") + json_type_name(json));
  PipelineParts parts;
  parts.model = make_model(root.at("model"));
  if (auto n = root.find("normalizer")) parts.normalizer = make_normalizer(*n);
  if (auto p = root.find("pre_tokenizer")) parts.pre_tokenizer = make_pre_tokenizer(*p);
  if (auto p = root.find("post_processor")) parts.post_processor = make_post_processor(*p);
  if (auto d = root.find("decoder")) parts.decoder = make_decoder(*d);
  parts.added_tokens = parse_added_tokens(root);
  return std::make_unique<PipelineTokenizer>(std::move(parts), config, path);
}

}  // namespace zeroshard::text::detail
