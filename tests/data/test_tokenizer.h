// SPDX-License-Identifier: Apache-2.0
#pragma once
// A tokenizer for the data tests (not a product tokenizer): ids 0..255 are bytes; 256 "<s>"
// (BOS), 257 "</s>" (EOS) and 258 "<pad>" are special tokens, recognised in text as a tokenizer's
// added tokens are. encode(text, true) puts BOS first. And a small chat format rendered by a
// function, in the shape of a chat template: "<s>" then per message "<|role|>\ncontent\n", an
// assistant message ending "</s>\n", and "<|assistant|>\n" as the generation prompt.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "zeroshard/base/error.h"
#include "zeroshard/data/chat.h"
#include "zeroshard/text/chat_template.h"
#include "zeroshard/text/tokenizer.h"

namespace zeroshard::test {

class ByteTestTokenizer : public text::Tokenizer {
 public:
  static constexpr int32_t kBos = 256, kEos = 257, kPad = 258;

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const override {
    std::vector<int32_t> ids;
    if (add_special_tokens) ids.push_back(kBos);
    for (size_t i = 0; i < text.size();) {
      int32_t special = -1;
      for (int32_t id : {kBos, kEos, kPad}) {
        if (text.substr(i, specials_[id - kBos].size()) == specials_[id - kBos]) special = id;
      }
      if (special >= 0) {
        ids.push_back(special);
        i += specials_[special - kBos].size();
      } else {
        ids.push_back(static_cast<unsigned char>(text[i++]));
      }
    }
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const override {
    std::string out;
    for (int32_t id : ids) {
      if (id >= kBos) {
        if (!skip_special_tokens) out += id_to_token(id);
      } else {
        out += id_to_token(id);
      }
    }
    return out;
  }
  int32_t vocab_size() const override { return 259; }
  std::optional<int32_t> token_to_id(std::string_view token) const override {
    for (int32_t id : {kBos, kEos, kPad}) {
      if (token == specials_[id - kBos]) return id;
    }
    if (token.size() == 1) return static_cast<unsigned char>(token[0]);
    return std::nullopt;
  }
  std::string id_to_token(int32_t id) const override {
    ZS_REQUIRE(id >= 0 && id < vocab_size(), UsageError, "id ", id, " is outside the test vocabulary");
    return id >= kBos ? specials_[id - kBos] : std::string(1, static_cast<char>(id));
  }
  std::optional<int32_t> bos_id() const override { return kBos; }
  std::optional<int32_t> eos_id() const override { return kEos; }
  std::optional<int32_t> pad_id() const override { return kPad; }
  const std::string& chat_template() const override { return empty_; }
  const std::string& bos_token() const override { return specials_[0]; }
  const std::string& eos_token() const override { return specials_[1]; }

 private:
  std::string specials_[3] = {"<s>", "</s>", "<pad>"};
  std::string empty_;
};

inline std::string render_test_chat(const std::vector<text::ChatMessage>& messages, bool add_generation_prompt) {
  std::string out = "<s>";
  for (const text::ChatMessage& m : messages) {
    out += "<|" + m.role + "|>\n" + m.content + (m.role == "assistant" ? "</s>" : "") + "\n";
  }
  if (add_generation_prompt) out += "<|assistant|>\n";
  return out;
}

// The span source of that chat format (data/chat.h's render_chat over render_test_chat).
inline data::RenderedChat test_chat_spans(const std::vector<text::ChatMessage>& messages) {
  return data::render_chat(messages, render_test_chat);
}

}  // namespace zeroshard::test
