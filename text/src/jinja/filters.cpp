// SPDX-License-Identifier: Apache-2.0
#include "jinja/filters.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "jinja/access.h"
#include "jinja/arguments.h"
#include "jinja/operators.h"
#include "jinja/predicates.h"
#include "jinja/py_str.h"
#include "jinja/unicode.h"
#include "jinja/value_text.h"

namespace zeroshard::text::jinja {
namespace {

// ---- strings ----

Value f_upper(const Value& v, CallArgs& a) { BoundArgs(a, "upper", {}); return Value(unicode::upper(to_str(v))); }
Value f_lower(const Value& v, CallArgs& a) { BoundArgs(a, "lower", {}); return Value(unicode::lower(to_str(v))); }
Value f_capitalize(const Value& v, CallArgs& a) {
  BoundArgs(a, "capitalize", {});
  return Value(unicode::capitalize(to_str(v)));
}
Value f_string(const Value& v, CallArgs& a) { BoundArgs(a, "string", {}); return Value(to_str(v)); }

// Jinja's title: words start after "-", whitespace or an opening bracket; first letter upper,
// the rest lower.
Value f_title(const Value& v, CallArgs& a) {
  BoundArgs(a, "title", {});
  const std::u32string cps = unicode::decode(to_str(v));
  auto separator = [](char32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || unicode::is_space(c); };
  std::string out;
  for (size_t i = 0; i < cps.size();) {
    size_t j = i;
    const bool sep = separator(cps[i]);
    while (j < cps.size() && separator(cps[j]) == sep) ++j;
    const std::string run = unicode::encode(std::u32string_view(cps).substr(i, j - i));
    if (sep) {
      out += run;
    } else {
      out += unicode::upper(unicode::encode(cps.substr(i, 1)));
      out += unicode::lower(unicode::encode(std::u32string_view(cps).substr(i + 1, j - i - 1)));
    }
    i = j;
  }
  return Value(std::move(out));
}

Value f_trim(const Value& v, CallArgs& a) {
  BoundArgs args(a, "trim", {"chars"});
  return Value(py_str::strip(to_str(v), args.optional_string(0), py_str::Side::kBoth));
}

Value f_replace(const Value& v, CallArgs& a) {
  BoundArgs args(a, "replace", {"old", "new", "count"});
  if (!args.has(1)) throw EvalError("replace() needs the old and the new text");
  const Value& count = args.get(2, Value::none());
  const long n = count.is_none() ? -1 : static_cast<long>(args.integer(2, -1));
  return Value(py_str::replace(to_str(v), to_str(args.get(0, Value())), to_str(args.get(1, Value())), n));
}

Value f_indent(const Value& v, CallArgs& a) {
  BoundArgs args(a, "indent", {"width", "first", "blank"});
  if (!v.is_string()) {
    if (v.is_undefined()) fail_undefined(v);
    throw EvalError(std::string("indent: expected a string, got ") + v.type_name());
  }
  const Value& width = args.get(0, Value(int64_t{4}));
  const std::string indention = width.is_string() ? width.as_string()
                                                  : std::string(static_cast<size_t>(std::max<int64_t>(0, args.integer(0, 4))), ' ');
  // Jinja appends a newline first so that splitlines keeps a trailing empty line.
  const std::vector<std::string> lines = py_str::splitlines(v.as_string() + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += '\n';
    const bool indent = args.flag(2, false) ? i > 0 : (i > 0 && !lines[i].empty());
    if (indent) out += indention;
    out += lines[i];
  }
  if (args.flag(1, false)) out = indention + out;
  return Value(std::move(out));
}

// ---- numbers ----

Value f_abs(const Value& v, CallArgs& a) {
  BoundArgs(a, "abs", {});
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  if (v.is_int() || v.is_bool()) {
    if (v.as_int() == INT64_MIN) throw EvalError("integer overflow in abs");
    return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  if (v.is_undefined()) fail_undefined(v);
  throw EvalError(std::string("bad operand type for abs(): '") + v.type_name() + "'");
}

// Python's float(str): surrounding whitespace, underscores between digits, inf and nan.
std::optional<double> parse_float(const std::string& text) {
  std::string s = py_str::strip(text, std::nullopt, py_str::Side::kBoth);
  std::string cleaned;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      const bool between = i > 0 && i + 1 < s.size() && isdigit(static_cast<unsigned char>(s[i - 1])) &&
                           isdigit(static_cast<unsigned char>(s[i + 1]));
      if (!between) return std::nullopt;
      continue;
    }
    cleaned += s[i];
  }
  if (cleaned.empty() || cleaned.find_first_of("xXpP") != std::string::npos) return std::nullopt;
  char* end = nullptr;
  const double d = std::strtod(cleaned.c_str(), &end);
  if (end != cleaned.c_str() + cleaned.size()) return std::nullopt;
  return d;
}

std::optional<int64_t> parse_int(const std::string& text) {
  std::string s = py_str::strip(text, std::nullopt, py_str::Side::kBoth);
  std::string digits;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool sign = i == 0 && (s[i] == '+' || s[i] == '-');
    const bool underscore = s[i] == '_' && i > 0 && isdigit(static_cast<unsigned char>(s[i - 1])) && i + 1 < s.size() &&
                            isdigit(static_cast<unsigned char>(s[i + 1]));
    if (underscore) continue;
    if (!sign && !isdigit(static_cast<unsigned char>(s[i]))) return std::nullopt;
    digits += s[i];
  }
  if (digits.empty() || digits == "+" || digits == "-") return std::nullopt;
  errno = 0;
  const long long n = std::strtoll(digits.c_str(), nullptr, 10);
  if (errno == ERANGE) throw EvalError("int: " + text + " is out of range");
  return n;
}

