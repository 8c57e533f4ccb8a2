// SPDX-License-Identifier: Apache-2.0
#include "post_processors.h"

#include <algorithm>
#include <map>
#include <string>

#include "json_file.h"

namespace zeroshard::text::detail {

namespace {

class AffixProcessor : public PostProcessor {
 public:
  AffixProcessor(std::vector<int32_t> prefix, std::vector<int32_t> suffix)
      : prefix_(std::move(prefix)), suffix_(std::move(suffix)) {}
  void process(std::vector<int32_t>& ids, bool add_special_tokens) const override {
    if (!add_special_tokens) return;
    ids.insert(ids.begin(), prefix_.begin(), prefix_.end());
    ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  }
  std::vector<int32_t> prefix() const override { return prefix_; }
  std::vector<int32_t> suffix() const override { return suffix_; }

 private:
  std::vector<int32_t> prefix_, suffix_;
};

class SequenceProcessor : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> steps) : steps_(std::move(steps)) {}
  void process(std::vector<int32_t>& ids, bool add_special_tokens) const override {
    for (const auto& step : steps_) step->process(ids, add_special_tokens);
  }
  std::vector<int32_t> prefix() const override {
    std::vector<int32_t> out;
    for (auto it = steps_.rbegin(); it != steps_.rend(); ++it) {
      const auto p = (*it)->prefix();
      out.insert(out.end(), p.begin(), p.end());
    }
    return out;
  }
  std::vector<int32_t> suffix() const override {
    std::vector<int32_t> out;
    for (const auto& step : steps_) {
      const auto s = step->suffix();
      out.insert(out.end(), s.begin(), s.end());
    }
    return out;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> steps_;
};

// special_tokens: {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}, ...}
std::map<std::string, std::vector<int32_t>> template_special_tokens(const JsonAt& config) {
  std::map<std::string, std::vector<int32_t>> out;
  const auto specials = config.find("special_tokens");
  if (!specials) return out;
  if (!specials->value().is_object()) specials->fail("expected an object");
  for (const auto& [name, value] : specials->value().items()) {
    const JsonAt entry(value, config.file(), specials->path() + "." + name);
    std::vector<int32_t> ids;
    for (const JsonAt& id : entry.items("ids")) ids.push_back(static_cast<int32_t>(id.as_integer()));
    out[name] = std::move(ids);
  }
  return out;
}

// One item of a template: "$A", "$A:1", "$0", "<s>", "<s>:0", or the object forms
// {"Sequence": {"id": "A"}} and {"SpecialToken": {"id": "<s>"}}. Returns the special token's
// name, or "" for the sequence.
std::string template_item(const JsonAt& item) {
  if (item.value().is_string()) {
    std::string s = item.as_str();
    const size_t colon = s.rfind(':');
    if (colon != std::string::npos && colon + 1 < s.size() &&
        s.find_first_not_of("0123456789", colon + 1) == std::string::npos) {
      s.resize(colon);
    }
    if (s == "$" || s == "$A" || s == "$0" || s == "$a") return "";
    if (s == "$B" || s == "$1" || s == "$b") item.fail("the single-sequence template names the second sequence ($B)");
    return s;
  }
  if (auto seq = item.find("Sequence")) {
    if (seq->str("id") != "A") item.fail("the single-sequence template names sequence '" + seq->str("id") + "'");
    return "";
  }
  if (auto special = item.find("SpecialToken")) return special->str("id");
  item.fail("expected a Sequence or SpecialToken item, got " + item.value().dump());
}

std::unique_ptr<PostProcessor> make_template(const JsonAt& config) {
  const auto specials = template_special_tokens(config);
  const JsonAt single = config.at("single");
  std::vector<JsonAt> items;
  std::vector<Json> words;  // the items of the string form (items point into it)
  if (single.value().is_string()) {
    // The string form "<s> $A:0 </s>": items separated by spaces.
    const std::string text = single.as_str();
    size_t at = 0;
    while (at < text.size()) {
      const size_t end = std::min(text.find(' ', at), text.size());
      if (end > at) words.emplace_back(text.substr(at, end - at));
      at = end + 1;
    }
    for (const Json& w : words) items.emplace_back(w, config.file(), single.path());
  } else {
    items = single.items();
  }
  std::vector<int32_t> prefix, suffix;
  bool seen_sequence = false;
  for (const JsonAt& item : items) {
    const std::string name = template_item(item);
    if (name.empty()) {
      if (seen_sequence) item.fail("the template names the sequence twice");
      seen_sequence = true;
      continue;
    }
    const auto it = specials.find(name);
    if (it == specials.end()) item.fail("special token '" + name + "' is not in special_tokens");
    auto& side = seen_sequence ? suffix : prefix;
    side.insert(side.end(), it->second.begin(), it->second.end());
  }
  if (!seen_sequence) single.fail("the template has no $A");
  return std::make_unique<AffixProcessor>(std::move(prefix), std::move(suffix));
}

// {"sep": ["</s>", 2], "cls": ["<s>", 0]} -> cls $A sep.
std::unique_ptr<PostProcessor> make_cls_sep(const JsonAt& config) {
  const auto id_of = [&](const char* key) {
    const JsonAt pair = config.at(key);
    const auto items = pair.items();
    if (items.size() != 2) pair.fail("expected [token, id]");
    return static_cast<int32_t>(items[1].as_integer());
  };
  return std::make_unique<AffixProcessor>(std::vector<int32_t>{id_of("cls")}, std::vector<int32_t>{id_of("sep")});
}

constexpr const char* kSupported = "TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel, Sequence";

}  // namespace

std::unique_ptr<PostProcessor> make_affix_processor(std::vector<int32_t> prefix, std::vector<int32_t> suffix) {
  return std::make_unique<AffixProcessor>(std::move(prefix), std::move(suffix));
}

std::unique_ptr<PostProcessor> make_post_processor(const JsonAt& config) {
  const std::string type = config.str("type");
  if (type == "TemplateProcessing") return make_template(config);
  if (type == "BertProcessing" || type == "RobertaProcessing") return make_cls_sep(config);
  if (type == "ByteLevel") return make_affix_processor({}, {});
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PostProcessor>> steps;
    for (const JsonAt& step : config.items("processors")) steps.push_back(make_post_processor(step));
    return std::make_unique<SequenceProcessor>(std::move(steps));
  }
  config.unsupported_type(type, kSupported);
}

}  // namespace zeroshard::text::detail
