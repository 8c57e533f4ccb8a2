// SPDX-License-Identifier: Apache-2.0
#include "jinja/methods.h"

#include <algorithm>
#include <initializer_list>

#include "jinja/arguments.h"
#include "jinja/py_str.h"
#include "jinja/unicode.h"
#include "jinja/value_text.h"

namespace zeroshard::text::jinja {
namespace {

bool listed(const std::string& name, std::initializer_list<const char*> names) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return name == n; });
}

Value strings(const std::vector<std::string>& parts) {
  ValueList out;
  for (const auto& p : parts) out.emplace_back(p);
  return Value::list(std::move(out));
}

// startswith / endswith: a string or a tuple of strings.
bool affix_matches(const std::string& s, const Value& affix, bool prefix, const std::string& fn) {
  auto one = [&](const Value& a) {
    if (!a.is_string()) throw EvalError(fn + "() arguments must be str or a tuple of str, not " + a.type_name());
    const std::string& t = a.as_string();
    if (t.size() > s.size()) return false;
    return prefix ? s.compare(0, t.size(), t) == 0 : s.compare(s.size() - t.size(), t.size(), t) == 0;
  };
  if (affix.is_list()) return std::any_of(affix.as_list().begin(), affix.as_list().end(), one);
  return one(affix);
}

Value call_str_method(const std::string& s, const std::string& name, CallArgs& call) {
  const std::string fn = "str." + name;
  if (listed(name, {"strip", "lstrip", "rstrip"})) {
    BoundArgs a(call, fn, {"chars"});
    const auto side = name == "strip" ? py_str::Side::kBoth : name == "lstrip" ? py_str::Side::kLeft : py_str::Side::kRight;
    return Value(py_str::strip(s, a.optional_string(0), side));
  }
  if (name == "split") {
    BoundArgs a(call, fn, {"sep", "maxsplit"});
    return strings(py_str::split(s, a.optional_string(0), static_cast<long>(a.integer(1, -1))));
  }
  if (name == "splitlines") {
    BoundArgs a(call, fn, {});
    return strings(py_str::splitlines(s));
  }
  if (name == "startswith" || name == "endswith") {
    BoundArgs a(call, fn, {"affix"});
    if (!a.has(0)) throw EvalError(fn + "() takes at least 1 argument (0 given)");
    return Value(affix_matches(s, a.get(0, Value()), name == "startswith", fn));
  }
  if (name == "replace") {
    BoundArgs a(call, fn, {"old", "new", "count"});
    if (!a.has(1)) throw EvalError(fn + "() takes at least 2 arguments");
    return Value(py_str::replace(s, a.string(0, ""), a.string(1, ""), static_cast<long>(a.integer(2, -1))));
  }
  if (name == "find" || name == "count") {
    BoundArgs a(call, fn, {"sub"});
    if (!a.has(0)) throw EvalError(fn + "() takes at least 1 argument (0 given)");
    const std::string sub = a.string(0, "");
    return Value(static_cast<int64_t>(name == "find" ? py_str::find(s, sub) : py_str::count(s, sub)));
  }
  if (name == "join") {
    BoundArgs a(call, fn, {"iterable"});
    if (!a.has(0)) throw EvalError(fn + "() takes exactly one argument (0 given)");
    const Value& items = a.get(0, Value());
    if (!items.is_list()) throw EvalError(fn + "() can only join a list of strings, not " + std::string(items.type_name()));
    std::string out;
    for (size_t i = 0; i < items.as_list().size(); ++i) {
      const Value& item = items.as_list()[i];
      if (!item.is_string()) {
        throw EvalError(fn + "(): sequence item " + std::to_string(i) + ": expected str instance, " +
                        item.type_name() + " found");
      }
      if (i > 0) out += s;
      out += item.as_string();
    }
    return Value(std::move(out));
  }
  BoundArgs a(call, fn, {});
  if (name == "upper") return Value(unicode::upper(s));
  if (name == "lower") return Value(unicode::lower(s));
  if (name == "title") return Value(unicode::title(s));
  return Value(unicode::capitalize(s));
}

Value call_dict_method(const Value& self, const std::string& name, CallArgs& call) {
  const ValueDict& d = self.as_dict();
  if (name == "get") {
    BoundArgs a(call, "dict.get", {"key", "default"});
    if (!a.has(0)) throw EvalError("dict.get() takes at least 1 argument (0 given)");
    const Value& key = a.get(0, Value());
    const Value* found = key.is_string() ? d.find(key.as_string()) : nullptr;
    return found != nullptr ? *found : a.get(1, Value::none());
  }
  BoundArgs a(call, "dict." + name, {});
  ValueList out;
  for (const auto& [key, value] : d.items()) {
    if (name == "keys") {
      out.emplace_back(key);
    } else if (name == "values") {
      out.push_back(value);
    } else {
      out.push_back(Value::list({Value(key), value}, true));
    }
  }
  return Value::list(std::move(out));
}

std::string unsupported_hint(const char* type, const std::string& name) {
  return std::string("the ") + type + " method '" + name + "' is not supported in chat templates";
}

}  // namespace

std::optional<Value> find_method(const Value& obj, const std::string& name, std::string* unsupported) {
  if (obj.is_string()) {
    if (listed(name, {"strip", "lstrip", "rstrip", "split", "splitlines", "startswith", "endswith", "replace",
                      "find", "count", "join", "upper", "lower", "title", "capitalize"})) {
      const std::string s = obj.as_string();
      return Value::callable("str." + name, [s, name](CallArgs& args) { return call_str_method(s, name, args); });
    }
    if (listed(name, {"casefold", "center", "encode", "expandtabs", "format", "format_map", "index", "isalnum",
                      "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower", "isnumeric",
                      "isprintable", "isspace", "istitle", "isupper", "ljust", "partition", "removeprefix",
                      "removesuffix", "rfind", "rindex", "rjust", "rpartition", "rsplit", "swapcase",
                      "translate", "zfill"})) {
      *unsupported = unsupported_hint("str", name);
    }
  } else if (obj.is_dict()) {
    if (listed(name, {"items", "keys", "values", "get"})) {
      return Value::callable("dict." + name, [obj, name](CallArgs& args) { return call_dict_method(obj, name, args); });
    }
    if (listed(name, {"clear", "copy", "fromkeys", "pop", "popitem", "setdefault", "update"})) {
      *unsupported = unsupported_hint("dict", name);
    }
  } else if (obj.is_list()) {
    if (listed(name, {"append", "clear", "copy", "count", "extend", "index", "insert", "pop", "remove", "reverse",
                      "sort"})) {
      *unsupported = unsupported_hint(obj.type_name(), name);
    }
  }
  return std::nullopt;
}

}  // namespace zeroshard::text::jinja
