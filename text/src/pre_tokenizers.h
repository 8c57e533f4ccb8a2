#pragma once
// Pre-tokenizers of tokenizer.json: split normalized text into pieces (words) for the model,
// possibly rewriting them (Sequence, Split, ByteLevel, Metaspace, Digits, Punctuation,
// Whitespace, WhitespaceSplit). Immutable, thread-safe.

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace zeroshard::text::detail {

class JsonAt;

struct Piece {
  std::string text;
  bool at_start;  // begins at offset 0 of the original input (Metaspace's prepend_scheme "first")
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their pre-tokenization, in order; empty pieces are dropped.
  virtual void split(std::vector<Piece>& pieces) const = 0;
};

// How the matched parts (delimiters) of a split are kept: Hugging Face's SplitDelimiterBehavior.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Appends the parts of `piece` that `matches` (sorted, non-overlapping [begin, end) byte ranges)
// delimit, as `behavior` says; `invert`: the matches are the content and the rest delimiters.
void split_piece(const Piece& piece, const std::vector<std::pair<size_t, size_t>>& matches, SplitBehavior behavior,
                 bool invert, std::vector<Piece>& out);

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonAt& config);

// The Split pre-tokenizer on a regex, as tiktoken-style tokenizers need it.
std::unique_ptr<PreTokenizer> make_regex_split(const std::string& pattern, const std::string& where);

}  // namespace zeroshard::text::detail
