// SPDX-License-Identifier: Apache-2.0
#include "jinja/value_text.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "jinja/eval_error.h"
#include "jinja/unicode.h"

namespace zeroshard::text::jinja {
namespace {

constexpr int kMaxDepth = 256;

void check_depth(int depth) {
  if (depth > kMaxDepth) throw EvalError("a value nested more than 256 levels deep cannot be written");
}

void append_hex(std::string& out, const char* prefix, int digits, uint32_t value) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%s%0*x", prefix, digits, value);
  out += buf;
}

void append_repr(std::string& out, const Value& v, int depth);

void append_sequence_repr(std::string& out, const Value& v, int depth) {
  const ValueList& items = v.as_list();
  out += v.is_tuple() ? '(' : '[';
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += ", ";
    append_repr(out, items[i], depth + 1);
  }
  if (v.is_tuple() && items.size() == 1) out += ',';
  out += v.is_tuple() ? ')' : ']';
}

void append_dict_repr(std::string& out, const ValueDict& dict, int depth) {
  out += '{';
  bool first = true;
  for (const auto& [key, value] : dict.items()) {
    if (!first) out += ", ";
    first = false;
    out += string_repr(key);
    out += ": ";
    append_repr(out, value, depth + 1);
  }
  out += '}';
}

void append_repr(std::string& out, const Value& v, int depth) {
  check_depth(depth);
  switch (v.type()) {
    case Value::Type::kUndefined: out += "Undefined"; return;
    case Value::Type::kString: out += string_repr(v.as_string()); return;
    case Value::Type::kList: append_sequence_repr(out, v, depth); return;
    case Value::Type::kDict: append_dict_repr(out, v.as_dict(), depth); return;
    case Value::Type::kNamespace:
      out += "<Namespace ";
      append_dict_repr(out, v.namespace_attributes(), depth);
      out += '>';
      return;
    default: out += to_str(v); return;
  }
}

void append_json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80 && ensure_ascii) {
      size_t n = 1;
      while (i + n < s.size() && (static_cast<unsigned char>(s[i + n]) & 0xC0) == 0x80) ++n;
      const char32_t cp = unicode::decode(std::string_view(s).substr(i, n))[0];
      if (cp >= 0x10000) {
        append_hex(out, "\\u", 4, 0xD800 + ((cp - 0x10000) >> 10));
        append_hex(out, "\\u", 4, 0xDC00 + ((cp - 0x10000) & 0x3FF));
      } else {
        append_hex(out, "\\u", 4, cp);
      }
      i += n;
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20 || (c == 0x7F && ensure_ascii)) {
          append_hex(out, "\\u", 4, c);
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += '"';
}

void append_json(std::string& out, const Value& v, const JsonOptions& o, int depth);

// The line break and indentation before an item at `depth`, when indenting.
void json_newline(std::string& out, const JsonOptions& o, int depth) {
  out += '\n';
  for (int i = 0; i < depth; ++i) out += *o.indent;
}

void append_json_container(std::string& out, const Value& v, const JsonOptions& o, int depth) {
  const bool is_list = v.is_list();
  std::vector<std::pair<const std::string*, const Value*>> members;
  if (is_list) {
    for (const Value& item : v.as_list()) members.emplace_back(nullptr, &item);
  } else {
    for (const auto& [key, value] : v.as_dict().items()) members.emplace_back(&key, &value);
    if (o.sort_keys) {
      std::stable_sort(members.begin(), members.end(),
                       [](const auto& a, const auto& b) { return *a.first < *b.first; });
    }
  }
  out += is_list ? '[' : '{';
  if (members.empty()) {
    out += is_list ? ']' : '}';
    return;
  }
  for (size_t i = 0; i < members.size(); ++i) {
    if (i > 0) out += o.item_separator;
    if (o.indent) json_newline(out, o, depth + 1);
    if (!is_list) {
      append_json_string(out, *members[i].first, o.ensure_ascii);
      out += o.key_separator;
    }
    append_json(out, *members[i].second, o, depth + 1);
  }
  if (o.indent) json_newline(out, o, depth);
  out += is_list ? ']' : '}';
}

void append_json(std::string& out, const Value& v, const JsonOptions& o, int depth) {
  check_depth(depth);
  switch (v.type()) {
    case Value::Type::kNone: out += "null"; return;
    case Value::Type::kBool: out += v.as_bool() ? "true" : "false"; return;
    case Value::Type::kInt: out += std::to_string(v.as_int()); return;
    case Value::Type::kFloat: {
      const double f = v.as_float();
      if (std::isnan(f)) {
        out += "NaN";
      } else if (std::isinf(f)) {
        out += f > 0 ? "Infinity" : "-Infinity";
      } else {
        out += float_repr(f);
      }
      return;
    }
    case Value::Type::kString: append_json_string(out, v.as_string(), o.ensure_ascii); return;
    case Value::Type::kList: case Value::Type::kDict: append_json_container(out, v, o, depth); return;
    case Value::Type::kUndefined:
      throw EvalError("tojson: an undefined value is not JSON serializable" +
                      (v.undefined_hint().empty() ? std::string() : " (" + v.undefined_hint() + ")"));
    default:
      throw EvalError(std::string("tojson: a ") + v.type_name() + " is not JSON serializable");
  }
}

}  // namespace

std::string float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  // The shortest digits that read back as v, in scientific form: "d.ddde+XX".
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*e", precision - 1, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string sci = buf;
  const size_t e = sci.find('e');
  const int exponent = std::atoi(sci.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i) {
    if (sci[i] >= '0' && sci[i] <= '9') digits += sci[i];
  }
  const std::string sign = v < 0 || (v == 0 && std::signbit(v)) ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    std::snprintf(buf, sizeof(buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + buf;
  }
  if (exponent < 0) return sign + "0." + std::string(-exponent - 1, '0') + digits;
  const size_t point = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= point) return sign + digits + std::string(point - digits.size(), '0') + ".0";
  return sign + digits.substr(0, point) + "." + digits.substr(point);
}

std::string string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const char quote = has_single && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : unicode::decode(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      append_hex(out, "\\x", 2, c);
    } else if (c < 0x7F || unicode::is_printable(c)) {
      unicode::append_utf8(out, c);
    } else if (c <= 0xFF) {
      append_hex(out, "\\x", 2, c);
    } else if (c <= 0xFFFF) {
      append_hex(out, "\\u", 4, c);
    } else {
      append_hex(out, "\\U", 8, c);
    }
  }
  out += quote;
  return out;
}

std::string to_str(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined: return "";
    case Value::Type::kNone: return "None";
    case Value::Type::kBool: return v.as_bool() ? "True" : "False";
    case Value::Type::kInt: return std::to_string(v.as_int());
    case Value::Type::kFloat: return float_repr(v.as_float());
    case Value::Type::kString: return v.as_string();
    case Value::Type::kCallable:
      throw EvalError("cannot write the function '" + v.as_callable().name +
                      "' as text (call it with parentheses)");
    default: {
      std::string out;
      append_repr(out, v, 0);
      return out;
    }
  }
}

std::string repr(const Value& v) {
  std::string out;
  append_repr(out, v, 0);
  return out;
}

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  append_json(out, v, options, 0);
  return out;
}

}  // namespace zeroshard::text::jinja
