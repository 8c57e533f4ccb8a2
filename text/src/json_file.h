// SPDX-License-Identifier: Apache-2.0
#pragma once
// Reading the tokenizer's JSON files (nlohmann-json) with errors that name the file and the key:
// "tokenizer.json: model.merges[3]: expected a string or a pair of strings, got number".
// JsonAt is a cursor (file name, key path, value) with typed getters; it never owns the value.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zeroshard::text::detail {

using Json = nlohmann::json;

// Parses the file at `path`. IoError when it cannot be read; ConfigError
// "PATH: malformed JSON at line L, column C: WHAT" when it is not JSON.
Json read_json_file(const std::string& path);

class JsonAt {
 public:
  JsonAt(const Json& value, const std::string& file, std::string path)
      : value_(&value), file_(&file), path_(std::move(path)) {}

  const Json& value() const { return *value_; }
  const std::string& file() const { return *file_; }
  const std::string& path() const { return path_; }  // e.g. "normalizer.normalizers[1]"

  bool has(const char* key) const;            // present and not null
  JsonAt at(const char* key) const;           // required member (an object)
  std::optional<JsonAt> find(const char* key) const;  // member when present and not null
  std::vector<JsonAt> items() const;          // this value as an array
  std::vector<JsonAt> items(const char* key) const;  // required array member

  std::string str(const char* key) const;  // required string member
  std::string str_or(const char* key, const std::string& fallback) const;
  bool flag_or(const char* key, bool fallback) const;
  int64_t integer(const char* key) const;  // required integer member
  int64_t integer_or(const char* key, int64_t fallback) const;
  std::string as_str() const;      // this value as a string
  int64_t as_integer() const;      // this value as an integer

  // ConfigError "FILE: PATH: message" (or "FILE: message" at the top level).
  [[noreturn]] void fail(const std::string& message) const;
  // ConfigError "FILE: PATH.type 'T' is not supported (supported: LIST)".
  [[noreturn]] void unsupported_type(const std::string& type, const char* supported) const;

 private:
  std::string child_path(const std::string& key) const;
  [[noreturn]] void wrong_type(const Json& v, const std::string& path, const char* expected) const;

  const Json* value_;
  const std::string* file_;
  std::string path_;
};

const char* json_type_name(const Json& v);

}  // namespace zeroshard::text::detail
