// SPDX-License-Identifier: Apache-2.0
#include "jinja/access.h"

#include "jinja/eval_error.h"
#include "jinja/methods.h"
#include "jinja/operators.h"
#include "jinja/unicode.h"
#include "jinja/value_text.h"

namespace zeroshard::text::jinja {
namespace {

// Jinja's object_type_repr: "None", or "<type> object".
std::string object_type(const Value& obj) {
  return obj.is_none() ? "None" : std::string(obj.type_name()) + " object";
}

Value no_attribute(const Value& obj, const std::string& name, const std::string& unsupported) {
  if (!unsupported.empty()) return Value::undefined(unsupported);
  return Value::undefined("'" + object_type(obj) + "' has no attribute '" + name + "'");
}

Value no_element(const Value& obj, const Value& key) {
  return Value::undefined(object_type(obj) + " has no element " + repr(key));
}

// Python's index normalization: negative counts from the end; nullopt when out of range.
std::optional<size_t> normalize_index(int64_t index, size_t size) {
  if (index < 0) index += static_cast<int64_t>(size);
  if (index < 0 || index >= static_cast<int64_t>(size)) return std::nullopt;
  return static_cast<size_t>(index);
}

int64_t slice_bound(const Value& v, const char* which) {
  if (v.is_int() || v.is_bool()) return v.as_int();
  throw EvalError(std::string("slice ") + which + " must be an integer or none, not " + v.type_name());
}

// The positions a Python slice visits in a sequence of `size` items.
std::vector<size_t> slice_positions(size_t size, const Value& start_v, const Value& stop_v, const Value& step_v) {
  const int64_t n = static_cast<int64_t>(size);
  const int64_t step = step_v.is_none() ? 1 : slice_bound(step_v, "step");
  if (step == 0) throw EvalError("slice step cannot be zero");
  const int64_t lower = step > 0 ? 0 : -1, upper = step > 0 ? n : n - 1;
  auto clamp = [&](const Value& v, int64_t fallback, const char* which) {
    if (v.is_none()) return fallback;
    int64_t i = slice_bound(v, which);
    if (i < 0) i += n;
    return i < lower ? lower : i > upper ? upper : i;
  };
  const int64_t start = clamp(start_v, step > 0 ? lower : upper, "start");
  const int64_t stop = clamp(stop_v, step > 0 ? upper : lower, "stop");
  std::vector<size_t> positions;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) positions.push_back(static_cast<size_t>(i));
  return positions;
}

}  // namespace

Value get_attribute(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  std::string unsupported;
  if (std::optional<Value> method = find_method(obj, name, &unsupported)) return *method;
  if (obj.is_dict() || obj.is_namespace()) {
    const ValueDict& d = obj.is_dict() ? obj.as_dict() : obj.namespace_attributes();
    if (const Value* v = d.find(name)) return *v;
  }
  return no_attribute(obj, name, unsupported);
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  const bool int_key = key.is_int() || key.is_bool();
  if (obj.is_list() && int_key) {
    if (auto i = normalize_index(key.as_int(), obj.as_list().size())) return obj.as_list()[*i];
    return no_element(obj, key);
  }
  if (obj.is_string() && int_key) {
    const std::u32string cps = unicode::decode(obj.as_string());
    if (auto i = normalize_index(key.as_int(), cps.size())) return Value(unicode::encode(cps.substr(*i, 1)));
    return no_element(obj, key);
  }
  if ((obj.is_dict() || obj.is_namespace()) && key.is_string()) {
    const ValueDict& d = obj.is_dict() ? obj.as_dict() : obj.namespace_attributes();
    if (const Value* v = d.find(key.as_string())) return *v;
  }
  if (key.is_string()) {
    std::string unsupported;
    if (std::optional<Value> method = find_method(obj, key.as_string(), &unsupported)) return *method;
    return no_attribute(obj, key.as_string(), unsupported);
  }
  return no_element(obj, key);
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) fail_undefined(obj);
  for (const Value* part : {&start, &stop, &step}) {
    if (part->is_undefined()) fail_undefined(*part);
  }
  if (obj.is_list()) {
    ValueList out;
    for (size_t i : slice_positions(obj.as_list().size(), start, stop, step)) out.push_back(obj.as_list()[i]);
    return Value::list(std::move(out), obj.is_tuple());
  }
  if (obj.is_string()) {
    const std::u32string cps = unicode::decode(obj.as_string());
    std::string out;
    for (size_t i : slice_positions(cps.size(), start, stop, step)) unicode::append_utf8(out, cps[i]);
    return Value(std::move(out));
  }
  throw EvalError(std::string("'") + obj.type_name() + "' object is not subscriptable");
}

Value get_attribute_path(const Value& obj, const std::string& path) {
  Value v = obj;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool digits = !part.empty() && part.find_first_not_of("0123456789") == std::string::npos;
    v = digits ? get_item(v, Value(static_cast<int64_t>(std::stoll(part)))) : get_item(v, Value(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

ValueList iterate(const Value& v) {
  switch (v.type()) {
    case Value::Type::kList: return v.as_list();
    case Value::Type::kUndefined: return {};
    case Value::Type::kString: {
      ValueList chars;
      for (char32_t c : unicode::decode(v.as_string())) chars.emplace_back(unicode::encode(std::u32string(1, c)));
      return chars;
    }
    case Value::Type::kDict: {
      ValueList keys;
      for (const auto& item : v.as_dict().items()) keys.emplace_back(item.first);
      return keys;
    }
    default: throw EvalError(std::string("'") + v.type_name() + "' object is not iterable");
  }
}

}  // namespace zeroshard::text::jinja
