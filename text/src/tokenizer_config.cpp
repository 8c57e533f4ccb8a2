// SPDX-License-Identifier: Apache-2.0
#include "tokenizer_config.h"

#include <sys/stat.h>

#include <utility>

#include "json_file.h"

namespace zeroshard::text::detail {

namespace {

std::optional<std::string> token_text(const JsonAt& config, const char* key) {
  const auto at = config.find(key);
  if (!at) return std::nullopt;
  if (at->value().is_object()) return at->str("content");
  return at->as_str();
}

std::optional<bool> optional_flag(const JsonAt& config, const char* key) {
  if (!config.has(key)) return std::nullopt;
  return config.flag_or(key, false);
}

std::string chat_template(const JsonAt& config) {
  const auto at = config.find("chat_template");
  if (!at) return "";
  if (at->value().is_string()) return at->as_str();
  // [{"name": "default", "template": "..."}, {"name": "tool_use", ...}]
  for (const JsonAt& entry : at->items()) {
    if (entry.str("name") == "default") return entry.str("template");
  }
  at->fail("a list of chat templates without one named 'default'");
}

std::vector<AddedToken> added_tokens_decoder(const JsonAt& config) {
  std::vector<AddedToken> out;
  const auto at = config.find("added_tokens_decoder");
  if (!at) return out;
  if (!at->value().is_object()) at->fail("expected an object of id: token");
  for (const auto& [key, value] : at->value().items()) {
    const JsonAt entry(value, config.file(), at->path() + "." + key);
    AddedToken t;
    size_t used = 0;
    try {
      t.id = std::stoi(key, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != key.size() || t.id < 0) entry.fail("the key is not a token id");
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

TokenizerConfig read_tokenizer_config(const std::string& path) {
  TokenizerConfig c;
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return c;
  c.file = path;
  const Json json = read_json_file(path);
  const JsonAt config(json, c.file, "");
  if (!json.is_object()) config.fail(std::string("expected an object, got ") + json_type_name(json));
  c.bos_token = token_text(config, "bos_token");
  c.eos_token = token_text(config, "eos_token");
  c.pad_token = token_text(config, "pad_token");
  c.unk_token = token_text(config, "unk_token");
  c.add_bos_token = optional_flag(config, "add_bos_token");
  c.add_eos_token = optional_flag(config, "add_eos_token");
  c.chat_template = chat_template(config);
  c.clean_up_tokenization_spaces = config.flag_or("clean_up_tokenization_spaces", false);
  c.added_tokens_decoder = added_tokens_decoder(config);
  return c;
}

std::string clean_up_tokenization(std::string text) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) {
    const std::string f(from), t(to);
    std::string out;
    out.reserve(text.size());
    size_t done = 0;
    for (size_t at = text.find(f); at != std::string::npos; at = text.find(f, done)) {
      out.append(text, done, at - done);
      out += t;
      done = at + f.size();
    }
    out.append(text, done, std::string::npos);
    text = std::move(out);
  }
  return text;
}

}  // namespace zeroshard::text::detail
