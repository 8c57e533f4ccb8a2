// SPDX-License-Identifier: Apache-2.0
#include "pre_tokenizers.h"

#include <algorithm>

#include "byte_level.h"
#include "json_file.h"
#include "pcre_regex.h"
#include "unicode.h"

namespace zeroshard::text::detail {

namespace {

using Matches = std::vector<std::pair<size_t, size_t>>;

// GPT-2's split pattern, which the ByteLevel pre-tokenizer applies when use_regex is true.
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Every character for which `pred` holds, as one match each.
template <typename Pred>
void char_matches(std::string_view text, Pred pred, Matches& out) {
  size_t i = 0;
  while (i < text.size()) {
    const size_t begin = i;
    if (pred(next_code_point(text, i))) out.emplace_back(begin, i);
  }
}

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}
  void split(const Pieces& in, Pieces& out) const override {
    if (steps_.empty()) {
      out.text.append(in.text);
      for (size_t i = 0; i < in.size(); ++i) out.add(in[i], in.spans[i].at_start);
      return;
    }
    Pieces a, b;
    const Pieces* from = &in;
    for (size_t k = 0; k < steps_.size(); ++k) {
      Pieces& to = k + 1 == steps_.size() ? out : (from == &a ? b : a);
      if (&to != &out) to.clear();
      steps_[k]->split(*from, to);
      from = &to;
    }
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(Pattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void split(const Pieces& in, Pieces& out) const override {
    thread_local Matches matches;
    for (size_t i = 0; i < in.size(); ++i) {
      matches.clear();
      pattern_.find_all(in[i], matches);
      split_piece(in[i], in.spans[i].at_start, matches, behavior_, invert_, out);
    }
  }

 private:
  Pattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex, const std::string& where)
      : add_prefix_space_(add_prefix_space),
        regex_(use_regex ? std::make_unique<Regex>(kGpt2Pattern, where) : nullptr) {}
  void split(const Pieces& in, Pieces& out) const override {
    thread_local Matches matches;
    thread_local std::string prefixed;
    thread_local Pieces parts;
    for (size_t i = 0; i < in.size(); ++i) {
      std::string_view piece = in[i];
      if (add_prefix_space_ && piece.substr(0, 1) != " ") {
        prefixed.assign(" ");
        prefixed.append(piece);
        piece = prefixed;
      }
      parts.clear();
      if (regex_) {
        matches.clear();
        regex_->find_all(piece, matches);
        split_piece(piece, in.spans[i].at_start, matches, SplitBehavior::kIsolated, false, parts);
      } else {
        parts.add(piece, in.spans[i].at_start);
      }
      for (size_t k = 0; k < parts.size(); ++k) {
        const auto begin = static_cast<uint32_t>(out.text.size());
        byte_level_encode(parts[k], out.text);
        out.spans.push_back(Pieces::Span{begin, static_cast<uint32_t>(out.text.size()), parts.spans[k].at_start});
      }
    }
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split), space_(" "), marker_(replacement_) {}
  void split(const Pieces& in, Pieces& out) const override {
    thread_local Matches matches;
    for (size_t i = 0; i < in.size(); ++i) {
      const bool at_start = in.spans[i].at_start;
      std::string replaced = space_.replace_all(in[i], replacement_);
      const bool prepend = scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && at_start);
      if (prepend && replaced.compare(0, replacement_.size(), replacement_) != 0) replaced.insert(0, replacement_);
      if (!split_) {
        out.add(replaced, at_start);
        continue;
      }
      matches.clear();
      marker_.find_all(replaced, matches);
      split_piece(replaced, at_start, matches, SplitBehavior::kMergedWithNext, false, out);
    }
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
  Pattern space_, marker_;
};

// Splits by a character class: Digits (numeric characters), Punctuation, WhitespaceSplit.
template <typename Pred>
class CharClassPreTokenizer : public PreTokenizer {
 public:
  CharClassPreTokenizer(Pred pred, SplitBehavior behavior) : pred_(pred), behavior_(behavior) {}
  void split(const Pieces& in, Pieces& out) const override {
    thread_local Matches matches;
    for (size_t i = 0; i < in.size(); ++i) {
      matches.clear();
      char_matches(in[i], pred_, matches);
      split_piece(in[i], in.spans[i].at_start, matches, behavior_, false, out);
    }
  }