int64_t float_to_int(double d) {
  if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) throw EvalError("int: " + float_repr(d) + " is out of range");
  return static_cast<int64_t>(d);  // truncates toward zero, as Python's int()
}

Value f_int(const Value& v, CallArgs& a) {
  BoundArgs args(a, "int", {"default", "base"});
  if (args.integer(1, 10) != 10) throw EvalError("int: only base 10 is supported");
  const Value fallback = args.get(0, Value(int64_t{0}));
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) return Value(float_to_int(v.as_float()));
  if (v.is_string()) {
    if (auto n = parse_int(v.as_string())) return Value(*n);
    if (auto d = parse_float(v.as_string()); d && std::isfinite(*d)) return Value(float_to_int(*d));
  }
  return fallback;
}

Value f_float(const Value& v, CallArgs& a) {
  BoundArgs args(a, "float", {"default"});
  if (v.is_number()) return Value(v.as_float());
  if (v.is_string()) {
    if (auto d = parse_float(v.as_string())) return Value(*d);
  }
  return args.get(0, Value(0.0));
}

Value f_round(const Value& v, CallArgs& a) {
  BoundArgs args(a, "round", {"precision", "method"});
  const int64_t precision = args.integer(0, 0);
  const std::string method = args.string(1, "common");
  if (method != "common" && method != "ceil" && method != "floor") {
    throw EvalError("round: method must be 'common', 'ceil' or 'floor'");
  }
  if (!v.is_number()) {
    if (v.is_undefined()) fail_undefined(v);
    throw EvalError(std::string("round: expected a number, got ") + v.type_name());
  }
  if (precision < 0 || precision > 300) throw EvalError("round: precision must be between 0 and 300");
  if (method == "common") {
    if (!v.is_float()) return Value(v.as_int());
    // printf rounds the exact binary value, ties to even: Python's round(x, n).
    char buf[720];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(precision), v.as_float());
    return Value(std::strtod(buf, nullptr));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_float() * scale;
  return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

// ---- sequences ----

Value f_length(const Value& v, CallArgs& a) {
  BoundArgs(a, "length", {});
  switch (v.type()) {
    case Value::Type::kString: return Value(static_cast<int64_t>(unicode::count_code_points(v.as_string())));
    case Value::Type::kList: return Value(static_cast<int64_t>(v.as_list().size()));
    case Value::Type::kDict: return Value(static_cast<int64_t>(v.as_dict().size()));
    case Value::Type::kUndefined: return Value(int64_t{0});
    default: throw EvalError(std::string("object of type '") + v.type_name() + "' has no len()");
  }
}

Value f_list(const Value& v, CallArgs& a) { BoundArgs(a, "list", {}); return Value::list(iterate(v)); }

Value f_first(const Value& v, CallArgs& a) {
  BoundArgs(a, "first", {});
  ValueList items = iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(const Value& v, CallArgs& a) {
  BoundArgs(a, "last", {});
  ValueList items = iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_reverse(const Value& v, CallArgs& a) {
  BoundArgs(a, "reverse", {});
  ValueList items = iterate(v);
  std::reverse(items.begin(), items.end());
  if (!v.is_string()) return Value::list(std::move(items));
  std::string out;
  for (const Value& c : items) out += c.as_string();
  return Value(std::move(out));
}

Value f_join(const Value& v, CallArgs& a) {
  BoundArgs args(a, "join", {"d", "attribute"});
  const std::string separator = to_str(args.get(0, Value("")));
  const std::optional<std::string> attribute = args.optional_string(1);
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += separator;
    first = false;
    out += to_str(attribute ? get_attribute_path(item, *attribute) : item);
  }
  return Value(std::move(out));
}

Value f_items(const Value& v, CallArgs& a) {
  BoundArgs(a, "items", {});
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) throw EvalError("items: can only get item pairs from a mapping, not " + std::string(v.type_name()));
  ValueList out;
  for (const auto& [key, value] : v.as_dict().items()) out.push_back(Value::list({Value(key), value}, true));
  return Value::list(std::move(out));
}

Value f_default(const Value& v, CallArgs& a) {
  BoundArgs args(a, "default", {"default_value", "boolean"});
  if (v.is_undefined() || (args.flag(1, false) && !v.truthy())) return args.get(0, Value(""));
  return v;
}

Value f_safe(const Value& v, CallArgs& a) { BoundArgs(a, "safe", {}); return Value(to_str(v)); }

// The value the sort and unique filters compare: the attribute, lowercased unless case-sensitive.
Value sort_key(const Value& item, const std::optional<std::string>& attribute, bool case_sensitive) {
  Value key = attribute ? get_attribute_path(item, *attribute) : item;
  if (!case_sensitive && key.is_string()) return Value(unicode::lower(key.as_string()));
  return key;
}

Value f_sort(const Value& v, CallArgs& a) {
  BoundArgs args(a, "sort", {"reverse", "case_sensitive", "attribute"});
  const bool reverse = args.flag(0, false), case_sensitive = args.flag(1, false);
  const std::optional<std::string> attribute = args.optional_string(2);
  std::vector<std::pair<Value, Value>> keyed;
  for (const Value& item : iterate(v)) keyed.emplace_back(sort_key(item, attribute, case_sensitive), item);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? compare(CompareOp::kLt, y.first, x.first) : compare(CompareOp::kLt, x.first, y.first);
  });
  ValueList out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::list(std::move(out));
}

