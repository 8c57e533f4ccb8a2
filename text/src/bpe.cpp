// SPDX-License-Identifier: Apache-2.0
#include "bpe.h"

#include <algorithm>

#include "json_file.h"
#include "unicode.h"
#include "zeroshard/base/error.h"

namespace zeroshard::text::detail {

namespace {

std::string byte_token(uint8_t b) {
  static const char* hex = "0123456789ABCDEF";
  return std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
}

}  // namespace

BpeModel::BpeModel(std::vector<std::pair<std::string, int32_t>> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
                   const std::string& where)
    : options_(std::move(options)) {
  int32_t max_id = -1;
  for (const auto& [token, id] : vocab) max_id = std::max(max_id, id);
  tokens_.resize(static_cast<size_t>(max_id + 1));
  has_token_.assign(tokens_.size(), false);
  for (auto& [token, id] : vocab) {
    vocab_.insert(token, id);
    has_token_[id] = true;
    tokens_[id] = std::move(token);
  }
  if (options_.unk_token) {
    const int32_t* unk = vocab_.find(*options_.unk_token);
    ZS_REQUIRE(unk != nullptr, ConfigError, where, ": model.unk_token '", *options_.unk_token,
               "' is not in model.vocab");
    unk_id_ = *unk;
  }
  for (int b = 0; b < 256; ++b) {
    const int32_t* id = vocab_.find(byte_token(static_cast<uint8_t>(b)));
    byte_ids_[b] = id ? *id : -1;
  }
  const std::string& prefix = options_.continuing_subword_prefix;
  std::string merged;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    // Plain references, not a structured binding: C++17 lambdas cannot capture one (clang refuses).
    const std::string& left = merges[rank].first;
    const std::string& right = merges[rank].second;
    const auto lookup = [&](const std::string& token) {
      const int32_t* id = vocab_.find(token);
      ZS_REQUIRE(id != nullptr, ConfigError, where, ": model.merges[", rank, "] ('", left, "' + '", right,
                 "') names '", token, "', which is not in model.vocab");
      return *id;
    };
    const int32_t a = lookup(left), b = lookup(right);
    merged = left;
    const bool strip = !prefix.empty() && right.compare(0, prefix.size(), prefix) == 0;
    merged.append(right, strip ? prefix.size() : 0, std::string::npos);
    merges_.insert(a, b, MergeMap::Merge{static_cast<int32_t>(rank), lookup(merged)});
  }
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const int32_t* id = vocab_.find(token);
  return id ? std::optional<int32_t>(*id) : std::nullopt;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= size() || !has_token_[id]) return nullptr;
  return &tokens_[id];
}

void BpeModel::initial_symbols(std::string_view piece, std::vector<Symbol>& symbols) const {
  const bool affixes = !options_.continuing_subword_prefix.empty() || !options_.end_of_word_suffix.empty();
  std::string affixed;
  bool pending_unk = false;
  const auto push = [&](int32_t id) {
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back(Symbol{id, n - 1, -1});
    if (n > 0) symbols[n - 1].next = n;
  };
  size_t i = 0;
  while (i < piece.size()) {
    const size_t begin = i;
    i += utf8_length(static_cast<unsigned char>(piece[i]));
    std::string_view ch = piece.substr(begin, i - begin);
    if (affixes) {
      affixed.clear();
      if (begin > 0) affixed += options_.continuing_subword_prefix;
      affixed += ch;
      if (i == piece.size()) affixed += options_.end_of_word_suffix;
      ch = affixed;
    }
    if (const int32_t* id = vocab_.find(ch)) {
      if (pending_unk) push(unk_id_);
      pending_unk = false;
      push(*id);
      continue;
    }
    if (options_.byte_fallback &&
        std::all_of(ch.begin(), ch.end(), [&](char c) { return byte_ids_[static_cast<unsigned char>(c)] >= 0; })) {
      if (pending_unk) push(unk_id_);
      pending_unk = false;
      for (const char c : ch) push(byte_ids_[static_cast<unsigned char>(c)]);
      continue;
    }
    if (unk_id_ < 0) continue;  // no unk token: the character has no token at all
    if (pending_unk && !options_.fuse_unk) push(unk_id_);
    pending_unk = true;
  }
  if (pending_unk) push(unk_id_);
}

