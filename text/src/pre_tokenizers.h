// SPDX-License-Identifier: Apache-2.0
#pragma once
// Pre-tokenizers of tokenizer.json: split normalized text into pieces (words) for the model,
// possibly rewriting them (Sequence, Split, ByteLevel, Metaspace, Digits, Punctuation,
// Whitespace, WhitespaceSplit). Immutable, thread-safe.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zeroshard::text::detail {

class JsonAt;

// Pieces of text, back to back in one buffer (few allocations on the hot path).
struct Pieces {
  struct Span {
    uint32_t begin, end;
    bool at_start;  // begins at offset 0 of the original input (Metaspace's prepend_scheme "first")
  };
  std::string text;
  std::vector<Span> spans;

  std::string_view operator[](size_t i) const {
    return std::string_view(text).substr(spans[i].begin, spans[i].end - spans[i].begin);
  }
  size_t size() const { return spans.size(); }
  void clear() {
    text.clear();
    spans.clear();
  }
  // Appends a piece (nothing when empty).
  void add(std::string_view bytes, bool at_start) {
    if (bytes.empty()) return;
    const auto begin = static_cast<uint32_t>(text.size());
    text.append(bytes);
    spans.push_back(Span{begin, static_cast<uint32_t>(text.size()), at_start});
  }
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Appends the pre-tokenization of every piece of `in` to `out`, in order.
  virtual void split(const Pieces& in, Pieces& out) const = 0;
};

// How the matched parts (delimiters) of a split are kept: Hugging Face's SplitDelimiterBehavior.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Appends the parts of `piece` that `matches` (sorted, non-overlapping [begin, end) byte ranges)
// delimit, as `behavior` says; `invert`: the matches are the content and the rest delimiters.
void split_piece(std::string_view piece, bool at_start, const std::vector<std::pair<size_t, size_t>>& matches,
                 SplitBehavior behavior, bool invert, Pieces& out);

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonAt& config);

// The Split pre-tokenizer on a regex, as tiktoken-style tokenizers need it.
std::unique_ptr<PreTokenizer> make_regex_split(const std::string& pattern, const std::string& where);

}  // namespace zeroshard::text::detail
