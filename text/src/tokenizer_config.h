// SPDX-License-Identifier: Apache-2.0
#pragma once
// tokenizer_config.json, the part of it a tokenizer needs: the bos/eos/pad/unk token texts (a
// string or an {"content": ...} object), add_bos_token / add_eos_token, the chat template (a
// string, or a list of named templates of which "default" is used), clean_up_tokenization_spaces
// and added_tokens_decoder.

#include <optional>
#include <string>
#include <vector>

#include "added_vocabulary.h"

namespace zeroshard::text::detail {

struct TokenizerConfig {
  std::string file;  // where it was read from ("" when there was none)
  std::optional<std::string> bos_token, eos_token, pad_token, unk_token;
  std::optional<bool> add_bos_token, add_eos_token;
  std::string chat_template;
  bool clean_up_tokenization_spaces = false;
  std::vector<AddedToken> added_tokens_decoder;
};

// Reads `path`; a file that does not exist gives the defaults above.
TokenizerConfig read_tokenizer_config(const std::string& path);

// transformers' clean_up_tokenization: " ." -> ".", " n't" -> "n't", ...
std::string clean_up_tokenization(std::string text);

}  // namespace zeroshard::text::detail
