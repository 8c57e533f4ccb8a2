// SPDX-License-Identifier: Apache-2.0
#pragma once
// Records of JSONL datasets: one JSON object per line, in one of three shapes.
//
//   {"text": "..."}                                   train on every token
//   {"prompt": "...", "completion": "..."}           train on the completion only
//   {"messages": [{"role": "user", "content": "..."}, ...]}
//                                                     rendered by the chat template, train on the
//                                                     assistant turns only
// Other keys (ids, sources, ...) are ignored; lines holding only whitespace are skipped. Roles
// are system, user, assistant and tool. Every malformed line is a DataError "FILE:LINE: what is
// wrong" (bad JSON with its column, a missing key, a wrong type, an unknown role).
// Thread-safety: pure functions.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "zeroshard/base/error.h"
#include "zeroshard/text/chat_template.h"

namespace zeroshard::data {

enum class RecordKind { kText, kPromptCompletion, kMessages };

struct Record {
  RecordKind kind = RecordKind::kText;
  std::string text;                           // kText
  std::string prompt, completion;             // kPromptCompletion
  std::vector<text::ChatMessage> messages;    // kMessages
};

// Whether `line` holds only spaces, tabs and carriage returns (such lines are skipped).
bool is_blank(std::string_view line);

// Parses one line. DataError saying what is wrong, without the location: callers put
// "FILE:LINE: " before it (at_line does).
Record parse_record(std::string_view line);
// A DataError "PATH:LINE: <error's message>".
DataError at_line(const std::string& path, int64_t line, const Error& error);

// Calls `fn(record, line_number)` for every record of the JSONL file `path`, in order (line
// numbers from 1). IoError when it cannot be read; parse_record's errors name path:line.
void for_each_record(const std::string& path, const std::function<void(const Record&, int64_t)>& fn);

}  // namespace zeroshard::data
