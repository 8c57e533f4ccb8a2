// SPDX-License-Identifier: Apache-2.0
// libzs_text_sentencepiece.so: SentencePieceBackend on the SentencePiece library (see
// sentencepiece_backend.h for why this is a module of its own).

#include <sentencepiece_processor.h>

#include "sentencepiece_backend.h"

namespace zeroshard::text::detail {
namespace {

class Backend : public SentencePieceBackend {
 public:
  bool load(const char* path, std::string& error) {
    const auto status = sp_.Load(path);
    if (!status.ok()) error = status.ToString();
    return status.ok();
  }
  bool encode(std::string_view text, std::vector<int>& ids, std::string& error) const override {
    const auto status = sp_.Encode(text, &ids);
    if (!status.ok()) error = status.ToString();
    return status.ok();
  }
  bool decode(const std::vector<int>& ids, std::string& text, std::string& error) const override {
    const auto status = sp_.Decode(ids, &text);
    if (!status.ok()) error = status.ToString();
    return status.ok();
  }
  int piece_size() const override { return sp_.GetPieceSize(); }
  int piece_to_id(std::string_view piece) const override { return sp_.PieceToId(piece); }
  std::string id_to_piece(int id) const override { return sp_.IdToPiece(id); }
  bool is_control(int id) const override { return sp_.IsControl(id); }
  bool is_unknown(int id) const override { return sp_.IsUnknown(id); }
  bool is_byte(int id) const override { return sp_.IsByte(id); }
  bool is_unused(int id) const override { return sp_.IsUnused(id); }
  float score(int id) const override { return sp_.GetScore(id); }
  std::string serialized_model() const override { return sp_.serialized_model_proto(); }
  int unk_id() const override { return sp_.unk_id(); }
  int bos_id() const override { return sp_.bos_id(); }
  int eos_id() const override { return sp_.eos_id(); }
  int pad_id() const override { return sp_.pad_id(); }

 private:
  sentencepiece::SentencePieceProcessor sp_;
};

}  // namespace
}  // namespace zeroshard::text::detail

extern "C" __attribute__((visibility("default"))) zeroshard::text::detail::SentencePieceBackend*
zs_text_open_sentencepiece(const char* path, std::string* error) {
  auto backend = new zeroshard::text::detail::Backend();
  if (!backend->load(path, *error)) {
    delete backend;
    return nullptr;
  }
  return backend;
}
