// SPDX-License-Identifier: Apache-2.0
#pragma once
// Decoders of tokenizer.json: token texts -> text (Sequence, ByteLevel, Replace, ByteFallback,
// Fuse, Strip, Metaspace, BPEDecoder), as a chain over the list of token strings the way
// Hugging Face's decode_chain works. Immutable, thread-safe.

#include <memory>
#include <string>
#include <vector>

namespace zeroshard::text::detail {

class JsonAt;

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

std::unique_ptr<Decoder> make_decoder(const JsonAt& config);

// Tokens that are raw bytes (tiktoken): concatenated, ill-formed UTF-8 replaced by U+FFFD.
std::unique_ptr<Decoder> make_raw_bytes_decoder();

}  // namespace zeroshard::text::detail
