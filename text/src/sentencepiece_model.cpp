// SPDX-License-Identifier: Apache-2.0
// SentencePiece models (tokenizer.model, a protobuf) through the SentencePiece library itself,
// loaded as a private module (sentencepiece_backend.h). As transformers' Llama tokenizers do,
// special tokens written in the text (<s>, </s>, <unk>, and tokenizer_config.json's added tokens)
// are matched first and each stretch of text between them is encoded by SentencePiece; BOS is
// added unless tokenizer_config.json says add_bos_token: false, EOS when it says add_eos_token: true.

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <memory>

#include "added_vocabulary.h"
#include "loaders.h"
#include "sentencepiece_backend.h"
#include "unicode.h"
#include "zeroshard/base/error.h"

namespace zeroshard::text::detail {

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

// The module's open function, loaded once: beside libzs_text (build tree and installs alike), else
// in the build's or the installation's library folder.
OpenSentencePiece open_function(const std::string& model_path) {
  // AddressSanitizer's runtime ends the process on any dlopen with RTLD_DEEPBIND (its malloc
  // interposition cannot hold inside a deep-bound library), and without it libsentencepiece's
  // protobuf copy interposes on the process's: no way to load the module in such a build.
  ZS_REQUIRE(!kAddressSanitizer, ConfigError, model_path, ": SentencePiece support (", kSentencePieceModule,
             ") is not available in a build with AddressSanitizer: the module must be loaded with RTLD_DEEPBIND, "
             "which the sanitizer's runtime refuses");
  static const std::pair<OpenSentencePiece, std::string> loaded = []() -> std::pair<OpenSentencePiece, std::string> {
    std::vector<std::string> folders;
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&load_sentencepiece), &info) != 0 && info.dli_fname != nullptr) {
      const std::string self = info.dli_fname;
      const size_t slash = self.rfind('/');
      folders.push_back(slash == std::string::npos ? "." : self.substr(0, slash));
    }
    folders.push_back(ZS_TEXT_BUILD_LIBDIR);
    folders.push_back(ZS_TEXT_INSTALL_LIBDIR);
    std::string tried;
    for (const std::string& folder : folders) {
      const std::string file = folder + "/" + kSentencePieceModule;
      struct stat st{};
      if (::stat(file.c_str(), &st) != 0) {
        tried += (tried.empty() ? "" : ", ") + file + " (missing)";
        continue;
      }
      void* handle = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      void* symbol = handle != nullptr ? ::dlsym(handle, kOpenSentencePieceSymbol) : nullptr;
      if (symbol != nullptr) return {reinterpret_cast<OpenSentencePiece>(symbol), ""};
      const char* why = ::dlerror();
      tried += (tried.empty() ? "" : ", ") + file + " (" + (why ? why : "no entry point") + ")";
    }
    return {nullptr, tried};
  }();
  ZS_REQUIRE(loaded.first != nullptr, ConfigError, model_path, ": SentencePiece support (", kSentencePieceModule,
             ") could not be loaded; tried ", loaded.second);
  return loaded.first;
}

class SentencePieceTokenizer : public Tokenizer {
 public:
  SentencePieceTokenizer(const std::string& path, const TokenizerConfig& config) : source_(path) {
    sp_ = open_sentencepiece(path);
    added_ = AddedVocabulary(special_tokens(config), nullptr);
    vocab_size_ = std::max(sp_->piece_size(), added_.max_id() + 1);
    bos_id_ = special_id(config, config.bos_token, "bos_token", sp_->bos_id());
    eos_id_ = special_id(config, config.eos_token, "eos_token", sp_->eos_id());
    pad_id_ = special_id(config, config.pad_token, "pad_token", sp_->pad_id());
    if (bos_id_) bos_token_ = id_to_token(*bos_id_);
    if (eos_id_) eos_token_ = id_to_token(*eos_id_);
    add_bos_ = config.add_bos_token.value_or(bos_id_.has_value());
    add_eos_ = config.add_eos_token.value_or(false);
    ZS_REQUIRE(!add_bos_ || bos_id_, ConfigError, config.file, ": add_bos_token is true but ", path, " has no BOS");
    ZS_REQUIRE(!add_eos_ || eos_id_, ConfigError, config.file, ": add_eos_token is true but ", path, " has no EOS");
    chat_template_ = config.chat_template;
    find_sentinel();
  }

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override {
    const size_t bad = find_invalid_utf8(text);
    ZS_REQUIRE(bad == std::string_view::npos, UsageError, source_, ": encode: the text is not valid UTF-8 (byte ", bad,
               " of ", text.size(), ")");
    std::vector<int32_t> ids;
    if (add_special_tokens && add_bos_) ids.push_back(*bos_id_);
    std::vector<AddedVocabulary::Span> spans;
    added_.split(text, false, spans);
    std::vector<int> piece_ids;
    std::string error;
    for (const auto& span : spans) {
      if (span.id >= 0) {
        ids.push_back(span.id);
        continue;
      }
      const bool ok = sp_->encode(text.substr(span.begin, span.end - span.begin), piece_ids, error);
      ZS_REQUIRE(ok, UsageError, source_, ": SentencePiece could not encode the text: ", error);
      ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
    }
    if (add_special_tokens && add_eos_) ids.push_back(*eos_id_);
    return ids;
  }

  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override {
    std::string out;
    std::vector<int> run;
    bool first_run = true;
    const auto flush = [&] {
      if (run.empty()) return;
      const std::string text = decode_run(run, first_run);
      first_run = first_run && text.empty();  // SentencePiece strips leading spaces until text comes
      out += text;
      run.clear();
    };
    for (size_t i = 0; i < ids.size(); ++i) {
      ZS_REQUIRE(ids[i] >= 0 && ids[i] < vocab_size_, UsageError, source_, ": decode: token id ", ids[i],
                 " (position ", i, ") is not in the vocabulary (", vocab_size_, " ids)");
      if (const AddedToken* special = added_.find(ids[i])) {
        flush();
        if (!skip_special_tokens || !special->special) out += special->content;
      } else {
        run.push_back(ids[i]);
      }
    }
    flush();
    return out;
  }

