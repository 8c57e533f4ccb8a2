// SPDX-License-Identifier: Apache-2.0
// The byte vocabulary of the built-in demo: id = byte value, decode gives the bytes back.

#include "zeroshard/base/error.h"
#include "zeroshard/text/tokenizer.h"

namespace zeroshard::text {

namespace {

class ByteTokenizer : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text, bool) const override {
    std::vector<int32_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids, bool) const override {
    std::string out(ids.size(), '\0');
    for (size_t i = 0; i < ids.size(); ++i) {
      check(ids[i], "decode");
      out[i] = static_cast<char>(ids[i]);
    }
    return out;
  }
  int32_t vocab_size() const override { return 256; }
  std::optional<int32_t> token_to_id(std::string_view token) const override {
    if (token.size() != 1) return std::nullopt;
    return static_cast<unsigned char>(token[0]);
  }
  std::string id_to_token(int32_t id) const override {
    check(id, "id_to_token");
    return std::string(1, static_cast<char>(id));
  }
  std::optional<int32_t> bos_id() const override { return std::nullopt; }
  std::optional<int32_t> eos_id() const override { return std::nullopt; }
  std::optional<int32_t> pad_id() const override { return std::nullopt; }
  const std::string& chat_template() const override { return empty_; }
  const std::string& bos_token() const override { return empty_; }
  const std::string& eos_token() const override { return empty_; }

 private:
  static void check(int32_t id, const char* what) {
    ZS_REQUIRE(id >= 0 && id < 256, UsageError, "byte tokenizer: ", what, ": token id ", id,
               " is not in the vocabulary (256 ids)");
  }
  std::string empty_;
};

}  // namespace

std::unique_ptr<Tokenizer> byte_tokenizer() { return std::make_unique<ByteTokenizer>(); }

}  // namespace zeroshard::text