Value f_unique(const Value& v, CallArgs& a) {
  BoundArgs args(a, "unique", {"case_sensitive", "attribute"});
  const bool case_sensitive = args.flag(0, false);
  const std::optional<std::string> attribute = args.optional_string(1);
  ValueList out, seen;
  for (const Value& item : iterate(v)) {
    Value key = sort_key(item, attribute, case_sensitive);
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equal(s, key); })) {
      seen.push_back(std::move(key));
      out.push_back(item);
    }
  }
  return Value::list(std::move(out));
}

Value f_dictsort(const Value& v, CallArgs& a) {
  BoundArgs args(a, "dictsort", {"case_sensitive", "by", "reverse"});
  if (!v.is_dict()) throw EvalError(std::string("dictsort: expected a dict, got ") + v.type_name());
  const bool case_sensitive = args.flag(0, false), reverse = args.flag(2, false);
  const std::string by = args.string(1, "key");
  if (by != "key" && by != "value") throw EvalError("dictsort: by must be 'key' or 'value'");
  std::vector<std::pair<Value, Value>> keyed;  // sort key, (key, value) pair
  for (const auto& [key, value] : v.as_dict().items()) {
    keyed.emplace_back(sort_key(by == "key" ? Value(key) : value, std::nullopt, case_sensitive),
                       Value::list({Value(key), value}, true));
  }
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    return reverse ? compare(CompareOp::kLt, y.first, x.first) : compare(CompareOp::kLt, x.first, y.first);
  });
  ValueList out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::list(std::move(out));
}

