// SPDX-License-Identifier: Apache-2.0
#include "pipeline.h"

#include <algorithm>
#include <atomic>

#include "hash_map.h"
#include "unicode.h"
#include "zeroshard/base/error.h"

namespace zeroshard::text::detail {

namespace {

// Recently encoded pieces of one tokenizer on one thread. Text repeats (Zipf), so most pieces
// are found here. A flat open-addressing table over two arenas (piece bytes, ids); it starts over
// when full.
class PieceCache {
 public:
  static constexpr size_t kCapacity = 1 << 16;  // pieces
  static constexpr size_t kMaxPieceBytes = 256;

  PieceCache() : slots_(kCapacity * 2) {}

  // The ids of `piece`, or false.
  bool find(std::string_view piece, uint64_t hash, std::vector<int32_t>& out) const {
    for (size_t i = hash & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
      const Slot& s = slots_[i];
      if (s.key_length == kEmpty) return false;
      if (s.hash == hash && std::string_view(keys_.data() + s.key_offset, s.key_length) == piece) {
        out.insert(out.end(), ids_.begin() + s.ids_offset, ids_.begin() + s.ids_offset + s.ids_length);
        return true;
      }
    }
  }

  void insert(std::string_view piece, uint64_t hash, const int32_t* ids, size_t n) {
    if (count_ >= kCapacity) clear();
    size_t i = hash & (slots_.size() - 1);
    while (slots_[i].key_length != kEmpty) i = (i + 1) & (slots_.size() - 1);
    slots_[i] = Slot{hash, static_cast<uint32_t>(keys_.size()), static_cast<uint32_t>(piece.size()),
                     static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(n)};
    keys_.append(piece);
    ids_.insert(ids_.end(), ids, ids + n);
    ++count_;
  }

 private:
  static constexpr uint32_t kEmpty = UINT32_MAX;
  struct Slot {
    uint64_t hash = 0;
    uint32_t key_offset = 0, key_length = kEmpty, ids_offset = 0, ids_length = 0;
  };
  void clear() {
    std::fill(slots_.begin(), slots_.end(), Slot{});
    keys_.clear();
    ids_.clear();
    count_ = 0;
  }
  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<int32_t> ids_;
  size_t count_ = 0;
};

PieceCache& piece_cache(uint64_t tokenizer) {
  // Per thread, a few tokenizers' caches (a new tokenizer beyond that starts the list over).
  thread_local std::vector<std::pair<uint64_t, std::unique_ptr<PieceCache>>> caches;
  for (auto& [id, cache] : caches) {
    if (id == tokenizer) return *cache;
  }
  if (caches.size() >= 4) caches.clear();
  caches.emplace_back(tokenizer, std::make_unique<PieceCache>());
  return *caches.back().second;
}

uint64_t next_cache_id() {
  static std::atomic<uint64_t> next{1};
  return next++;
}

}  // namespace

PipelineTokenizer::PipelineTokenizer(PipelineParts parts, const TokenizerConfig& config, std::string source)
    : parts_(std::move(parts)), source_(std::move(source)), cache_id_(next_cache_id()) {
  // tokenizer_config.json's added_tokens_decoder adds the tokens tokenizer.json lacks.
  for (const AddedToken& t : config.added_tokens_decoder) {
    const bool known = std::any_of(parts_.added_tokens.begin(), parts_.added_tokens.end(),
                                   [&](const AddedToken& a) { return a.id == t.id; });
    if (!known) parts_.added_tokens.push_back(t);
  }
  added_ = AddedVocabulary(parts_.added_tokens, parts_.normalizer.get());
  vocab_size_ = std::max(parts_.model->size(), added_.max_id() + 1);
  apply_config(config);
}

std::optional<int32_t> PipelineTokenizer::config_token_id(const TokenizerConfig& config,
                                                          const std::optional<std::string>& token,
                                                          const char* key) const {
  if (!token) return std::nullopt;
  const auto id = token_to_id(*token);
  ZS_REQUIRE(id.has_value(), ConfigError, config.file, ": ", key, " '", *token, "' is not in the vocabulary of ",
             source_);
  return id;
}

void PipelineTokenizer::apply_config(const TokenizerConfig& config) {
  bos_id_ = config_token_id(config, config.bos_token, "bos_token");
  eos_id_ = config_token_id(config, config.eos_token, "eos_token");
  pad_id_ = config_token_id(config, config.pad_token, "pad_token");
  bos_token_ = config.bos_token.value_or("");
  eos_token_ = config.eos_token.value_or("");
  chat_template_ = config.chat_template;
  clean_up_spaces_ = config.clean_up_tokenization_spaces;
  if (config.add_bos_token || config.add_eos_token) {
    std::vector<int32_t> prefix, suffix;
    if (config.add_bos_token.value_or(false)) {
      ZS_REQUIRE(bos_id_.has_value(), ConfigError, config.file, ": add_bos_token is true but there is no bos_token");
      prefix.push_back(*bos_id_);
    }
    if (config.add_eos_token.value_or(false)) {
      ZS_REQUIRE(eos_id_.has_value(), ConfigError, config.file, ": add_eos_token is true but there is no eos_token");
      suffix.push_back(*eos_id_);
    }
    parts_.post_processor = make_affix_processor(std::move(prefix), std::move(suffix));
  }
}

std::vector<int32_t> PipelineTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const size_t bad = find_invalid_utf8(text);
  ZS_REQUIRE(bad == std::string_view::npos, UsageError, source_, ": encode: the text is not valid UTF-8 (byte ", bad,
             " of ", text.size(), ")");
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<AddedVocabulary::Span> spans;
  added_.split(text, false, spans);
  for (const auto& span : spans) {
    if (span.id >= 0) {
      ids.push_back(span.id);
    } else {
      encode_section(text.substr(span.begin, span.end - span.begin), span.begin == 0, ids);
    }
  }
  if (parts_.post_processor) parts_.post_processor->process(ids, add_special_tokens);
  return ids;
}