  int32_t vocab_size() const override { return vocab_size_; }

  std::optional<int32_t> token_to_id(std::string_view token) const override {
    if (auto id = added_.id_of(token)) return id;
    const int id = sp_->piece_to_id(token);
    if (id < 0 || (id == sp_->unk_id() && sp_->id_to_piece(id) != token)) return std::nullopt;
    return id;
  }

  std::string id_to_token(int32_t id) const override {
    ZS_REQUIRE(id >= 0 && id < vocab_size_, UsageError, source_, ": token id ", id, " is not in the vocabulary (",
               vocab_size_, " ids)");
    if (const AddedToken* t = added_.find(id)) return t->content;
    return sp_->id_to_piece(id);
  }

  std::optional<int32_t> bos_id() const override { return bos_id_; }
  std::optional<int32_t> eos_id() const override { return eos_id_; }
  std::optional<int32_t> pad_id() const override { return pad_id_; }
  const std::string& chat_template() const override { return chat_template_; }
  const std::string& bos_token() const override { return bos_token_; }
  const std::string& eos_token() const override { return eos_token_; }

 private:
  // The control and unknown pieces, and tokenizer_config.json's added tokens.
  std::vector<AddedToken> special_tokens(const TokenizerConfig& config) const {
    std::vector<AddedToken> specials;
    const int pieces = sp_->piece_size();
    for (int id = 0; id < pieces; ++id) {
      if (sp_->is_control(id) || sp_->is_unknown(id)) {
        AddedToken t;
        t.id = id;
        t.content = sp_->id_to_piece(id);
        t.special = true;
        t.normalized = false;
        specials.push_back(std::move(t));
      }
    }
    for (const AddedToken& t : config.added_tokens_decoder) {
      const bool known =
          std::any_of(specials.begin(), specials.end(), [&](const AddedToken& s) { return s.id == t.id; });
      ZS_REQUIRE(t.id >= pieces || known || sp_->id_to_piece(t.id) == t.content, ConfigError, config.file,
                 ": added_tokens_decoder gives id ", t.id, " the text '", t.content, "', but ", source_, " has '",
                 sp_->id_to_piece(t.id), "' there");
      if (!known) specials.push_back(t);
    }
    return specials;
  }

  // A plain piece without a leading ▁ (see decode_run).
  void find_sentinel() {
    for (int id = 0; id < sp_->piece_size() && sentinel_ < 0; ++id) {
      const std::string piece = sp_->id_to_piece(id);
      if (!sp_->is_control(id) && !sp_->is_unknown(id) && !sp_->is_byte(id) && !sp_->is_unused(id) &&
          !piece.empty() && piece.rfind("\xE2\x96\x81", 0) != 0) {
        sentinel_ = id;
        std::string error;
        ZS_REQUIRE(sp_->decode({id}, sentinel_text_, error), ConfigError, source_,
                   ": SentencePiece could not decode: ", error);
      }
    }
  }

  // SentencePiece drops the ▁ that starts a decoded sequence (the dummy prefix); a run of ids
  // after special tokens continues the text, so it is decoded behind a sentinel piece whose text is
  // then cut off: the result is what decoding the ids without the special tokens would give.
  std::string decode_run(std::vector<int> run, bool first) const {
    const bool behind_sentinel = !first && sentinel_ >= 0;
    if (behind_sentinel) run.insert(run.begin(), sentinel_);
    std::string text, error;
    ZS_REQUIRE(sp_->decode(run, text, error), UsageError, source_, ": SentencePiece could not decode: ", error);
    if (behind_sentinel) {
      ZS_CHECK(text.compare(0, sentinel_text_.size(), sentinel_text_) == 0, "decoded '", text,
               "' does not start with the sentinel '", sentinel_text_, "'");
      text.erase(0, sentinel_text_.size());
    }
    return text;
  }

  std::optional<int32_t> special_id(const TokenizerConfig& config, const std::optional<std::string>& token,
                                    const char* key, int model_id) const {
    if (!token) return model_id >= 0 ? std::optional<int32_t>(model_id) : std::nullopt;
    const auto id = token_to_id(*token);
    ZS_REQUIRE(id.has_value(), ConfigError, config.file, ": ", key, " '", *token, "' is not in the vocabulary of ",
               source_);
    return id;
  }

  std::unique_ptr<SentencePieceBackend> sp_;
  std::string source_;
  AddedVocabulary added_;
  int32_t vocab_size_ = 0;
  std::optional<int32_t> bos_id_, eos_id_, pad_id_;
  bool add_bos_ = false, add_eos_ = false;
  std::string bos_token_, eos_token_, chat_template_;
  int sentinel_ = -1;
  std::string sentinel_text_;
};

}  // namespace

std::unique_ptr<SentencePieceBackend> open_sentencepiece(const std::string& path) {
  std::string error;
  std::unique_ptr<SentencePieceBackend> sp(open_function(path)(path.c_str(), &error));
  ZS_REQUIRE(sp != nullptr, ConfigError, path, ": not a SentencePiece model: ", error);
  return sp;
}

std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& path, const TokenizerConfig& config) {
  return std::make_unique<SentencePieceTokenizer>(path, config);
}

}  // namespace zeroshard::text::detail
