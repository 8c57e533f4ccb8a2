// SPDX-License-Identifier: Apache-2.0
#pragma once
// JSON text from files other programs wrote (safetensors headers, model indexes), parsed with
// nlohmann-json plus two checks its defaults leave out, because the text is untrusted:
//   - objects and arrays nested deeper than a limit are refused (a crafted header of a million
//     '[' would otherwise become a million nested values);
//   - a key that appears twice in one object is refused (nlohmann would keep the last one
//     silently: two entries for one tensor are damage, not a choice to make for the reader).
// Members keep their file order (ordered_json).

#include <nlohmann/json.hpp>

#include <string>

namespace zeroshard::detail {

// Parses `text`. On failure throws IoError "WHAT: POSITION: what was wrong", POSITION being
// "column C" for text of one line, else "line L, column C" (1-based, as editors count).
nlohmann::ordered_json parse_untrusted_json(const std::string& text, const std::string& what, int max_depth);

}  // namespace zeroshard::detail
