// SPDX-License-Identifier: Apache-2.0
#pragma once
// GPT-2's byte-to-character table: byte-level BPE vocabularies spell every byte as one printable
// character (printable ASCII and Latin-1 bytes as themselves, the other 68 bytes as U+0100 onwards),
// so "Ġ" (U+0120) is the space byte. Used by the ByteLevel pre-tokenizer and decoder, and to turn
// tiktoken's raw byte tokens into tokenizer.json vocabulary strings.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace zeroshard::text::detail {

// Appends the characters that spell `bytes`.
void byte_level_encode(std::string_view bytes, std::string& out);
// The byte a character stands for, or nullopt for a character outside the table.
std::optional<uint8_t> byte_level_byte(char32_t cp);
// The bytes `text` spells, or nullopt when a character of it is outside the table.
std::optional<std::string> byte_level_decode(std::string_view text);

}  // namespace zeroshard::text::detail