void BpeModel::merge_all(std::vector<Symbol>& symbols) const {
  struct Candidate {
    int32_t rank, pos, merged;
  };
  // Lowest rank first, then leftmost.
  const auto later = [](const Candidate& x, const Candidate& y) {
    return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos;
  };
  std::vector<Candidate> heap;
  const auto consider = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    if (const MergeMap::Merge* m = merges_.find(symbols[pos].id, symbols[next].id)) {
      heap.push_back(Candidate{m->rank, pos, m->merged});
      std::push_heap(heap.begin(), heap.end(), later);
    }
  };
  for (int32_t pos = 0; pos + 1 < static_cast<int32_t>(symbols.size()); ++pos) consider(pos);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& left = symbols[c.pos];
    if (left.prev == -2 || left.next < 0) continue;
    const MergeMap::Merge* m = merges_.find(left.id, symbols[left.next].id);
    if (m == nullptr || m->merged != c.merged) continue;  // stale: a neighbour changed since
    Symbol& right = symbols[left.next];
    left.id = c.merged;
    left.next = right.next;
    right.prev = -2;
    if (left.next >= 0) symbols[left.next].prev = c.pos;
    if (left.prev >= 0) consider(left.prev);
    consider(c.pos);
  }
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (options_.ignore_merges) {
    if (const int32_t* id = vocab_.find(piece)) {
      out.push_back(*id);
      return;
    }
  }
  thread_local std::vector<Symbol> symbols;
  symbols.clear();
  initial_symbols(piece, symbols);
  if (symbols.empty()) return;
  if (symbols.size() > 1) merge_all(symbols);
  for (int32_t pos = 0; pos >= 0; pos = symbols[pos].next) out.push_back(symbols[pos].id);
}

std::unique_ptr<Model> make_bpe_model(const JsonAt& model) {
  if (auto dropout = model.find("dropout")) {
    if (!dropout->value().is_number() || dropout->value().get<double>() != 0.0) {
      dropout->fail("BPE dropout (random merges) is not supported; set it to null");
    }
  }
  BpeOptions options;
  if (auto unk = model.find("unk_token")) options.unk_token = unk->as_str();
  options.byte_fallback = model.flag_or("byte_fallback", false);
  options.fuse_unk = model.flag_or("fuse_unk", false);
  options.ignore_merges = model.flag_or("ignore_merges", false);
  options.continuing_subword_prefix = model.str_or("continuing_subword_prefix", "");
  options.end_of_word_suffix = model.str_or("end_of_word_suffix", "");

  const JsonAt vocab_at = model.at("vocab");
  if (!vocab_at.value().is_object()) vocab_at.fail(std::string("expected an object of token: id, got ") +
                                                   json_type_name(vocab_at.value()));
  std::vector<std::pair<std::string, int32_t>> vocab;
  vocab.reserve(vocab_at.value().size());
  for (const auto& [token, id] : vocab_at.value().items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMaxTokenId) {
      vocab_at.fail("token '" + token + "' has id " + id.dump() + ", expected an integer in [0, 2^24)");
    }
    vocab.emplace_back(token, static_cast<int32_t>(id.get<int64_t>()));
  }

  std::vector<std::pair<std::string, std::string>> merges;
  if (auto merges_at = model.find("merges")) {
    const Json& list = merges_at->value();
    if (!list.is_array()) merges_at->fail(std::string("expected an array, got ") + json_type_name(list));
    merges.reserve(list.size());
    for (size_t i = 0; i < list.size(); ++i) {
      const Json& m = list[i];
      if (m.is_string()) {
        const std::string& s = m.get_ref<const std::string&>();
        const size_t space = s.find(' ');
        if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
          merges_at->fail("entry " + std::to_string(i) + " '" + s + "' is not two tokens separated by one space");
        }
        merges.emplace_back(s.substr(0, space), s.substr(space + 1));
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        merges.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      } else {
        merges_at->fail("entry " + std::to_string(i) + " is " + m.dump() +
                        ", expected \"a b\" or [\"a\", \"b\"]");
      }
    }
  }
  return std::make_unique<BpeModel>(std::move(vocab), merges, std::move(options), model.file());
}

}  // namespace zeroshard::text::detail
