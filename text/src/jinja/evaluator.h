// SPDX-License-Identifier: Apache-2.0
#pragma once
// Runs parsed statements against variables, writing the output text. Scoping follows Jinja's:
// `set` at the top level and inside if-blocks writes the template's scope; each loop iteration,
// macro call, block set, filter block and generation block gets a fresh scope that ends with it;
// namespaces are shared. Errors come
// out as ConfigError "<source>:<line>: ..." (ChatTemplateError for raise_exception).
// One Evaluator serves one render on one thread.

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "jinja/ast.h"
#include "jinja/value.h"

namespace zeroshard::text::jinja {

class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}
  const Value* find(const std::string& name) const;
  void set(const std::string& name, Value value) { vars_[name] = std::move(value); }

 private:
  std::shared_ptr<Scope> parent_;
  std::unordered_map<std::string, Value> vars_;
};
using ScopePtr = std::shared_ptr<Scope>;

class Evaluator {
 public:
  explicit Evaluator(const std::string& source_name) : source_name_(source_name) {}
  // Renders `body` in `scope` (the template's scope, whose parent holds the variables).
  std::string render(const Body& body, const ScopePtr& scope);

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec_body(const Body& body, const ScopePtr& scope, std::string& out);
  Flow exec(const Stmt& stmt, const ScopePtr& scope, std::string& out);
  Flow exec_for(const ForStmt& stmt, const ScopePtr& scope, std::string& out);
  void exec_set(const SetStmt& stmt, const ScopePtr& scope);
  Value make_macro(const MacroStmt& stmt, const ScopePtr& scope);
  Value call_macro(const MacroStmt& stmt, const ScopePtr& defining_scope, CallArgs& args);
  void bind_targets(const std::vector<std::string>& targets, bool unpack, const Value& value, Scope& scope);

  Value eval(const Expr& expr, const ScopePtr& scope);
  Value eval_node(const Expr& expr, const ScopePtr& scope);
  Value eval_container(const Expr& expr, const ScopePtr& scope);  // list, tuple or dict literal
  Value eval_call(const CallExpr& call, const ScopePtr& scope);
  CallArgs eval_args(const Arguments& args, const ScopePtr& scope);
  Value apply_filter(const FilterExpr& filter, const Value& operand, const ScopePtr& scope);
  bool eval_compare(const CompareExpr& expr, const ScopePtr& scope);

  [[noreturn]] void fail(int line, const std::string& message) const;

  const std::string& source_name_;
  int macro_depth_ = 0;
  // The scopes macros were defined in, kept for the render: a macro holds its scope weakly, as
  // the scope holds the macro (a shared_ptr cycle would never be freed).
  std::vector<ScopePtr> macro_scopes_;
};

}  // namespace zeroshard::text::jinja
