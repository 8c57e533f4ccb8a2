// SPDX-License-Identifier: Apache-2.0
#pragma once
// Normalizers of tokenizer.json: text -> text before pre-tokenization (Sequence, Prepend,
// Replace, NFC, NFD, NFKC, NFKD, Lowercase, Strip, StripAccents). Immutable, thread-safe.

#include <memory>
#include <string>

namespace zeroshard::text::detail {

class JsonAt;

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};

// The normalizer a tokenizer.json section describes; ConfigError for an unsupported type.
std::unique_ptr<Normalizer> make_normalizer(const JsonAt& config);

}  // namespace zeroshard::text::detail
