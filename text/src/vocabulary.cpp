// SPDX-License-Identifier: Apache-2.0
// read_vocabulary (vocabulary.h): a tokenizer's files as a TokenizerVocabulary. The ids, the
// special tokens and what encoding adds around the text come from the tokenizer as load_tokenizer
// builds it, so the data agrees with this library's encode; the merges, scores and split regexes
// come from the files.

#include "zeroshard/text/vocabulary.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <unordered_map>

#include "json_file.h"
#include "loaders.h"
#include "zeroshard/base/error.h"

namespace zeroshard::text {

namespace {

using detail::JsonAt;

constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

bool is_file(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string head_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZS_REQUIRE(in, IoError, path, ": cannot open: ", ::zeroshard::detail::errno_string(errno));
  std::string head(256, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  return head;
}

// The tokenizer file of a directory, as load_tokenizer picks it.
std::string tokenizer_file(const std::string& path) {
  struct stat st{};
  ZS_REQUIRE(::stat(path.c_str(), &st) == 0, IoError, path, ": cannot read a tokenizer: ",
             ::zeroshard::detail::errno_string(errno));
  if (!S_ISDIR(st.st_mode)) return path;
  for (const char* name : {"tokenizer.json", "tokenizer.model"}) {
    if (is_file(path + "/" + name)) return path + "/" + name;
  }
  ZS_THROW(UsageError, path, ": no tokenizer.json or tokenizer.model in this directory");
}

std::string directory_of(const std::string& file) {
  const size_t slash = file.rfind('/');
  return slash == std::string::npos ? "." : file.substr(0, slash);
}

bool is_byte_token(const std::string& t) {
  return t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::isxdigit(static_cast<unsigned char>(t[3])) &&
         std::isxdigit(static_cast<unsigned char>(t[4]));
}

// ---- what encoding adds around the text ----

// BOS/EOS as encode(text, true) adds them: at most one id before and one after the text.
void find_added_specials(const Tokenizer& tok, TokenizerVocabulary& v) {
  const std::vector<int32_t> plain = tok.encode("a", false), full = tok.encode("a", true);
  const auto at = std::search(full.begin(), full.end(), plain.begin(), plain.end());
  ZS_CHECK(at != full.end(), v.source, ": encoding with special tokens does not contain the plain encoding");
  const auto before = at - full.begin();
  const auto after = full.end() - (at + static_cast<std::ptrdiff_t>(plain.size()));
  ZS_REQUIRE(before <= 1 && after <= 1, UsageError, v.source, ": encoding adds ", before, " tokens before and ", after,
             " after the text; GGUF's tokenizer adds at most one before (BOS) and one after (EOS)");
  const auto adopt = [&](std::optional<int32_t>& id, int32_t added, const char* what) {
    ZS_REQUIRE(!id || *id == added, UsageError, v.source, ": encoding adds token ", added, " as the ", what,
               ", but the ", what, " token is ", *id);
    id = added;
  };
  v.add_bos = before == 1;
  v.add_eos = after == 1;
  if (v.add_bos) adopt(v.bos_id, full.front(), "BOS");
  if (v.add_eos) adopt(v.eos_id, full.back(), "EOS");
}

// ---- tokenizer.json ----

// The regex of each step of the pre-tokenizer (GPT-2's for a ByteLevel step with use_regex);
// whether a ByteLevel step is there in `byte_level`.
void collect_splits(const JsonAt& pre, std::vector<std::string>& patterns, bool& byte_level) {
  const std::string type = pre.str("type");
  if (type == "Sequence") {
    for (const JsonAt& step : pre.items("pretokenizers")) collect_splits(step, patterns, byte_level);
  } else if (type == "ByteLevel") {
    byte_level = true;
    if (pre.flag_or("use_regex", true)) patterns.push_back(kGpt2Pattern);
  } else if (type == "Split" && pre.at("pattern").has("Regex")) {
    const std::string behavior = pre.str_or("behavior", "Isolated");
    ZS_REQUIRE(behavior == "Isolated" && !pre.flag_or("invert", false), UsageError, pre.file(), ": ", pre.path(),
               ": a Split with behavior '", behavior, "'", pre.flag_or("invert", false) ? " and invert" : "",
               " cannot be written to GGUF (only Isolated matches are)");
    patterns.push_back(pre.at("pattern").str("Regex"));
  } else {
    ZS_THROW(UsageError, pre.file(), ": ", pre.path(), ": the pre-tokenizer '", type,
             "' cannot be written to GGUF (supported before byte-level BPE: Split on a regex, ByteLevel)");
  }
}

std::vector<std::string> merge_strings(const JsonAt& model) {
  std::vector<std::string> out;
  const auto at = model.find("merges");
  if (!at) return out;
  for (const JsonAt& m : at->items()) {
    out.push_back(m.value().is_string() ? m.as_str() : m.items()[0].as_str() + " " + m.items()[1].as_str());
  }
  return out;
}

// Scores for a SentencePiece-style vocabulary given as merges: a token made by an earlier merge
// scores higher (llama.cpp's SentencePiece tokenizer merges the best-scoring pair first).
std::vector<float> scores_from_merges(const std::vector<std::string>& merges,
                                      const std::unordered_map<std::string, int32_t>& ids, size_t size) {
  std::vector<float> scores(size, 0.0f);
  std::vector<bool> made(size, false);
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    std::string merged = merges[rank];
    merged.erase(merged.find(' '), 1);
    const auto it = ids.find(merged);
    if (it == ids.end() || made[it->second]) continue;
    made[it->second] = true;
    scores[it->second] = -static_cast<float>(rank + 1);
  }
  return scores;
}

void fill_json_tokens(const JsonAt& root, const JsonAt& model, const Tokenizer& tok, TokenizerVocabulary& v) {
  const auto size = static_cast<size_t>(tok.vocab_size());
  v.tokens.assign(size, "");
  v.kinds.assign(size, TokenKind::kUnused);
  std::unordered_map<std::string, int32_t> ids;
  for (const auto& [token, id] : model.at("vocab").value().items()) {
    const auto i = id.get<int32_t>();
    v.tokens[i] = token;
    v.kinds[i] = v.model == VocabularyModel::kSentencePieceBpe && is_byte_token(token) ? TokenKind::kByte
                                                                                       : TokenKind::kNormal;
    ids.emplace(token, i);
  }
  if (const auto unk = model.find("unk_token")) {
    if (const auto it = ids.find(unk->as_str()); it != ids.end()) v.unk_id = it->second;
  }
  if (const auto added = root.find("added_tokens")) {
    for (const JsonAt& t : added->items()) {
      const auto id = static_cast<size_t>(t.integer("id"));
      v.tokens[id] = t.str("content");
      v.kinds[id] = t.flag_or("special", false) ? TokenKind::kControl : TokenKind::kUserDefined;
    }
  }
  if (v.unk_id) v.kinds[*v.unk_id] = TokenKind::kUnknown;
  const std::vector<std::string> merges = merge_strings(model);
  if (v.model == VocabularyModel::kSentencePieceBpe) {
    v.scores = scores_from_merges(merges, ids, size);
  } else {
    v.merges = merges;
  }
}

// GGUF's SentencePiece tokenizer puts '▁' before every text and after every special token, as
// SentencePiece and Prepend normalizers do; a Metaspace pre-tokenizer that prepends only at the
// start of the input (or never) tokenizes differently, so it is refused.
void check_metaspace(const JsonAt& pre) {
  const std::string type = pre.str("type");
  if (type == "Sequence") {
    for (const JsonAt& step : pre.items("pretokenizers")) check_metaspace(step);
    return;
  }
  if (type != "Metaspace") return;
  const std::string scheme = pre.str_or("prepend_scheme", pre.flag_or("add_prefix_space", true) ? "always" : "never");
  ZS_REQUIRE(scheme == "always", UsageError, pre.file(), ": ", pre.path(), ": a Metaspace pre-tokenizer with prepend_scheme '",
             scheme, "' cannot be written to GGUF (its SentencePiece tokenizer prepends '\xE2\x96\x81' to every text "
             "and after every special token); export the model's SentencePiece tokenizer.model instead");
}

// UsageError for a model other than BPE (before the tokenizer is loaded, which refuses more).
void check_json_model(const JsonAt& root) {
  const JsonAt model = root.at("model");
  const std::string type = model.str_or("type", model.has("merges") ? "BPE" : "");
  ZS_REQUIRE(type == "BPE", UsageError, root.file(), ": the tokenizer model type '", type,
             "' cannot be written to GGUF (supported: BPE, byte-level or SentencePiece-style with byte_fallback)");
}

TokenizerVocabulary from_tokenizer_json(const std::string& file, const JsonAt& root, const Tokenizer& tok) {
  const JsonAt model = root.at("model");
  TokenizerVocabulary v;
  v.source = file;
  v.model = model.flag_or("byte_fallback", false) ? VocabularyModel::kSentencePieceBpe : VocabularyModel::kByteLevelBpe;
  if (v.model == VocabularyModel::kByteLevelBpe) {
    bool byte_level = false;
    if (const auto pre = root.find("pre_tokenizer")) collect_splits(*pre, v.split_patterns, byte_level);
    ZS_REQUIRE(byte_level, UsageError, file,
               ": a BPE model that is neither byte-level (no ByteLevel pre-tokenizer) nor SentencePiece-style "
               "(no byte_fallback) cannot be written to GGUF");
  }
  if (const auto pre = root.find("pre_tokenizer"); pre && v.model == VocabularyModel::kSentencePieceBpe) {
    check_metaspace(*pre);
  }
  fill_json_tokens(root, model, tok, v);
  return v;
}

// ---- SentencePiece tokenizer.model ----

// A varint of protobuf's wire format at `at`, advancing it; false at the end of the data.
bool read_varint(const std::string& data, size_t& at, uint64_t& value) {
  value = 0;
  for (int shift = 0; at < data.size() && shift < 64; shift += 7) {
    const auto byte = static_cast<uint8_t>(data[at++]);
    value |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

// Field `field` of the protobuf message `data`, the last occurrence as protobuf reads it: a varint
// as its value, a length-delimited field as its bytes; nullopt when absent or malformed.
struct ProtoField {
  uint64_t varint = 0;
  std::string bytes;
};
std::optional<ProtoField> proto_field(const std::string& data, uint32_t field) {
  std::optional<ProtoField> found;
  size_t at = 0;
  uint64_t key = 0, value = 0;
  while (read_varint(data, at, key)) {
    const bool wanted = (key >> 3) == field;
    switch (key & 7) {
      case 0:
        if (!read_varint(data, at, value)) return std::nullopt;
        if (wanted) found = ProtoField{value, ""};
        break;
      case 1: at += 8; break;
      case 5: at += 4; break;
      case 2:
        if (!read_varint(data, at, value) || value > data.size() - at) return std::nullopt;
        if (wanted) found = ProtoField{0, data.substr(at, value)};
        at += value;
        break;
      default: return std::nullopt;
    }
  }
  return found;
}

// GGUF's SentencePiece tokenizer does not normalize and keeps runs of spaces, as Llama's and
// Mistral's models are trained; a model that normalizes (NormalizerSpec: name 1, default
// "nmt_nfkc"; remove_extra_whitespaces 4, default true) would tokenize differently.
void check_sentencepiece_normalizer(const std::string& model, const std::string& file) {
  const std::string spec = proto_field(model, 3).value_or(ProtoField{}).bytes;  // ModelProto.normalizer_spec
  const std::string name = proto_field(spec, 1).value_or(ProtoField{0, "nmt_nfkc"}).bytes;
  const bool collapses = proto_field(spec, 4).value_or(ProtoField{1, ""}).varint != 0;
  ZS_REQUIRE(name == "identity" && !collapses, UsageError, file, ": a SentencePiece model with normalization '", name,
             "'", collapses ? " that removes extra whitespace" : "",
             " cannot be written to GGUF (llama.cpp's SentencePiece tokenizer does neither; supported: "
             "normalization 'identity' keeping whitespace, as Llama and Mistral use)");
}

TokenizerVocabulary from_sentencepiece(const std::string& file, const Tokenizer& tok) {
  const auto sp = detail::open_sentencepiece(file);
  // ModelProto.trainer_spec (2) .model_type (3): UNIGRAM = 1 (the default), BPE = 2, WORD = 3, CHAR = 4.
  const std::string model = sp->serialized_model();
  const std::string trainer = proto_field(model, 2).value_or(ProtoField{}).bytes;
  const uint64_t type = proto_field(trainer, 3).value_or(ProtoField{1, ""}).varint;
  static const char* const kTypes[] = {"?", "Unigram", "BPE", "Word", "Char"};
  ZS_REQUIRE(type == 2, UsageError, file, ": a SentencePiece ", type < 5 ? kTypes[type] : "unknown",
             " model cannot be written to GGUF (supported: SentencePiece BPE, as Llama and Mistral use)");
  check_sentencepiece_normalizer(model, file);
  TokenizerVocabulary v;
  v.source = file;
  v.model = VocabularyModel::kSentencePieceBpe;
  const auto size = static_cast<size_t>(tok.vocab_size());
  v.tokens.assign(size, "");
  v.kinds.assign(size, TokenKind::kUnused);
  v.scores.assign(size, 0.0f);
  for (int id = 0; id < sp->piece_size(); ++id) {
    v.tokens[id] = sp->id_to_piece(id);
    v.scores[id] = sp->score(id);
    v.kinds[id] = sp->is_unknown(id)   ? TokenKind::kUnknown
                  : sp->is_control(id) ? TokenKind::kControl
                  : sp->is_byte(id)    ? TokenKind::kByte
                  : sp->is_unused(id)  ? TokenKind::kUnused
                                       : TokenKind::kNormal;
  }
  if (sp->unk_id() >= 0) v.unk_id = sp->unk_id();
  const auto config = detail::read_tokenizer_config(directory_of(file) + "/tokenizer_config.json");
  for (const detail::AddedToken& t : config.added_tokens_decoder) {
    if (t.id < sp->piece_size()) continue;
    v.tokens[t.id] = t.content;
    v.kinds[t.id] = t.special ? TokenKind::kControl : TokenKind::kUserDefined;
  }
  return v;
}

}  // namespace

const char* gpt2_split_pattern() { return kGpt2Pattern; }

TokenizerVocabulary read_vocabulary(const std::string& path) {
  const std::string file = tokenizer_file(path);
  std::string head = head_of(file);
  if (head.rfind("\xEF\xBB\xBF", 0) == 0) head.erase(0, 3);
  const size_t first = head.find_first_not_of(" \t\r\n");
  const bool json = (file.size() >= 5 && file.compare(file.size() - 5, 5, ".json") == 0) ||
                    (first != std::string::npos && head[first] == '{');
  ZS_REQUIRE(json || !detail::looks_like_tiktoken(head), UsageError, file,
             ": a tiktoken rank file cannot be written to GGUF (supported: tokenizer.json, SentencePiece BPE "
             "tokenizer.model)");
  detail::Json parsed;
  if (json) {
    parsed = detail::read_json_file(file);
    check_json_model(JsonAt(parsed, file, ""));
  }
  const std::unique_ptr<Tokenizer> tok = load_tokenizer(file);
  TokenizerVocabulary v = json ? from_tokenizer_json(file, JsonAt(parsed, file, ""), *tok) : from_sentencepiece(file, *tok);
  v.bos_id = tok->bos_id();
  v.eos_id = tok->eos_id();
  v.pad_id = tok->pad_id();
  find_added_specials(*tok, v);
  return v;
}

}  // namespace zeroshard::text