Value f_sum(const Value& v, CallArgs& a) {
  BoundArgs args(a, "sum", {"attribute", "start"});
  const std::optional<std::string> attribute = args.optional_string(0);
  Value total = args.get(1, Value(int64_t{0}));
  for (const Value& item : iterate(v)) total = binary(BinaryOp::kAdd, total, attribute ? get_attribute_path(item, *attribute) : item);
  return total;
}

// min / max: the first smallest (largest) item, comparing strings without case unless asked.
Value extreme(const Value& v, CallArgs& a, const char* name, bool largest) {
  BoundArgs args(a, name, {"case_sensitive", "attribute"});
  const bool case_sensitive = args.flag(0, false);
  const std::optional<std::string> attribute = args.optional_string(1);
  std::optional<Value> best, best_key;
  for (const Value& item : iterate(v)) {
    Value key = sort_key(item, attribute, case_sensitive);
    if (!best || compare(CompareOp::kLt, largest ? *best_key : key, largest ? key : *best_key)) {
      best = item;
      best_key = std::move(key);
    }
  }
  return best ? *best : Value::undefined("No aggregated item, sequence was empty.");
}

Value f_min(const Value& v, CallArgs& a) { return extreme(v, a, "min", false); }
Value f_max(const Value& v, CallArgs& a) { return extreme(v, a, "max", true); }