void PipelineTokenizer::encode_section(std::string_view text, bool at_start, std::vector<int32_t>& ids) const {
  std::string normalized_text;
  std::string_view normalized = text;
  if (parts_.normalizer) {
    normalized_text.assign(text);
    parts_.normalizer->normalize(normalized_text);
    normalized = normalized_text;
  }
  if (normalized.empty()) return;
  std::vector<AddedVocabulary::Span> spans;
  added_.split(normalized, true, spans);
  Pieces section, pieces;
  for (const auto& span : spans) {
    if (span.id >= 0) {
      ids.push_back(span.id);
      continue;
    }
    section.clear();
    section.add(normalized.substr(span.begin, span.end - span.begin), at_start && span.begin == 0);
    const Pieces* words = &section;
    if (parts_.pre_tokenizer) {
      pieces.clear();
      parts_.pre_tokenizer->split(section, pieces);
      words = &pieces;
    }
    for (size_t i = 0; i < words->size(); ++i) encode_piece((*words)[i], ids);
  }
}

void PipelineTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& ids) const {
  if (piece.size() > PieceCache::kMaxPieceBytes) {
    parts_.model->encode(piece, ids);
    return;
  }
  PieceCache& cache = piece_cache(cache_id_);
  const uint64_t hash = hash_bytes(piece);
  if (cache.find(piece, hash, ids)) return;
  const size_t first = ids.size();
  parts_.model->encode(piece, ids);
  cache.insert(piece, hash, ids.data() + first, ids.size() - first);
}

const std::string* PipelineTokenizer::token_text(int32_t id) const {
  if (const AddedToken* t = added_.find(id)) return &t->content;
  return parts_.model->id_to_token(id);
}

std::optional<int32_t> PipelineTokenizer::token_to_id(std::string_view token) const {
  if (auto id = added_.id_of(token)) return id;
  return parts_.model->token_to_id(token);
}

std::string PipelineTokenizer::id_to_token(int32_t id) const {
  const std::string* text = token_text(id);
  ZS_REQUIRE(text != nullptr, UsageError, source_, ": token id ", id, " is not in the vocabulary (",
             vocab_size_, " ids)");
  return *text;
}

std::string PipelineTokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string* text = token_text(ids[i]);
    ZS_REQUIRE(text != nullptr, UsageError, source_, ": decode: token id ", ids[i], " (position ", i,
               ") is not in the vocabulary (", vocab_size_, " ids)");
    if (skip_special_tokens) {
      const AddedToken* added = added_.find(ids[i]);
      if (added != nullptr && added->special) continue;
    }
    tokens.push_back(*text);
  }
  std::string out;
  if (parts_.decoder) {
    parts_.decoder->decode_chain(tokens);
    for (const std::string& t : tokens) out += t;
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) out += ' ';
      out += tokens[i];
    }
  }
  return clean_up_spaces_ ? clean_up_tokenization(std::move(out)) : out;
}

}  // namespace zeroshard::text::detail
