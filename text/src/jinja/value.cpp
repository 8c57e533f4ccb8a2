// SPDX-License-Identifier: Apache-2.0
#include "jinja/value.h"

namespace zeroshard::text::jinja {

const Value* ValueDict::find(std::string_view key) const {
  for (const auto& [k, v] : items_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void ValueDict::set(const std::string& key, Value value) {
  for (auto& [k, v] : items_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items_.emplace_back(key, std::move(value));
}

void ValueDict::append(std::string key, Value value) { items_.emplace_back(std::move(key), std::move(value)); }

const std::string& Value::empty_string() {
  static const std::string empty;
  return empty;
}

Value Value::undefined(std::string hint) {
  Value v;
  if (!hint.empty()) v.str_ = std::make_shared<const std::string>(std::move(hint));
  return v;
}

Value Value::none() {
  Value v;
  v.type_ = Type::kNone;
  return v;
}

Value Value::list(ValueList items, bool tuple) {
  Value v;
  v.type_ = Type::kList;
  v.list_ = std::make_shared<const ListData>(ListData{std::move(items), tuple});
  return v;
}

Value Value::dict(ValueDict items) {
  Value v;
  v.type_ = Type::kDict;
  v.dict_ = std::make_shared<ValueDict>(std::move(items));
  return v;
}

Value Value::make_namespace(ValueDict attributes) {
  Value v = dict(std::move(attributes));
  v.type_ = Type::kNamespace;
  return v;
}

Value Value::callable(std::string name, std::function<Value(CallArgs&)> fn) {
  Value v;
  v.type_ = Type::kCallable;
  v.callable_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}

bool Value::same_object(const Value& other) const {
  if (type_ != other.type_) return false;
  if (type_ == Type::kNamespace) return dict_ == other.dict_;
  if (type_ == Type::kCallable) return callable_ == other.callable_;
  return false;
}

bool Value::truthy() const {
  switch (type_) {
    case Type::kUndefined: case Type::kNone: return false;
    case Type::kBool: case Type::kInt: return int_ != 0;
    case Type::kFloat: return float_ != 0;
    case Type::kString: return !as_string().empty();
    case Type::kList: return !list_->items.empty();
    case Type::kDict: return dict_->size() != 0;
    case Type::kNamespace: case Type::kCallable: return true;
  }
  return false;
}

const char* Value::type_name() const {
  switch (type_) {
    case Type::kUndefined: return "undefined";
    case Type::kNone: return "NoneType";
    case Type::kBool: return "bool";
    case Type::kInt: return "int";
    case Type::kFloat: return "float";
    case Type::kString: return "str";
    case Type::kList: return list_->tuple ? "tuple" : "list";
    case Type::kDict: return "dict";
    case Type::kNamespace: return "Namespace";
    case Type::kCallable: return "function";
  }
  return "?";
}

namespace {

bool equal_dicts(const ValueDict& a, const ValueDict& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [key, value] : a.items()) {
    const Value* other = b.find(key);
    if (other == nullptr || !equal(value, *other)) return false;
  }
  return true;
}

}  // namespace

bool equal(const Value& a, const Value& b) {
  using T = Value::Type;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case T::kUndefined: case T::kNone: return true;
    case T::kString: return &a.as_string() == &b.as_string() || a.as_string() == b.as_string();
    case T::kList: {
      if (a.is_tuple() != b.is_tuple() || a.as_list().size() != b.as_list().size()) return false;
      for (size_t i = 0; i < a.as_list().size(); ++i) {
        if (!equal(a.as_list()[i], b.as_list()[i])) return false;
      }
      return true;
    }
    case T::kDict: return equal_dicts(a.as_dict(), b.as_dict());
    default: return a.same_object(b);
  }
}

}  // namespace zeroshard::text::jinja
