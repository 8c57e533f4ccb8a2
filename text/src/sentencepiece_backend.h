// SPDX-License-Identifier: Apache-2.0
#pragma once
// The SentencePiece library behind a small interface, in a module of its own
// (libzs_text_sentencepiece.so) that zs_text loads on first use with RTLD_LOCAL | RTLD_DEEPBIND.
// Why: Debian's libsentencepiece carries its own copy of protobuf-lite and exports it; loaded
// into a process that also has libprotobuf (zeroshard's config layer), the two copies' symbols
// interpose and the process crashes during static initialisation. Loaded privately, the module
// and libsentencepiece bind to their own copy and never to the process's.
//
// Only virtual calls and standard-library types cross the boundary.

#include <string>
#include <string_view>
#include <vector>

namespace zeroshard::text::detail {

class SentencePieceBackend {
 public:
  virtual ~SentencePieceBackend() = default;
  // False with `error` set when SentencePiece reports a failure.
  virtual bool encode(std::string_view text, std::vector<int>& ids, std::string& error) const = 0;
  virtual bool decode(const std::vector<int>& ids, std::string& text, std::string& error) const = 0;
  virtual int piece_size() const = 0;
  virtual int piece_to_id(std::string_view piece) const = 0;
  virtual std::string id_to_piece(int id) const = 0;
  virtual bool is_control(int id) const = 0;
  virtual bool is_unknown(int id) const = 0;
  virtual bool is_byte(int id) const = 0;
  virtual bool is_unused(int id) const = 0;
  virtual float score(int id) const = 0;
  // The serialized ModelProto (its trainer_spec holds the model type).
  virtual std::string serialized_model() const = 0;
  virtual int unk_id() const = 0;
  virtual int bos_id() const = 0;
  virtual int eos_id() const = 0;
  virtual int pad_id() const = 0;
};

// The module's one exported function: the model at `path`, or nullptr with `error` set.
using OpenSentencePiece = SentencePieceBackend* (*)(const char* path, std::string* error);
constexpr const char* kOpenSentencePieceSymbol = "zs_text_open_sentencepiece";
constexpr const char* kSentencePieceModule = "libzs_text_sentencepiece.so";

}  // namespace zeroshard::text::detail
