// SPDX-License-Identifier: Apache-2.0
#pragma once
// The values a template computes with, modelled on the Python objects Jinja sees when Hugging Face
// transformers renders a chat template: undefined, None, bool, int, float, str, list (or tuple),
// dict (string keys, insertion order), namespace (the one mutable object) and callables. Lists and
// dicts are immutable and shared: copying a Value is cheap. Strings are valid UTF-8.
// Thread-safety: a Value may be read from several threads; namespaces are mutated only by the
// render that created them.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zeroshard::text::jinja {

class Value;
using ValueList = std::vector<Value>;

// A dict with string keys in insertion order (Python's dict for JSON-like data).
class ValueDict {
 public:
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value value);  // replaces an existing key in place
  void append(std::string key, Value value);      // a key known to be new
  void reserve(size_t n) { items_.reserve(n); }
  const std::vector<std::pair<std::string, Value>>& items() const { return items_; }
  size_t size() const { return items_.size(); }

 private:
  std::vector<std::pair<std::string, Value>> items_;
};

// Arguments of a call: positional, then keyword (in the order written).
struct CallArgs {
  ValueList positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// Something a template can call: a global function, a bound method, a macro.
struct Callable {
  std::string name;  // for messages: "raise_exception", "str.strip", "macro 'm'"
  std::function<Value(CallArgs&)> call;
};

class Value {
 public:
  enum class Type { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };

  Value() = default;  // undefined, without a hint
  Value(bool b) : type_(Type::kBool), int_(b) {}
  Value(int64_t i) : type_(Type::kInt), int_(i) {}
  Value(int i) : type_(Type::kInt), int_(i) {}
  Value(double f) : type_(Type::kFloat), float_(f) {}
  Value(std::string s) : type_(Type::kString), str_(std::make_shared<const std::string>(std::move(s))) {}
  Value(const char* s) : type_(Type::kString), str_(std::make_shared<const std::string>(s)) {}

  // `hint` says why it is undefined ("'x' is undefined", "list object has no element 3"): the
  // error text when the template uses it in a way Jinja's Undefined refuses.
  static Value undefined(std::string hint);
  static Value none();
  static Value list(ValueList items, bool tuple = false);
  static Value dict(ValueDict items);
  static Value make_namespace(ValueDict attributes);
  static Value callable(std::string name, std::function<Value(CallArgs&)> fn);

  Type type() const { return type_; }
  bool is_undefined() const { return type_ == Type::kUndefined; }
  bool is_none() const { return type_ == Type::kNone; }
  bool is_bool() const { return type_ == Type::kBool; }
  bool is_int() const { return type_ == Type::kInt; }
  bool is_float() const { return type_ == Type::kFloat; }
  bool is_number() const { return type_ == Type::kBool || type_ == Type::kInt || type_ == Type::kFloat; }
  bool is_string() const { return type_ == Type::kString; }
  bool is_list() const { return type_ == Type::kList; }
  bool is_dict() const { return type_ == Type::kDict; }
  bool is_namespace() const { return type_ == Type::kNamespace; }
  bool is_callable() const { return type_ == Type::kCallable; }

  bool as_bool() const { return int_ != 0; }
  int64_t as_int() const { return int_; }  // bool and int
  double as_float() const { return type_ == Type::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& as_string() const { return str_ ? *str_ : empty_string(); }
  const ValueList& as_list() const { return list_->items; }
  bool is_tuple() const { return list_->tuple; }
  const ValueDict& as_dict() const { return *dict_; }
  ValueDict& namespace_attributes() const { return *dict_; }
  const Callable& as_callable() const { return *callable_; }
  const std::string& undefined_hint() const { return as_string(); }
  bool same_object(const Value& other) const;  // identity of a namespace or callable

  bool truthy() const;
  // Python's type name for messages: "str", "int", "list", "dict", "NoneType", "undefined", ...
  const char* type_name() const;

 private:
  struct ListData {
    ValueList items;
    bool tuple = false;
  };
  Type type_ = Type::kUndefined;
  int64_t int_ = 0;
  double float_ = 0;
  static const std::string& empty_string();
  std::shared_ptr<const std::string> str_;  // the string, or the hint of an undefined value
  std::shared_ptr<const ListData> list_;
  std::shared_ptr<ValueDict> dict_;  // dict (never mutated once built) or namespace
  std::shared_ptr<const Callable> callable_;
};

// Python's == (1 == 1.0 == True, deep comparison of lists and dicts; a list never equals a tuple).
bool equal(const Value& a, const Value& b);

}  // namespace zeroshard::text::jinja
