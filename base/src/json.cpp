// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/base/json.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "zeroshard/base/error.h"

namespace zeroshard {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[40];
  for (int precision = 15; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

JsonObject& JsonObject::add_raw(const std::string& key, const std::string& json) {
  for (const auto& k : keys_) {
    ZS_REQUIRE(k != key, UsageError, "JSON key '", key, "' added twice to one object");
  }
  keys_.push_back(key);
  values_.push_back(json);
  return *this;
}

JsonObject& JsonObject::add(const std::string& key, double v) { return add_raw(key, json_number(v)); }
JsonObject& JsonObject::add(const std::string& key, bool v) { return add_raw(key, v ? "true" : "false"); }
JsonObject& JsonObject::add(const std::string& key, const std::string& v) { return add_raw(key, json_string(v)); }
JsonObject& JsonObject::add(const std::string& key, const char* v) { return add_raw(key, json_string(v)); }
JsonObject& JsonObject::add(const std::string& key, const JsonObject& v) { return add_raw(key, v.str()); }

JsonObject& JsonObject::add(const std::string& key, const std::vector<int64_t>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? "," : "") + std::to_string(items[i]);
  return add_raw(key, out + "]");
}

JsonObject& JsonObject::add(const std::string& key, const std::vector<JsonObject>& items) {
  std::string s = "[";
  for (size_t i = 0; i < items.size(); ++i) s += (i ? "," : "") + items[i].str();
  return add_raw(key, s + "]");
}

JsonObject& JsonObject::merge(const JsonObject& other) {
  for (size_t i = 0; i < other.keys_.size(); ++i) add_raw(other.keys_[i], other.values_[i]);
  return *this;
}

std::string JsonObject::str() const {
  std::string s = "{";
  for (size_t i = 0; i < keys_.size(); ++i) {
    if (i > 0) s += ",";
    s += json_string(keys_[i]) + ":" + values_[i];
  }
  return s + "}";
}

const JsonValue* JsonValue::find(const std::string& key) const {
  for (const auto& [k, v] : members) {
    if (k == key) return &v;
  }
  return nullptr;
}

const char* JsonValue::type_name(Type t) {
  switch (t) {
    case Type::kNull: return "null";
    case Type::kBool: return "boolean";
    case Type::kNumber: return "number";
    case Type::kString: return "string";
    case Type::kObject: return "object";
    case Type::kArray: return "array";
  }
  return "?";
}

namespace {

class Parser {
 public:
  Parser(const std::string& text, const std::string& where) : s_(text), where_(where) {}

  JsonValue parse_document() {
    JsonValue v = value(0);
    skip_ws();
    if (pos_ < s_.size()) fail("unexpected '", s_[pos_], "' after the value");
    return v;
  }

 private:
  template <typename... Args>
  [[noreturn]] void fail(const Args&... args) {
    ZS_THROW(Error, where_, ": column ", pos_ + 1, ": ", args...);
  }

  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }

  bool consume(const char* word) {
    size_t n = std::char_traits<char>::length(word);
    if (s_.compare(pos_, n, word) != 0) return false;
    pos_ += n;
    return true;
  }

  JsonValue value(int depth) {
    skip_ws();
    if (pos_ >= s_.size()) fail("expected a value, found the end of the line");
    JsonValue v;
    const char c = s_[pos_];
    if (c == '{') return object(depth);
    if (c == '"') {
      v.type = JsonValue::Type::kString;
      v.string = string();
    } else if (c == '[') {
      return array(depth);
    } else if (consume("true")) {
      v.type = JsonValue::Type::kBool;
      v.boolean = true;
    } else if (consume("false")) {
      v.type = JsonValue::Type::kBool;
    } else if (consume("null")) {
      v.type = JsonValue::Type::kNull;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.type = JsonValue::Type::kNumber;
      v.number = number();
    } else {
      fail("expected a value (number, string, object, array, true, false or null), found '", c, "'");
    }
    return v;
  }

  double number() {
    const size_t start = pos_;
    if (s_[pos_] == '-') ++pos_;
    auto digits = [&] {
      const size_t d = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      return pos_ > d;
    };
    if (!digits()) fail("expected digits in a number");
    if (pos_ < s_.size() && s_[pos_] == '.') {
      ++pos_;
      if (!digits()) fail("expected digits after the decimal point");
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      if (!digits()) fail("expected digits in the exponent");
    }
    return std::strtod(s_.substr(start, pos_ - start).c_str(), nullptr);
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  unsigned hex4() {
    if (pos_ + 4 > s_.size()) fail("expected 4 hex digits after \\u");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = s_[pos_++];
      v <<= 4;
      if (h >= '0' && h <= '9') v |= static_cast<unsigned>(h - '0');
      else if (h >= 'a' && h <= 'f') v |= static_cast<unsigned>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') v |= static_cast<unsigned>(h - 'A' + 10);
      else fail("expected a hex digit in \\u escape, found '", h, "'");
    }
    return v;
  }

  std::string string() {
    ++pos_;  // opening quote
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) fail("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string (write it as \\u00XX)");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) fail("unterminated escape");
      const char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xd800 && cp < 0xdc00 && s_.compare(pos_, 2, "\\u") == 0) {
            pos_ += 2;
            const unsigned low = hex4();
            if (low < 0xdc00 || low >= 0xe000) fail("invalid low surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
          }
          append_utf8(out, cp);
          break;
        }
        default: fail("unknown escape '\\", e, "'");
      }
    }
  }

  JsonValue object(int depth) {
    if (depth >= 16) fail("objects nested deeper than 16 levels");
    ++pos_;  // '{'
    JsonValue v;
    v.type = JsonValue::Type::kObject;
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return v;
    }
    while (true) {
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != '"') fail("expected a key in double quotes");
      std::string key = string();
      if (v.find(key) != nullptr) fail("key \"", key, "\" appears twice in one object");
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] != ':') fail("expected ':' after key \"", key, "\"");
      ++pos_;
      v.members.emplace_back(std::move(key), value(depth + 1));
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == '}') {
        ++pos_;
        return v;
      }
      fail("expected ',' or '}' in an object");
    }
  }

  JsonValue array(int depth) {
    if (depth >= 16) fail("arrays nested deeper than 16 levels");
    ++pos_;  // '['
    JsonValue v;
    v.type = JsonValue::Type::kArray;
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return v;
    }
    while (true) {
      v.items.push_back(value(depth + 1));
      skip_ws();
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (pos_ < s_.size() && s_[pos_] == ']') {
        ++pos_;
        return v;
      }
      fail("expected ',' or ']' in an array");
    }
  }

  const std::string& s_;
  const std::string& where_;
  size_t pos_ = 0;
};

}  // namespace

JsonValue parse_json(const std::string& text, const std::string& where) {
  return Parser(text, where).parse_document();
}

}  // namespace zeroshard
