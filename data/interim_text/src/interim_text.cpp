// INTERIM, replaced by the text layer (text/, zs_text) at its merge: delete data/interim_text/.
// byte_tokenizer() is the interface's byte vocabulary (ids 0..255 = bytes, no specials); loading
// tokenizer files and rendering Jinja templates need the text layer, so those calls fail with a
// ConfigError saying so rather than doing anything else.

#include <string>

#include "zeroshard/base/error.h"
#include "zeroshard/text/chat_template.h"
#include "zeroshard/text/tokenizer.h"

namespace zeroshard::text {
namespace {

class ByteVocabulary : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text, bool) const override {
    std::vector<int32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids, bool) const override {
    std::string out;
    out.reserve(ids.size());
    for (int32_t id : ids) out.push_back(static_cast<char>(check(id)));
    return out;
  }
  int32_t vocab_size() const override { return 256; }
  std::optional<int32_t> token_to_id(std::string_view token) const override {
    if (token.size() != 1) return std::nullopt;
    return static_cast<unsigned char>(token[0]);
  }
  std::string id_to_token(int32_t id) const override { return std::string(1, static_cast<char>(check(id))); }
  std::optional<int32_t> bos_id() const override { return std::nullopt; }
  std::optional<int32_t> eos_id() const override { return std::nullopt; }
  std::optional<int32_t> pad_id() const override { return std::nullopt; }
  const std::string& chat_template() const override { return empty_; }
  const std::string& bos_token() const override { return empty_; }
  const std::string& eos_token() const override { return empty_; }

 private:
  static int32_t check(int32_t id) {
    ZS_REQUIRE(id >= 0 && id < 256, UsageError, "token id ", id, " is outside the byte vocabulary [0, 256)");
    return id;
  }
  std::string empty_;
};

constexpr const char* kNoTextLayer = "this build of zeroshard has no text layer (zs_text)";

}  // namespace

std::unique_ptr<Tokenizer> byte_tokenizer() { return std::make_unique<ByteVocabulary>(); }

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  ZS_THROW(ConfigError, "cannot load the tokenizer '", path, "': ", kNoTextLayer);
}

ChatTemplate::ChatTemplate(const std::string&, const std::string& source_name) {
  ZS_THROW(ConfigError, "cannot parse the chat template of ", source_name, ": ", kNoTextLayer);
}

std::string ChatTemplate::render(const std::vector<ChatMessage>&, bool,
                                 const std::map<std::string, std::string>&) const {
  ZS_THROW(ConfigError, "cannot render a chat template: ", kNoTextLayer);
}

TrainingText ChatTemplate::render_for_training(const std::vector<ChatMessage>&, const RenderOptions&) const {
  ZS_THROW(ConfigError, "cannot render a chat template: ", kNoTextLayer);
}

}  // namespace zeroshard::text
