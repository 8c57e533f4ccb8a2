// SPDX-License-Identifier: Apache-2.0
#include "added_vocabulary.h"

#include <algorithm>

#include "normalizers.h"
#include "unicode.h"

namespace zeroshard::text::detail {

namespace {

char32_t code_point_before(std::string_view s, size_t at) {
  size_t start = at - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  return next_code_point(s, start);
}

// Start of the whitespace run that ends at `at`.
size_t whitespace_before(std::string_view s, size_t at, size_t floor) {
  while (at > floor) {
    size_t start = at - 1;
    while (start > floor && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t i = start;
    if (!is_white_space(next_code_point(s, i))) break;
    at = start;
  }
  return at;
}

// End of the whitespace run that starts at `at`.
size_t whitespace_after(std::string_view s, size_t at) {
  while (at < s.size()) {
    size_t i = at;
    if (!is_white_space(next_code_point(s, i))) break;
    at = i;
  }
  return at;
}

}  // namespace

void AddedVocabulary::Trie::add(std::string_view text, int32_t token) {
  int32_t node = 0;
  for (const char c : text) {
    const auto byte = static_cast<uint8_t>(c);
    auto& children = nodes[node].children;
    const auto it = std::find_if(children.begin(), children.end(), [&](const auto& p) { return p.first == byte; });
    if (it != children.end()) {
      node = it->second;
    } else {
      const auto next = static_cast<int32_t>(nodes.size());
      nodes[node].children.emplace_back(byte, next);  // `children` may dangle after the push below
      nodes.emplace_back();
      node = next;
    }
  }
  nodes[node].token = token;
  if (!text.empty()) first[static_cast<uint8_t>(text[0])] = true;
}

int32_t AddedVocabulary::Trie::longest_at(std::string_view text, size_t at, size_t& length) const {
  int32_t best = -1;
  int32_t node = 0;
  for (size_t i = at; i < text.size(); ++i) {
    const auto byte = static_cast<uint8_t>(text[i]);
    const auto& children = nodes[node].children;
    const auto it = std::find_if(children.begin(), children.end(), [&](const auto& p) { return p.first == byte; });
    if (it == children.end()) break;
    node = it->second;
    if (nodes[node].token >= 0) {
      best = nodes[node].token;
      length = i + 1 - at;
    }
  }
  return best;
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer)
    : tokens_(std::move(tokens)) {
  for (const AddedToken& t : tokens_) max_id_ = std::max(max_id_, t.id);
  index_of_id_.assign(static_cast<size_t>(max_id_ + 1), -1);
  for (size_t k = 0; k < tokens_.size(); ++k) {
    const AddedToken& t = tokens_[k];
    index_of_id_[t.id] = static_cast<int32_t>(k);
    by_content_.insert(t.content, t.id);
    if (t.content.empty()) continue;
    if (t.normalized && normalizer != nullptr) {
      std::string form = t.content;
      normalizer->normalize(form);
      normalized_.add(form, static_cast<int32_t>(k));
    } else if (t.normalized) {
      normalized_.add(t.content, static_cast<int32_t>(k));
    } else {
      raw_.add(t.content, static_cast<int32_t>(k));
    }
  }
}

void AddedVocabulary::split(std::string_view text, bool normalized_pass, std::vector<Span>& out) const {
  const Trie& trie = normalized_pass ? normalized_ : raw_;
  size_t done = 0;  // end of the last span
  size_t at = 0;
  while (at < text.size()) {
    size_t length = 0;
    const int32_t k = trie.first[static_cast<uint8_t>(text[at])] ? trie.longest_at(text, at, length) : -1;
    if (k < 0) {
      ++at;
      continue;
    }
    const AddedToken& token = tokens_[k];
    size_t begin = at, end = at + length;
    at = end;
    if (token.single_word) {
      const bool word_before = begin > 0 && is_word_char(code_point_before(text, begin));
      size_t i = end;
      const bool word_after = end < text.size() && is_word_char(next_code_point(text, i));
      if (word_before || word_after) continue;
    }
    if (token.lstrip) begin = whitespace_before(text, begin, done);
    if (token.rstrip) end = whitespace_after(text, end);
    if (begin > done) out.push_back(Span{done, begin, -1});
    out.push_back(Span{begin, end, token.id});
    done = at = end;
  }
  if (done < text.size()) out.push_back(Span{done, text.size(), -1});
}

std::optional<int32_t> AddedVocabulary::id_of(std::string_view content) const {
  const int32_t* id = by_content_.find(content);
  return id ? std::optional<int32_t>(*id) : std::nullopt;
}

const AddedToken* AddedVocabulary::find(int32_t id) const {
  if (id < 0 || id > max_id_ || index_of_id_[id] < 0) return nullptr;
  return &tokens_[index_of_id_[id]];
}

}  // namespace zeroshard::text::detail
