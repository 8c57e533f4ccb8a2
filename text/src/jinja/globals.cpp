// SPDX-License-Identifier: Apache-2.0
#include "jinja/globals.h"

#include <iomanip>
#include <locale>
#include <sstream>

#include "jinja/arguments.h"
#include "jinja/value_text.h"

namespace zeroshard::text::jinja {
namespace {

constexpr int64_t kMaxRange = 100000;  // Jinja's sandbox refuses longer ranges

Value range(CallArgs& call) {
  BoundArgs a(call, "range", {"start", "stop", "step"});
  if (!a.has(0)) throw EvalError("range() takes at least 1 argument (0 given)");
  int64_t start = a.integer(0, 0), stop = a.integer(1, 0);
  if (!a.has(1)) {
    stop = start;
    start = 0;
  }
  const int64_t step = a.integer(2, 1);
  if (step == 0) throw EvalError("range() arg 3 must not be zero");
  ValueList out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (static_cast<int64_t>(out.size()) == kMaxRange) {
      throw EvalError("range() is too big: more than 100000 items");
    }
    out.emplace_back(i);
  }
  return Value::list(std::move(out));
}

// dict(mapping or pairs, **keywords), the arguments of namespace() and dict().
ValueDict dict_from(CallArgs& call, const char* fn) {
  if (call.positional.size() > 1) throw EvalError(std::string(fn) + "() takes at most 1 positional argument");
  ValueDict out;
  if (!call.positional.empty()) {
    const Value& source = call.positional[0];
    if (source.is_dict()) {
      out = source.as_dict();
    } else if (source.is_list()) {
      for (const Value& pair : source.as_list()) {
        if (!pair.is_list() || pair.as_list().size() != 2 || !pair.as_list()[0].is_string()) {
          throw EvalError(std::string(fn) + "(): each item must be a (string key, value) pair");
        }
        out.set(pair.as_list()[0].as_string(), pair.as_list()[1]);
      }
    } else {
      throw EvalError(std::string(fn) + "(): expected a dict or a list of pairs, not " + source.type_name());
    }
  }
  for (auto& [key, value] : call.keyword) out.set(key, value);
  return out;
}

std::string format_time(const std::tm& time, const std::string& format) {
  std::ostringstream os;
  os.imbue(std::locale::classic());  // Python's strftime in the C locale: "Jul", "Monday"
  os << std::put_time(&time, format.c_str());
  return os.str();
}

}  // namespace

void add_globals(ValueDict& globals, const std::optional<std::tm>& now, std::shared_ptr<ValueList> namespaces) {
  globals.set("range", Value::callable("range", range));
  globals.set("namespace", Value::callable("namespace", [namespaces](CallArgs& call) {
    namespaces->push_back(Value::make_namespace(dict_from(call, "namespace")));
    return namespaces->back();
  }));
  globals.set("dict", Value::callable("dict", [](CallArgs& call) { return Value::dict(dict_from(call, "dict")); }));
  globals.set("raise_exception", Value::callable("raise_exception", [](CallArgs& call) -> Value {
    BoundArgs a(call, "raise_exception", {"message"});
    throw RaisedError(to_str(a.get(0, Value(""))));
  }));
  globals.set("strftime_now", Value::callable("strftime_now", [now](CallArgs& call) {
    BoundArgs a(call, "strftime_now", {"format"});
    if (!a.has(0)) throw EvalError("strftime_now() takes exactly 1 argument (0 given)");
    std::tm time{};
    if (now) {
      time = *now;
    } else {
      const std::time_t t = std::time(nullptr);
      localtime_r(&t, &time);
    }
    return Value(format_time(time, a.string(0, "")));
  }));
}

}  // namespace zeroshard::text::jinja