// select / reject / selectattr / rejectattr: keep items whose (attribute's) test result is `keep`.
Value select_items(const Value& v, CallArgs& a, const char* name, bool by_attribute, bool keep) {
  BoundArgs args(a, name, by_attribute ? std::initializer_list<const char*>{"attribute", "test"}
                                       : std::initializer_list<const char*>{"test"}, true);
  const size_t test_index = by_attribute ? 1 : 0;
  std::string attribute;
  if (by_attribute) {
    if (!args.has(0)) throw EvalError(std::string(name) + "() needs the attribute to test");
    attribute = args.string(0, "");
  }
  TestFn test = nullptr;
  if (args.has(test_index)) {
    const std::string test_name = args.string(test_index, "");
    test = find_test(test_name);
    if (test == nullptr) throw EvalError(std::string(name) + "(): unknown test '" + test_name + "'");
  }
  CallArgs test_args{args.rest(), {}};
  ValueList out;
  for (const Value& item : iterate(v)) {
    const Value subject = by_attribute ? get_attribute_path(item, attribute) : item;
    const bool passed = test ? test(subject, test_args) : subject.truthy();
    if (passed == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value f_select(const Value& v, CallArgs& a) { return select_items(v, a, "select", false, true); }
Value f_reject(const Value& v, CallArgs& a) { return select_items(v, a, "reject", false, false); }
Value f_selectattr(const Value& v, CallArgs& a) { return select_items(v, a, "selectattr", true, true); }
Value f_rejectattr(const Value& v, CallArgs& a) { return select_items(v, a, "rejectattr", true, false); }

Value f_map(const Value& v, CallArgs& a) {
  if (!a.positional.empty()) {  // map("filter", args...)
    if (!a.positional[0].is_string()) throw EvalError("map(): the filter name must be a string");
    const std::string filter_name = a.positional[0].as_string();
    const FilterFn filter = find_filter(filter_name);
    if (filter == nullptr) throw EvalError("map(): unknown filter '" + filter_name + "'");
    ValueList out;
    for (const Value& item : iterate(v)) {
      CallArgs rest{ValueList(a.positional.begin() + 1, a.positional.end()), a.keyword};
      out.push_back(filter(item, rest));
    }
    return Value::list(std::move(out));
  }
  BoundArgs args(a, "map", {"attribute", "default"});
  if (!args.has(0)) throw EvalError("map() needs a filter name or attribute=");
  const std::string attribute = args.string(0, "");
  ValueList out;
  for (const Value& item : iterate(v)) {
    Value x = get_attribute_path(item, attribute);
    out.push_back(x.is_undefined() && args.has(1) ? args.get(1, Value()) : x);
  }
  return Value::list(std::move(out));
}

// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
Value f_tojson(const Value& v, CallArgs& a) {
  BoundArgs args(a, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions options;
  options.ensure_ascii = args.flag(0, false);
  options.sort_keys = args.flag(3, false);
  const Value& indent = args.get(1, Value::none());
  if (indent.is_string()) {
    options.indent = indent.as_string();
  } else if (!indent.is_none()) {
    options.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, args.integer(1, 0))), ' ');
  }
  if (options.indent) options.item_separator = ",";
  const Value& separators = args.get(2, Value::none());
  if (!separators.is_none()) {
    if (!separators.is_list() || separators.as_list().size() != 2 || !separators.as_list()[0].is_string() ||
        !separators.as_list()[1].is_string()) {
      throw EvalError("tojson(): separators must be a pair of strings (item, key)");
    }
    options.item_separator = separators.as_list()[0].as_string();
    options.key_separator = separators.as_list()[1].as_string();
  }
  return Value(to_json(v, options));
}

struct FilterEntry {
  const char* name;
  FilterFn fn;
};

const FilterEntry kFilters[] = {
    {"abs", f_abs},           {"capitalize", f_capitalize}, {"count", f_length},     {"d", f_default},
    {"default", f_default},   {"dictsort", f_dictsort},     {"first", f_first},      {"float", f_float},
    {"indent", f_indent},     {"int", f_int},               {"items", f_items},      {"join", f_join},
    {"last", f_last},         {"length", f_length},         {"list", f_list},        {"lower", f_lower},
    {"map", f_map},           {"max", f_max},               {"min", f_min},          {"reject", f_reject},
    {"rejectattr", f_rejectattr}, {"replace", f_replace},   {"reverse", f_reverse},  {"round", f_round},
    {"safe", f_safe},         {"select", f_select},         {"selectattr", f_selectattr}, {"sort", f_sort},
    {"string", f_string},     {"sum", f_sum},               {"title", f_title},      {"tojson", f_tojson},
    {"trim", f_trim},         {"unique", f_unique},         {"upper", f_upper},
};

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const FilterEntry& f : kFilters) {
    if (name == f.name) return f.fn;
  }
  return nullptr;
}

bool is_jinja_filter(std::string_view name) {
  static const char* const kJinja[] = {
      "attr", "batch", "center", "e", "escape", "filesizeformat", "forceescape", "format", "groupby",
      "pprint", "random", "slice", "striptags", "truncate", "urlencode", "urlize", "wordcount", "wordwrap",
      "xmlattr"};
  return find_filter(name) != nullptr ||
         std::any_of(std::begin(kJinja), std::end(kJinja), [&](const char* n) { return name == n; });
}

std::string supported_filter_names() {
  std::string out;
  for (const FilterEntry& f : kFilters) out += std::string(out.empty() ? "" : ", ") + f.name;
  return out;
}

}  // namespace zeroshard::text::jinja