 private:
  Pred pred_;
  SplitBehavior behavior_;
};

template <typename Pred>
std::unique_ptr<PreTokenizer> char_class(Pred pred, SplitBehavior behavior) {
  return std::make_unique<CharClassPreTokenizer<Pred>>(pred, behavior);
}

SplitBehavior parse_behavior(const JsonAt& config, SplitBehavior fallback) {
  const auto at = config.find("behavior");
  if (!at) return fallback;
  const std::string b = at->as_str();
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  at->fail("'" + b + "' is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
}

PrependScheme parse_prepend_scheme(const JsonAt& config) {
  if (auto scheme = config.find("prepend_scheme")) {
    const std::string s = scheme->as_str();
    if (s == "always") return PrependScheme::kAlways;
    if (s == "first") return PrependScheme::kFirst;
    if (s == "never") return PrependScheme::kNever;
    scheme->fail("'" + s + "' is not one of always, first, never");
  }
  // Files written before prepend_scheme existed say add_prefix_space.
  return config.flag_or("add_prefix_space", true) ? PrependScheme::kAlways : PrependScheme::kNever;
}

std::string single_char(const JsonAt& config, const char* key, const std::string& fallback) {
  const std::string s = config.str_or(key, fallback);
  size_t i = 0;
  if (s.empty() || find_invalid_utf8(s) != std::string::npos || (next_code_point(s, i), i != s.size())) {
    config.at(key).fail("expected one character, got '" + s + "'");
  }
  return s;
}

constexpr const char* kSupported =
    "Sequence, Split, ByteLevel, Metaspace, Digits, Punctuation, Whitespace, WhitespaceSplit";

}  // namespace

namespace {

// The piece's consecutive parts, each a delimiter or not.
struct Part {
  size_t begin, end;
  bool delimiter;
};

// The [begin, end) ranges `behavior` keeps of `parts`, as Hugging Face's split does.
void kept_ranges(const std::vector<Part>& parts, SplitBehavior behavior, std::vector<std::pair<size_t, size_t>>& kept) {
  bool previous_delimiter = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Part& p : parts) {
        if (!p.delimiter) kept.emplace_back(p.begin, p.end);
      }
      break;
    case SplitBehavior::kIsolated:
      for (const Part& p : parts) kept.emplace_back(p.begin, p.end);
      break;
    case SplitBehavior::kMergedWithPrevious:  // a delimiter joins the part before it
      for (const Part& p : parts) {
        if (p.delimiter && !previous_delimiter && !kept.empty()) {
          kept.back().second = p.end;
        } else {
          kept.emplace_back(p.begin, p.end);
        }
        previous_delimiter = p.delimiter;
      }
      break;
    case SplitBehavior::kMergedWithNext:  // a delimiter joins the part after it
      for (size_t k = parts.size(); k-- > 0;) {
        const Part& p = parts[k];
        if (p.delimiter && !previous_delimiter && !kept.empty()) {
          kept.back().first = p.begin;
        } else {
          kept.emplace_back(p.begin, p.end);
        }
        previous_delimiter = p.delimiter;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    case SplitBehavior::kContiguous:  // consecutive delimiters are one part
      for (size_t k = 0; k < parts.size(); ++k) {
        if (k > 0 && parts[k].delimiter == parts[k - 1].delimiter) {
          kept.back().second = parts[k].end;
        } else {
          kept.emplace_back(parts[k].begin, parts[k].end);
        }
      }
      break;
  }
}

}  // namespace

void split_piece(std::string_view piece, bool at_start, const Matches& matches, SplitBehavior behavior, bool invert,
                 Pieces& out) {
  if (matches.empty() && behavior != SplitBehavior::kRemoved) {  // the common case of a whole piece
    out.add(piece, at_start);
    return;
  }
  thread_local std::vector<Part> parts;
  thread_local std::vector<std::pair<size_t, size_t>> kept;
  parts.clear();
  kept.clear();
  size_t done = 0;
  for (const auto& [begin, end] : matches) {
    if (begin > done) parts.push_back(Part{done, begin, invert});
    parts.push_back(Part{begin, end, !invert});
    done = end;
  }
  if (done < piece.size()) parts.push_back(Part{done, piece.size(), invert});
  kept_ranges(parts, behavior, kept);
  for (const auto& [begin, end] : kept) out.add(piece.substr(begin, end - begin), at_start && begin == 0);
}

std::unique_ptr<PreTokenizer> make_regex_split(const std::string& pattern, const std::string& where) {
  return std::make_unique<SplitPreTokenizer>(Pattern(std::make_shared<const Regex>(pattern, where)),
                                             SplitBehavior::kIsolated, false);
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonAt& config) {
  const std::string type = config.str("type");
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (const JsonAt& step : config.items("pretokenizers")) steps.push_back(make_pre_tokenizer(step));
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  if (type == "Split") {
    return std::make_unique<SplitPreTokenizer>(parse_pattern(config), parse_behavior(config, SplitBehavior::kIsolated),
                                               config.flag_or("invert", false));
  }
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(config.flag_or("add_prefix_space", true),
                                                   config.flag_or("use_regex", true),
                                                   config.file() + ": " + config.path());
  }
  if (type == "Metaspace") {
    return std::make_unique<MetaspacePreTokenizer>(single_char(config, "replacement", "\xE2\x96\x81"),
                                                   parse_prepend_scheme(config), config.flag_or("split", true));
  }
  if (type == "Digits") {
    const bool individual = config.flag_or("individual_digits", false);
    return char_class(is_numeric, individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous);
  }
  if (type == "Punctuation") return char_class(is_punctuation, parse_behavior(config, SplitBehavior::kIsolated));
  if (type == "WhitespaceSplit") return char_class(is_white_space, SplitBehavior::kRemoved);
  if (type == "Whitespace") {
    return std::make_unique<SplitPreTokenizer>(
        Pattern(std::make_shared<const Regex>(R"(\w+|[^\w\s]+)", config.file() + ": " + config.path())),
        SplitBehavior::kRemoved, true);
  }
  config.unsupported_type(type, kSupported);
}

}  // namespace zeroshard::text::detail
