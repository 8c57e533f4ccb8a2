// SPDX-License-Identifier: Apache-2.0
#include "json_file.h"

#include <fstream>
#include <sstream>

#include "zeroshard/base/error.h"
#include "zeroshard/base/format.h"

namespace zeroshard::text::detail {

namespace {

// nlohmann's parse_error text is "[json.exception.parse_error.101] parse error at line 1, column
// 2: WHAT"; keep WHAT.
std::string parse_error_reason(const std::string& what) {
  const size_t column = what.find("column ");
  if (column != std::string::npos) {
    const size_t colon = what.find(": ", column);
    if (colon != std::string::npos) return what.substr(colon + 2);
  }
  return what;
}

}  // namespace

Json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZS_REQUIRE(in, IoError, path, ": cannot open: ", ::zeroshard::detail::errno_string(errno));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  ZS_REQUIRE(!in.bad(), IoError, path, ": read failed");
  const std::string text = buffer.str();
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    // Line and column of the byte where parsing stopped (1-based, as editors count).
    const size_t at = std::min(e.byte == 0 ? 0 : e.byte - 1, text.size());
    size_t line = 1, column = 1;
    for (size_t i = 0; i < at; ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    ZS_THROW(ConfigError, path, ": malformed JSON at line ", line, ", column ", column, ": ",
             parse_error_reason(e.what()));
  } catch (const Json::exception& e) {  // a number out of range ("1e999"), bad UTF-8 in a string
    ZS_THROW(ConfigError, path, ": malformed JSON: ", ::zeroshard::json_error_reason(e.what()));
  }
}

const char* json_type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "boolean";
    case Json::value_t::string: return "string";
    case Json::value_t::object: return "object";
    case Json::value_t::array: return "array";
    case Json::value_t::discarded: return "nothing";
    default: return "number";
  }
}

std::string JsonAt::child_path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

void JsonAt::fail(const std::string& message) const {
  if (path_.empty()) ZS_THROW(ConfigError, *file_, ": ", message);
  ZS_THROW(ConfigError, *file_, ": ", path_, ": ", message);
}

void JsonAt::unsupported_type(const std::string& type, const char* supported) const {
  ZS_THROW(ConfigError, *file_, ": ", child_path("type"), " '", type, "' is not supported (supported: ", supported,
           ")");
}

void JsonAt::wrong_type(const Json& v, const std::string& path, const char* expected) const {
  ZS_THROW(ConfigError, *file_, ": ", path, ": expected ", expected, ", got ", json_type_name(v));
}

bool JsonAt::has(const char* key) const {
  if (!value_->is_object()) return false;
  const auto it = value_->find(key);
  return it != value_->end() && !it->is_null();
}

std::optional<JsonAt> JsonAt::find(const char* key) const {
  if (!value_->is_object()) wrong_type(*value_, path_.empty() ? "top level" : path_, "an object");
  const auto it = value_->find(key);
  if (it == value_->end() || it->is_null()) return std::nullopt;
  return JsonAt(*it, *file_, child_path(key));
}

JsonAt JsonAt::at(const char* key) const {
  auto child = find(key);
  if (!child) fail(std::string("missing key '") + key + "'");
  return *child;
}

std::vector<JsonAt> JsonAt::items() const {
  if (!value_->is_array()) wrong_type(*value_, path_, "an array");
  std::vector<JsonAt> out;
  out.reserve(value_->size());
  for (size_t i = 0; i < value_->size(); ++i) {
    out.emplace_back((*value_)[i], *file_, path_ + "[" + std::to_string(i) + "]");
  }
  return out;
}

std::vector<JsonAt> JsonAt::items(const char* key) const { return at(key).items(); }

std::string JsonAt::as_str() const {
  if (!value_->is_string()) wrong_type(*value_, path_, "a string");
  return value_->get<std::string>();
}

int64_t JsonAt::as_integer() const {
  if (!value_->is_number_integer()) wrong_type(*value_, path_, "an integer");
  return value_->get<int64_t>();
}

std::string JsonAt::str(const char* key) const { return at(key).as_str(); }

std::string JsonAt::str_or(const char* key, const std::string& fallback) const {
  auto child = find(key);
  return child ? child->as_str() : fallback;
}

bool JsonAt::flag_or(const char* key, bool fallback) const {
  auto child = find(key);
  if (!child) return fallback;
  if (!child->value().is_boolean()) wrong_type(child->value(), child->path(), "true or false");
  return child->value().get<bool>();
}

int64_t JsonAt::integer(const char* key) const { return at(key).as_integer(); }

int64_t JsonAt::integer_or(const char* key, int64_t fallback) const {
  auto child = find(key);
  return child ? child->as_integer() : fallback;
}

}  // namespace zeroshard::text::detail
