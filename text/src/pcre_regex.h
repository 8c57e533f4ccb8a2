// SPDX-License-Identifier: Apache-2.0
#pragma once
// The regular expressions of tokenizer files (Split pre-tokenizers, Replace normalizers and
// decoders, GPT-2's and Llama 3's split patterns) on PCRE2 with UTF and Unicode properties, JIT
// compiled. Hugging Face's tokenizers compile these patterns with Oniguruma; its shorthand classes
// differ from PCRE2's, so \s, \S, \w and \W are rewritten to Oniguruma's meaning (\s = White_Space,
// which includes U+0085; \w = Alphabetic, marks, decimal digits and connectors).
//
// Thread-safety: a compiled Regex is immutable; matching uses per-thread scratch space.

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zeroshard::text::detail {

class Regex {
 public:
  // ConfigError "WHERE: regex 'PATTERN' does not compile at offset N: REASON".
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // The non-overlapping, non-empty matches in `text` (well-formed UTF-8), left to right, as
  // [begin, end) byte offsets.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  std::string where_;
  struct Code;
  std::unique_ptr<Code> code_;
};

class JsonAt;

// A pattern of a Split pre-tokenizer or a Replace normalizer/decoder: {"String": literal} or
// {"Regex": pattern}.
class Pattern {
 public:
  explicit Pattern(std::string literal) : literal_(std::move(literal)) {}
  explicit Pattern(std::shared_ptr<const Regex> regex) : regex_(std::move(regex)) {}
  // Non-overlapping, non-empty matches, left to right.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;
  // `text` with every match replaced by `content`.
  std::string replace_all(std::string_view text, std::string_view content) const;

 private:
  std::string literal_;
  std::shared_ptr<const Regex> regex_;
};

// The "pattern" member of `at` (required).
Pattern parse_pattern(const JsonAt& at);

// `pattern` with Oniguruma's shorthand classes spelled for PCRE2 (see above).
std::string oniguruma_to_pcre2(const std::string& pattern);

// `text` quoted as a literal for a pattern.
std::string regex_quote(std::string_view text);

}  // namespace zeroshard::text::detail
