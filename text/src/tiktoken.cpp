// SPDX-License-Identifier: Apache-2.0
#include "tiktoken.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "loaders.h"
#include "pipeline.h"
#include "zeroshard/base/error.h"

namespace zeroshard::text::detail {

TiktokenModel::TiktokenModel(std::vector<std::pair<std::string, int32_t>> ranks, const std::string& where) {
  int32_t max_rank = -1;
  for (const auto& [bytes, rank] : ranks) max_rank = std::max(max_rank, rank);
  tokens_.resize(static_cast<size_t>(max_rank + 1));
  has_token_.assign(tokens_.size(), false);
  for (auto& [bytes, rank] : ranks) {
    ranks_.insert(bytes, rank);
    has_token_[rank] = true;
    tokens_[rank] = std::move(bytes);
  }
  for (int b = 0; b < 256; ++b) {
    ZS_REQUIRE(rank_of(std::string(1, static_cast<char>(b))) >= 0, ConfigError, where, ": byte ", b,
               " has no rank (every single byte must be a token)");
  }
}

std::optional<int32_t> TiktokenModel::token_to_id(std::string_view token) const {
  const int32_t r = rank_of(token);
  return r >= 0 ? std::optional<int32_t>(r) : std::nullopt;
}

const std::string* TiktokenModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= size() || !has_token_[id]) return nullptr;
  return &tokens_[id];
}

void TiktokenModel::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (const int32_t r = rank_of(piece); r >= 0) {
    out.push_back(r);
    return;
  }
  // Parts are byte ranges [start, next[start]); a candidate merges the part at `pos` with the one
  // after it, which must still end at `end`.
  struct Candidate {
    int32_t rank;
    uint32_t pos, end;
  };
  const auto later = [](const Candidate& x, const Candidate& y) {
    return x.rank != y.rank ? x.rank > y.rank : x.pos > y.pos;
  };
  const auto n = static_cast<uint32_t>(piece.size());
  thread_local std::vector<uint32_t> next, prev;
  thread_local std::vector<Candidate> heap;
  next.resize(n);
  prev.resize(n);
  heap.clear();
  const auto consider = [&](uint32_t pos, uint32_t end) {
    const int32_t r = rank_of(piece.substr(pos, end - pos));
    if (r < 0) return;
    heap.push_back(Candidate{r, pos, end});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  for (uint32_t i = 0; i < n; ++i) {
    next[i] = i + 1;
    prev[i] = i - 1;  // wraps for i = 0; never read there
  }
  for (uint32_t i = 0; i + 1 < n; ++i) consider(i, i + 2);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Candidate c = heap.back();
    heap.pop_back();
    const uint32_t right = next[c.pos];
    if (next[c.pos] == 0 || right >= n || next[right] != c.end) continue;  // stale
    next[c.pos] = c.end;
    next[right] = 0;  // merged away (no live part has next == 0)
    if (c.end < n) prev[c.end] = c.pos;
    if (c.pos > 0) consider(prev[c.pos], c.end);
    if (c.end < n) consider(c.pos, next[c.end]);
  }
  for (uint32_t s = 0; s < n; s = next[s]) out.push_back(rank_of(piece.substr(s, next[s] - s)));
}

bool base64_decode(std::string_view text, std::string& out) {
  out.clear();
  if (text.size() % 4 != 0) return false;
  const auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const int pad = last ? (text[i + 3] == '=') + (text[i + 2] == '=') : 0;
    if (pad == 1 && text[i + 2] == '=') return false;
    uint32_t group = 0;
    for (int k = 0; k < 4; ++k) {
      const int v = k >= 4 - pad ? 0 : value(text[i + k]);
      if (v < 0) return false;
      group = (group << 6) | static_cast<uint32_t>(v);
    }
    out.push_back(static_cast<char>(group >> 16));
    if (pad < 2) out.push_back(static_cast<char>((group >> 8) & 0xFF));
    if (pad < 1) out.push_back(static_cast<char>(group & 0xFF));
  }
  return true;
}

