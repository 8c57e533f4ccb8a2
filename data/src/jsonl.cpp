// SPDX-License-Identifier: Apache-2.0
// JSONL records: parsing one line into a text, prompt/completion or messages record (jsonl.h).

#include "zeroshard/data/jsonl.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "zeroshard/base/error.h"
#include "zeroshard/base/format.h"

namespace zeroshard::data {
namespace {

using nlohmann::json;

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::binary: return "binary data";
    case json::value_t::discarded: return "discarded";
    default: return "a number";
  }
}

// nlohmann's text after "column N: ", e.g. "syntax error while parsing value - invalid literal; ...".
std::string reason_of(const json::parse_error& e) {
  const std::string what = e.what();
  const size_t col = what.find("column ");
  const size_t colon = col == std::string::npos ? std::string::npos : what.find(": ", col);
  return colon == std::string::npos ? what : what.substr(colon + 2);
}

json parse_object(std::string_view line) {
  json v;
  try {
    v = json::parse(line.begin(), line.end());
  } catch (const json::parse_error& e) {
    ZS_THROW(DataError, "bad JSON at column ", e.byte, ": ", reason_of(e));
  } catch (const json::exception& e) {  // a number out of range ("1e999")
    ZS_THROW(DataError, "bad JSON: ", json_error_reason(e.what()));
  }
  ZS_REQUIRE(v.is_object(), DataError, "expected a JSON object, got ", type_name(v));
  return v;
}

std::string string_member(const json& obj, const char* key, const std::string& name) {
  const auto it = obj.find(key);
  ZS_REQUIRE(it != obj.end(), DataError, name, " has no \"", key, "\"");
  ZS_REQUIRE(it->is_string(), DataError, name, ".", key, " must be a string, got ", type_name(*it));
  return it->get<std::string>();
}

std::string top_string(const json& obj, const char* key) {
  const json& v = obj.at(key);
  ZS_REQUIRE(v.is_string(), DataError, "\"", key, "\" must be a string, got ", type_name(v));
  return v.get<std::string>();
}

bool known_role(const std::string& role) {
  return role == "system" || role == "user" || role == "assistant" || role == "tool";
}

std::vector<text::ChatMessage> parse_messages(const json& obj) {
  const json& list = obj.at("messages");
  ZS_REQUIRE(list.is_array(), DataError, "\"messages\" must be an array, got ", type_name(list));
  ZS_REQUIRE(!list.empty(), DataError, "\"messages\" is empty");
  std::vector<text::ChatMessage> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string name = "messages[" + std::to_string(i) + "]";
    ZS_REQUIRE(list[i].is_object(), DataError, name, " must be an object, got ", type_name(list[i]));
    text::ChatMessage m{string_member(list[i], "role", name), string_member(list[i], "content", name)};
    ZS_REQUIRE(known_role(m.role), DataError, name, " has the unknown role \"", m.role,
               "\" (roles: system, user, assistant, tool)");
    out.push_back(std::move(m));
  }
  return out;
}

std::string key_list(const json& obj) {
  std::string keys;
  for (const auto& item : obj.items()) keys += (keys.empty() ? "\"" : ", \"") + item.key() + "\"";
  return keys.empty() ? "none" : keys;
}

}  // namespace

DataError at_line(const std::string& path, int64_t line, const Error& error) {
  return DataError(path + ":" + std::to_string(line) + ": " + error.message(), error.file().c_str(), error.line());
}

bool is_blank(std::string_view line) { return line.find_first_not_of(" \t\r") == std::string_view::npos; }

Record parse_record(std::string_view line) {
  const json obj = parse_object(line);
  const bool text = obj.contains("text"), messages = obj.contains("messages");
  const bool prompt = obj.contains("prompt"), completion = obj.contains("completion");
  const int shapes = int{text} + int{messages} + int{prompt || completion};
  ZS_REQUIRE(shapes == 1, DataError, "",
             shapes == 0 ? "a record needs \"text\", \"prompt\" and \"completion\", or \"messages\"; this one has "
                         : "a record has one of \"text\", \"prompt\"/\"completion\" or \"messages\"; this one has ",
             key_list(obj));
  Record r;
  if (text) {
    r.kind = RecordKind::kText;
    r.text = top_string(obj, "text");
  } else if (messages) {
    r.kind = RecordKind::kMessages;
    r.messages = parse_messages(obj);
  } else {
    ZS_REQUIRE(prompt && completion, DataError, "a record with \"", prompt ? "prompt" : "completion",
               "\" needs \"", prompt ? "completion" : "prompt", "\" too");
    r.kind = RecordKind::kPromptCompletion;
    r.prompt = top_string(obj, "prompt");
    r.completion = top_string(obj, "completion");
  }
  return r;
}

void for_each_record(const std::string& path, const std::function<void(const Record&, int64_t)>& fn) {
  std::ifstream in(path, std::ios::binary);
  ZS_REQUIRE(in.good(), IoError, "cannot open JSONL file '", path, "'");
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (is_blank(line)) continue;
    Record r;
    try {
      r = parse_record(line);
    } catch (const DataError& e) {
      throw at_line(path, n, e);
    }
    fn(r, n);
  }
  ZS_REQUIRE(in.eof(), IoError, "cannot read JSONL file '", path, "'");
}

}  // namespace zeroshard::data
