// SPDX-License-Identifier: Apache-2.0
#pragma once
// zeroshard's one place for JSON text (no JSON library is a dependency): a small object builder
// for writing metrics and benchmark lines, and a small parser for reading them back (objects,
// strings, numbers, true/false/null, arrays, nested to 16 levels).
//
// Numbers are written so they read back to the same double (the shortest of %.15g..%.17g that
// round-trips). JSON has no NaN or infinity: a non-finite double is written as null.
// Thread-safety: values, no shared state.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace zeroshard {

// `s` as a JSON string literal: quoted, with ", \ and control characters escaped (UTF-8 passes).
std::string json_string(const std::string& s);
// `v` as a JSON number that parses back to exactly `v`; "null" when not finite.
std::string json_number(double v);

// Builds one JSON object, members in the order they are added. Adding a key twice is a
// UsageError (a reader would keep only one of them).
class JsonObject {
 public:
  JsonObject& add(const std::string& key, double v);
  JsonObject& add(const std::string& key, bool v);
  JsonObject& add(const std::string& key, const std::string& v);
  JsonObject& add(const std::string& key, const char* v);
  JsonObject& add(const std::string& key, const JsonObject& v);
  // An array of objects.
  JsonObject& add(const std::string& key, const std::vector<JsonObject>& items);
  // An array of integers.
  JsonObject& add(const std::string& key, const std::vector<int64_t>& items);
  template <typename T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  JsonObject& add(const std::string& key, T v) {
    return add_raw(key, std::to_string(v));
  }
  // Appends every member of `other` (keys must not clash).
  JsonObject& merge(const JsonObject& other);

  bool empty() const { return keys_.empty(); }
  const std::vector<std::string>& keys() const { return keys_; }
  std::string str() const;  // {"k":v,...} on one line

 private:
  JsonObject& add_raw(const std::string& key, const std::string& json);
  std::vector<std::string> keys_;
  std::vector<std::string> values_;  // JSON text of each member
};

// A parsed JSON value.
struct JsonValue {
  enum class Type { kNull, kBool, kNumber, kString, kObject, kArray };
  Type type = Type::kNull;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<std::pair<std::string, JsonValue>> members;  // kObject, in file order
  std::vector<JsonValue> items;                            // kArray

  bool is_null() const { return type == Type::kNull; }
  bool is_number() const { return type == Type::kNumber; }
  bool is_object() const { return type == Type::kObject; }
  bool is_array() const { return type == Type::kArray; }
  // The member `key` of an object, or nullptr.
  const JsonValue* find(const std::string& key) const;
  static const char* type_name(Type t);  // "null", "boolean", "number", "string", "object", "array"
};

// Parses one JSON value filling all of `text` (surrounding whitespace allowed). Throws
// zeroshard::Error "WHERE: column C: what was expected" for malformed text, a duplicate key, or
// nesting deeper than 16.
JsonValue parse_json(const std::string& text, const std::string& where);

}  // namespace zeroshard