namespace {

// The encodings tiktoken files come from, told apart by their number of ranks: the split
// pattern and the special tokens are not in the file.
struct Encoding {
  const char* name;
  size_t ranks;
  const char* pattern;
  std::vector<std::pair<std::string, int32_t>> specials;
  const char* bos;  // nullptr: none, and nothing is added before the text
  const char* eos;
};

constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kCl100kPattern =
    R"('(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";
constexpr const char* kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Llama 3.1's 256 special tokens, ids 128000..128255.
std::vector<std::pair<std::string, int32_t>> llama3_specials() {
  std::vector<std::string> names = {"<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                                    "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>",
                                    "<|reserved_special_token_2|>", "<|start_header_id|>", "<|end_header_id|>",
                                    "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"};
  for (int i = 3; names.size() < 256; ++i) names.push_back("<|reserved_special_token_" + std::to_string(i) + "|>");
  std::vector<std::pair<std::string, int32_t>> out;
  for (size_t i = 0; i < names.size(); ++i) out.emplace_back(names[i], static_cast<int32_t>(128000 + i));
  return out;
}

const std::vector<Encoding>& encodings() {
  static const std::vector<Encoding> all = {
      {"gpt2 (r50k_base)", 50256, kGpt2Pattern, {{"<|endoftext|>", 50256}}, nullptr, "<|endoftext|>"},
      {"p50k_base", 50280, kGpt2Pattern, {{"<|endoftext|>", 50256}}, nullptr, "<|endoftext|>"},
      {"cl100k_base", 100256, kCl100kPattern,
       {{"<|endoftext|>", 100257}, {"<|fim_prefix|>", 100258}, {"<|fim_middle|>", 100259},
        {"<|fim_suffix|>", 100260}, {"<|endofprompt|>", 100276}},
       nullptr, "<|endoftext|>"},
      {"o200k_base", 199998, kO200kPattern, {{"<|endoftext|>", 199999}, {"<|endofprompt|>", 200018}}, nullptr,
       "<|endoftext|>"},
      {"Llama 3", 128000, kLlama3Pattern, llama3_specials(), "<|begin_of_text|>", "<|end_of_text|>"},
  };
  return all;
}

std::vector<std::pair<std::string, int32_t>> read_ranks(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZS_REQUIRE(in, IoError, path, ": cannot open: ", ::zeroshard::detail::errno_string(errno));
  std::vector<std::pair<std::string, int32_t>> ranks;
  std::string line, bytes;
  size_t line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    char* end = nullptr;
    const long rank = space == std::string::npos ? -1 : std::strtol(line.c_str() + space + 1, &end, 10);
    const bool rank_ok = rank >= 0 && rank <= kMaxTokenId && end != nullptr && *end == '\0' && space + 1 < line.size();
    ZS_REQUIRE(rank_ok && base64_decode(std::string_view(line).substr(0, space), bytes), ConfigError, path, ": line ",
               line_number, ": expected 'BASE64 RANK', got '", line.substr(0, 80), "'");
    ranks.emplace_back(bytes, static_cast<int32_t>(rank));
  }
  return ranks;
}

}  // namespace

bool looks_like_tiktoken(const std::string& head) {
  const size_t space = head.find(' ');
  const size_t newline = head.find('\n');
  if (space == std::string::npos || newline == std::string::npos || space > newline || space == 0) return false;
  std::string bytes;
  return base64_decode(std::string_view(head).substr(0, space), bytes) && space + 1 < newline &&
         head.find_first_not_of("0123456789", space + 1) == newline;
}

std::unique_ptr<Tokenizer> load_tiktoken(const std::string& path, const TokenizerConfig& config) {
  auto ranks = read_ranks(path);
  const Encoding* encoding = nullptr;
  for (const Encoding& e : encodings()) {
    if (e.ranks == ranks.size()) encoding = &e;
  }
  if (encoding == nullptr) {
    std::ostringstream known;
    for (const Encoding& e : encodings()) known << (known.tellp() > 0 ? ", " : "") << e.name << " " << e.ranks;
    ZS_THROW(ConfigError, path, ": a tiktoken rank file of ", ranks.size(),
             " tokens is none of the encodings whose split pattern and special tokens are known (", known.str(),
             " tokens); use the model's tokenizer.json");
  }
  PipelineParts parts;
  parts.model = std::make_unique<TiktokenModel>(std::move(ranks), path);
  parts.pre_tokenizer = make_regex_split(encoding->pattern, path + ": " + encoding->name + " split pattern");
  parts.decoder = make_raw_bytes_decoder();
  for (const auto& [content, id] : encoding->specials) {
    ZS_REQUIRE(parts.model->id_to_token(id) == nullptr, ConfigError, path, ": rank ", id, " is taken, but ",
               encoding->name, " has its special token ", content, " there");
    AddedToken t;
    t.id = id;
    t.content = content;
    t.special = true;
    t.normalized = false;
    parts.added_tokens.push_back(std::move(t));
  }
  TokenizerConfig with_defaults = config;
  if (!with_defaults.bos_token && encoding->bos) with_defaults.bos_token = encoding->bos;
  if (!with_defaults.eos_token && encoding->eos) with_defaults.eos_token = encoding->eos;
  if (encoding->bos) parts.post_processor = make_affix_processor({encoding->specials[0].second}, {});
  return std::make_unique<PipelineTokenizer>(std::move(parts), with_defaults, path + " (" + encoding->name + ")");
}

}  // namespace zeroshard::text::detail
