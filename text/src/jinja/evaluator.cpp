// SPDX-License-Identifier: Apache-2.0
#include "jinja/evaluator.h"

#include "jinja/access.h"
#include "jinja/eval_error.h"
#include "jinja/operators.h"
#include "jinja/value_text.h"
#include "zeroshard/text/chat_template.h"

namespace zeroshard::text::jinja {
namespace {

constexpr int kMaxMacroDepth = 100;

template <typename T>
const T& as(const Expr& e) {
  return static_cast<const T&>(e);
}
template <typename T>
const T& as(const Stmt& s) {
  return static_cast<const T&>(s);
}

// The `loop` variable of iteration i of n.
Value loop_value(const ValueList& items, size_t i) {
  const int64_t n = static_cast<int64_t>(items.size()), k = static_cast<int64_t>(i);
  ValueDict loop;
  loop.reserve(12);
  loop.append("index", Value(k + 1));
  loop.append("index0", Value(k));
  loop.append("revindex", Value(n - k));
  loop.append("revindex0", Value(n - k - 1));
  loop.append("first", Value(k == 0));
  loop.append("last", Value(k == n - 1));
  loop.append("length", Value(n));
  loop.append("previtem", k > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
  loop.append("nextitem", k + 1 < n ? items[i + 1] : Value::undefined("there is no next item"));
  loop.append("depth", Value(int64_t{1}));
  loop.append("depth0", Value(int64_t{0}));
  loop.append("cycle", Value::callable("loop.cycle", [k](CallArgs& args) {
    if (args.positional.empty() || !args.keyword.empty()) throw EvalError("loop.cycle() needs at least one value");
    return args.positional[static_cast<size_t>(k) % args.positional.size()];
  }));
  return Value::dict(std::move(loop));
}

}  // namespace

const Value* Scope::find(const std::string& name) const {
  for (const Scope* s = this; s != nullptr; s = s->parent_.get()) {
    const auto it = s->vars_.find(name);
    if (it != s->vars_.end()) return &it->second;
  }
  return nullptr;
}

void Evaluator::fail(int line, const std::string& message) const {
  ZS_THROW(ConfigError, source_name_, ":", line, ": ", message);
}

std::string Evaluator::render(const Body& body, const ScopePtr& scope) {
  std::string out;
  exec_body(body, scope, out);
  return out;
}

Evaluator::Flow Evaluator::exec_body(const Body& body, const ScopePtr& scope, std::string& out) {
  for (const StmtPtr& stmt : body) {
    const Flow flow = exec(*stmt, scope, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Evaluator::Flow Evaluator::exec(const Stmt& stmt, const ScopePtr& scope, std::string& out) {
  try {
    switch (stmt.kind) {
      case Stmt::Kind::kText: out += as<TextStmt>(stmt).text; break;
      case Stmt::Kind::kOutput: out += to_str(eval(*as<OutputStmt>(stmt).expr, scope)); break;
      case Stmt::Kind::kIf:
        for (const auto& [test, body] : as<IfStmt>(stmt).branches) {
          if (eval(*test, scope).truthy()) return exec_body(body, scope, out);
        }
        return exec_body(as<IfStmt>(stmt).otherwise, scope, out);
      case Stmt::Kind::kFor: return exec_for(as<ForStmt>(stmt), scope, out);
      case Stmt::Kind::kSet: exec_set(as<SetStmt>(stmt), scope); break;
      case Stmt::Kind::kMacro: scope->set(as<MacroStmt>(stmt).name, make_macro(as<MacroStmt>(stmt), scope)); break;
      case Stmt::Kind::kFilterBlock: {
        const auto& block = as<FilterBlockStmt>(stmt);
        std::string inner;
        exec_body(block.body, std::make_shared<Scope>(scope), inner);  // its sets stay inside
        Value v(std::move(inner));
        for (const auto& filter : block.filters) v = apply_filter(*filter, v, scope);
        out += to_str(v);
        break;
      }
      case Stmt::Kind::kBlock: return exec_body(as<BlockStmt>(stmt).body, std::make_shared<Scope>(scope), out);
      case Stmt::Kind::kBreak: return Flow::kBreak;
      case Stmt::Kind::kContinue: return Flow::kContinue;
    }
  } catch (const EvalError& e) {
    fail(stmt.line, e.what());
  }
  return Flow::kNormal;
}

void Evaluator::bind_targets(const std::vector<std::string>& targets, bool unpack, const Value& value, Scope& scope) {
  if (!unpack) {
    scope.set(targets[0], value);
    return;
  }
  const ValueList items = iterate(value);
  if (items.size() != targets.size()) {
    throw EvalError(items.size() > targets.size()
                        ? "too many values to unpack (expected " + std::to_string(targets.size()) + ")"
                        : "not enough values to unpack (expected " + std::to_string(targets.size()) + ", got " +
                              std::to_string(items.size()) + ")");
  }
  for (size_t i = 0; i < items.size(); ++i) scope.set(targets[i], items[i]);
}

Evaluator::Flow Evaluator::exec_for(const ForStmt& stmt, const ScopePtr& scope, std::string& out) {
  ValueList items = iterate(eval(*stmt.iterable, scope));
  if (stmt.condition) {
    ValueList kept;
    for (Value& item : items) {
      auto test_scope = std::make_shared<Scope>(scope);
      bind_targets(stmt.targets, stmt.unpack, item, *test_scope);
      if (eval(*stmt.condition, test_scope).truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    auto iteration = std::make_shared<Scope>(scope);  // what the body sets ends with the iteration
    iteration->set("loop", loop_value(items, i));
    bind_targets(stmt.targets, stmt.unpack, items[i], *iteration);
    if (exec_body(stmt.body, iteration, out) == Flow::kBreak) break;
  }
  if (items.empty()) return exec_body(stmt.otherwise, scope, out);
  return Flow::kNormal;
}

void Evaluator::exec_set(const SetStmt& stmt, const ScopePtr& scope) {
  Value value;
  if (stmt.value) {
    value = eval(*stmt.value, scope);
  } else {
    std::string body;
    exec_body(stmt.body, std::make_shared<Scope>(scope), body);  // its sets stay inside
    value = Value(std::move(body));
    for (const auto& filter : stmt.filters) value = apply_filter(*filter, value, scope);
  }
  if (stmt.attribute.empty()) {
    bind_targets(stmt.targets, stmt.unpack, value, *scope);
    return;
  }
  const Value* ns = scope->find(stmt.targets[0]);
  if (ns == nullptr || !ns->is_namespace()) {
    throw EvalError("cannot set '" + stmt.targets[0] + "." + stmt.attribute + "': '" + stmt.targets[0] +
                    "' is not a namespace() object");
  }
  ns->namespace_attributes().set(stmt.attribute, std::move(value));
}

Value Evaluator::make_macro(const MacroStmt& stmt, const ScopePtr& scope) {
  macro_scopes_.push_back(scope);
  std::weak_ptr<Scope> defining = scope;
  return Value::callable("macro '" + stmt.name + "'", [this, &stmt, defining](CallArgs& args) {
    return call_macro(stmt, defining.lock(), args);
  });
}

Value Evaluator::call_macro(const MacroStmt& stmt, const ScopePtr& defining_scope, CallArgs& args) {
  const std::string name = "macro '" + stmt.name + "'";
  if (args.positional.size() > stmt.params.size()) {
    throw EvalError(name + " takes not more than " + std::to_string(stmt.params.size()) + " argument(s)");
  }
  for (const auto& kw : args.keyword) {
    bool known = false;
    for (const auto& p : stmt.params) known = known || p.first == kw.first;
    if (!known) throw EvalError(name + " takes no keyword argument '" + kw.first + "'");
  }
  if (macro_depth_ >= kMaxMacroDepth) throw EvalError("macro calls nested more than 100 deep (a recursive macro?)");
  auto scope = std::make_shared<Scope>(defining_scope);
  for (size_t i = 0; i < stmt.params.size(); ++i) {
    const auto& [param, default_value] = stmt.params[i];
    const Value* given = i < args.positional.size() ? &args.positional[i] : nullptr;
    for (const auto& kw : args.keyword) {
      if (kw.first != param) continue;
      if (given != nullptr) throw EvalError(name + " got multiple values for argument '" + param + "'");
      given = &kw.second;
    }
    if (given != nullptr) {
      scope->set(param, *given);
    } else if (default_value) {
      scope->set(param, eval(*default_value, scope));
    } else {
      scope->set(param, Value::undefined("parameter '" + param + "' was not provided"));
    }
  }
  ++macro_depth_;
  std::string out;
  try {
    exec_body(stmt.body, scope, out);
  } catch (...) {
    --macro_depth_;
    throw;
  }
  --macro_depth_;
  return Value(std::move(out));
}

CallArgs Evaluator::eval_args(const Arguments& args, const ScopePtr& scope) {
  CallArgs out;
  for (const ExprPtr& e : args.positional) out.positional.push_back(eval(*e, scope));
  for (const auto& [key, e] : args.keyword) out.keyword.emplace_back(key, eval(*e, scope));
  return out;
}

Value Evaluator::apply_filter(const FilterExpr& filter, const Value& operand, const ScopePtr& scope) {
  CallArgs args = eval_args(filter.args, scope);
  try {
    return filter.fn(operand, args);
  } catch (const EvalError& e) {
    fail(filter.line, std::string(e.what()) + " (in the filter '" + filter.name + "')");
  }
}

bool Evaluator::eval_compare(const CompareExpr& expr, const ScopePtr& scope) {
  Value left = eval(*expr.first, scope);
  for (const auto& [op, right_expr] : expr.rest) {
    Value right = eval(*right_expr, scope);
    if (!compare(op, left, right)) return false;
    left = std::move(right);
  }
  return true;
}

Value Evaluator::eval(const Expr& expr, const ScopePtr& scope) {
  try {
    return eval_node(expr, scope);
  } catch (const EvalError& e) {
    fail(expr.line, e.what());
  } catch (const RaisedError& e) {
    ZS_THROW(ChatTemplateError, source_name_, ":", expr.line, ": the template raised an error: ", e.what());
  }
}

Value Evaluator::eval_container(const Expr& expr, const ScopePtr& scope) {
  if (expr.kind == Expr::Kind::kList) {
    ValueList items;
    for (const ExprPtr& e : as<ListExpr>(expr).items) items.push_back(eval(*e, scope));
    return Value::list(std::move(items), as<ListExpr>(expr).tuple);
  }
  ValueDict d;
  for (const auto& [k, v] : as<DictExpr>(expr).items) {
    Value key = eval(*k, scope);
    if (!key.is_string()) throw EvalError(std::string("dict keys must be strings, not ") + key.type_name());
    d.set(key.as_string(), eval(*v, scope));
  }
  return Value::dict(std::move(d));
}

Value Evaluator::eval_call(const CallExpr& call, const ScopePtr& scope) {
  const Value callee = eval(*call.callee, scope);
  CallArgs args = eval_args(call.args, scope);
  if (callee.is_undefined()) fail_undefined(callee);
  if (!callee.is_callable()) throw EvalError(std::string("'") + callee.type_name() + "' object is not callable");
  return callee.as_callable().call(args);
}

Value Evaluator::eval_node(const Expr& expr, const ScopePtr& scope) {
  using K = Expr::Kind;
  switch (expr.kind) {
    case K::kLiteral: return as<LiteralExpr>(expr).value;
    case K::kName: {
      const std::string& name = as<NameExpr>(expr).name;
      const Value* v = scope->find(name);
      return v != nullptr ? *v : Value::undefined("'" + name + "' is undefined");
    }
    case K::kList: case K::kDict: return eval_container(expr, scope);
    case K::kAttribute:
      return get_attribute(eval(*as<AttributeExpr>(expr).object, scope), as<AttributeExpr>(expr).name);
    case K::kItem: return get_item(eval(*as<ItemExpr>(expr).object, scope), eval(*as<ItemExpr>(expr).index, scope));
    case K::kSlice: {
      const auto& s = as<SliceExpr>(expr);
      auto part = [&](const ExprPtr& e) { return e ? eval(*e, scope) : Value::none(); };
      return get_slice(eval(*s.object, scope), part(s.start), part(s.stop), part(s.step));
    }
    case K::kCall: return eval_call(as<CallExpr>(expr), scope);
    case K::kFilter: {
      const auto& f = as<FilterExpr>(expr);
      return apply_filter(f, eval(*f.operand, scope), scope);
    }
    case K::kTest: {
      const auto& t = as<TestExpr>(expr);
      const Value operand = eval(*t.operand, scope);
      const CallArgs args = eval_args(t.args, scope);
      return Value(t.fn(operand, args) != t.negated);
    }
    case K::kNot: return Value(!eval(*as<UnaryExpr>(expr).operand, scope).truthy());
    case K::kNegate: return negate(eval(*as<UnaryExpr>(expr).operand, scope));
    case K::kPlus: return unary_plus(eval(*as<UnaryExpr>(expr).operand, scope));
    case K::kBinary: {
      const auto& b = as<BinaryExpr>(expr);
      return binary(b.op, eval(*b.left, scope), eval(*b.right, scope));
    }
    case K::kAnd: case K::kOr: {
      const auto& b = as<BinaryExpr>(expr);
      Value left = eval(*b.left, scope);
      if (left.truthy() == (expr.kind == K::kOr)) return left;
      return eval(*b.right, scope);
    }
    case K::kConcat: {
      std::string out;
      for (const ExprPtr& e : as<ConcatExpr>(expr).parts) out += to_str(eval(*e, scope));
      return Value(std::move(out));
    }
    case K::kCompare: return Value(eval_compare(as<CompareExpr>(expr), scope));
    case K::kConditional: {
      const auto& c = as<ConditionalExpr>(expr);
      if (eval(*c.test, scope).truthy()) return eval(*c.then, scope);
      if (c.otherwise) return eval(*c.otherwise, scope);
      return Value::undefined("the inline if-expression on line " + std::to_string(expr.line) +
                              " evaluated to false and no else section was defined");
    }
  }
  return Value();
}

}  // namespace zeroshard::text::jinja
