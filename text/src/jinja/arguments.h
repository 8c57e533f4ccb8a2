// SPDX-License-Identifier: Apache-2.0
#pragma once
// Binds the arguments of a call to a function's named parameters, as Python does (positional
// first, then by keyword), and reads them with the types the function needs. Mistakes are
// EvalErrors in Python's words: "join() got an unexpected keyword argument 'sep'".

#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "jinja/eval_error.h"
#include "jinja/value.h"

namespace zeroshard::text::jinja {

class BoundArgs {
 public:
  // `extra_positional`: the function takes any number of positional arguments after `params`
  // (in rest()); otherwise more than params.size() is an error.
  BoundArgs(CallArgs& args, std::string function, std::initializer_list<const char*> params,
            bool extra_positional = false)
      : function_(std::move(function)), params_(params) {
    size_t n = std::min(args.positional.size(), params_.size());
    values_.assign(params_.size(), std::nullopt);
    for (size_t i = 0; i < n; ++i) values_[i] = args.positional[i];
    if (args.positional.size() > params_.size()) {
      if (!extra_positional) {
        throw EvalError(function_ + "() takes at most " + std::to_string(params_.size()) + " argument(s) (" +
                        std::to_string(args.positional.size()) + " given)");
      }
      rest_.assign(args.positional.begin() + static_cast<long>(params_.size()), args.positional.end());
    }
    for (auto& [key, value] : args.keyword) {
      size_t i = 0;
      while (i < params_.size() && key != params_[i]) ++i;
      if (i == params_.size()) throw EvalError(function_ + "() got an unexpected keyword argument '" + key + "'");
      if (values_[i]) throw EvalError(function_ + "() got multiple values for argument '" + key + "'");
      values_[i] = value;
    }
  }

  bool has(size_t i) const { return values_[i].has_value(); }
  Value get(size_t i, Value fallback) const { return values_[i] ? *values_[i] : std::move(fallback); }
  const ValueList& rest() const { return rest_; }

  std::string string(size_t i, const std::string& fallback) const {
    if (!values_[i]) return fallback;
    if (!values_[i]->is_string()) fail_type(i, "a string");
    return values_[i]->as_string();
  }
  std::optional<std::string> optional_string(size_t i) const {  // None and absent alike
    if (!values_[i] || values_[i]->is_none()) return std::nullopt;
    return string(i, "");
  }
  int64_t integer(size_t i, int64_t fallback) const {
    if (!values_[i]) return fallback;
    if (!values_[i]->is_int() && !values_[i]->is_bool()) fail_type(i, "an integer");
    return values_[i]->as_int();
  }
  bool flag(size_t i, bool fallback) const { return values_[i] ? values_[i]->truthy() : fallback; }

  [[noreturn]] void fail_type(size_t i, const char* wanted) const {
    throw EvalError(function_ + "(): argument '" + params_[i] + "' must be " + wanted + ", not " +
                    values_[i]->type_name());
  }

 private:
  std::string function_;
  std::vector<const char*> params_;
  std::vector<std::optional<Value>> values_;
  ValueList rest_;
};

}  // namespace zeroshard::text::jinja
