// SPDX-License-Identifier: Apache-2.0
#pragma once
// The parsed form of a template: expressions and statements, each with the line it starts on.
// Filters and tests are resolved to their functions when parsed, so an unknown one is a parse
// error. Built by the parser, read by the evaluator; immutable once built.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "jinja/filters.h"
#include "jinja/operators.h"
#include "jinja/predicates.h"
#include "jinja/value.h"

namespace zeroshard::text::jinja {

struct Expr {
  enum class Kind {
    kLiteral, kName, kList, kDict, kAttribute, kItem, kSlice, kCall, kFilter, kTest,
    kNot, kNegate, kPlus, kBinary, kConcat, kAnd, kOr, kCompare, kConditional
  };
  Expr(Kind k, int l) : kind(k), line(l) {}
  virtual ~Expr() = default;
  const Kind kind;
  const int line;
};
using ExprPtr = std::unique_ptr<Expr>;

struct Arguments {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
};

struct LiteralExpr : Expr {
  LiteralExpr(Value v, int l) : Expr(Kind::kLiteral, l), value(std::move(v)) {}
  Value value;
};
struct NameExpr : Expr {
  NameExpr(std::string n, int l) : Expr(Kind::kName, l), name(std::move(n)) {}
  std::string name;
};
struct ListExpr : Expr {  // [a, b] or (a, b)
  ListExpr(bool t, int l) : Expr(Kind::kList, l), tuple(t) {}
  bool tuple;
  std::vector<ExprPtr> items;
};
struct DictExpr : Expr {
  explicit DictExpr(int l) : Expr(Kind::kDict, l) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> items;
};
struct AttributeExpr : Expr {  // object.name
  AttributeExpr(ExprPtr o, std::string n, int l) : Expr(Kind::kAttribute, l), object(std::move(o)), name(std::move(n)) {}
  ExprPtr object;
  std::string name;
};
struct ItemExpr : Expr {  // object[index]
  ItemExpr(ExprPtr o, ExprPtr i, int l) : Expr(Kind::kItem, l), object(std::move(o)), index(std::move(i)) {}
  ExprPtr object, index;
};
struct SliceExpr : Expr {  // object[start:stop:step], each part optional
  SliceExpr(ExprPtr o, int l) : Expr(Kind::kSlice, l), object(std::move(o)) {}
  ExprPtr object, start, stop, step;
};
struct CallExpr : Expr {
  CallExpr(ExprPtr c, int l) : Expr(Kind::kCall, l), callee(std::move(c)) {}
  ExprPtr callee;
  Arguments args;
};
struct FilterExpr : Expr {  // operand | name(args); no operand in a filter block or block set
  FilterExpr(ExprPtr o, std::string n, FilterFn f, int l)
      : Expr(Kind::kFilter, l), operand(std::move(o)), name(std::move(n)), fn(f) {}
  ExprPtr operand;
  std::string name;
  FilterFn fn;
  Arguments args;
};
struct TestExpr : Expr {  // operand is [not] name(args)
  TestExpr(ExprPtr o, std::string n, TestFn f, bool neg, int l)
      : Expr(Kind::kTest, l), operand(std::move(o)), name(std::move(n)), fn(f), negated(neg) {}
  ExprPtr operand;
  std::string name;
  TestFn fn;
  bool negated;
  Arguments args;
};
struct UnaryExpr : Expr {  // not, -, +
  UnaryExpr(Kind k, ExprPtr o, int l) : Expr(k, l), operand(std::move(o)) {}
  ExprPtr operand;
};
struct BinaryExpr : Expr {  // arithmetic; and/or use kAnd/kOr with op unused
  BinaryExpr(Kind k, BinaryOp o, ExprPtr a, ExprPtr b, int l)
      : Expr(k, l), op(o), left(std::move(a)), right(std::move(b)) {}
  BinaryOp op;
  ExprPtr left, right;
};
struct ConcatExpr : Expr {  // a ~ b ~ c
  explicit ConcatExpr(int l) : Expr(Kind::kConcat, l) {}
  std::vector<ExprPtr> parts;
};
struct CompareExpr : Expr {  // a < b <= c, chained as in Python
  CompareExpr(ExprPtr f, int l) : Expr(Kind::kCompare, l), first(std::move(f)) {}
  ExprPtr first;
  std::vector<std::pair<CompareOp, ExprPtr>> rest;
};
struct ConditionalExpr : Expr {  // then if test else otherwise (otherwise optional)
  ConditionalExpr(ExprPtr t, ExprPtr c, int l) : Expr(Kind::kConditional, l), then(std::move(t)), test(std::move(c)) {}
  ExprPtr then, test, otherwise;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind { kText, kOutput, kIf, kFor, kSet, kMacro, kFilterBlock, kBreak, kContinue, kBlock };
  Stmt(Kind k, int l) : kind(k), line(l) {}
  virtual ~Stmt() = default;
  const Kind kind;
  const int line;
};

struct TextStmt : Stmt {
  TextStmt(std::string t, int l) : Stmt(Kind::kText, l), text(std::move(t)) {}
  std::string text;
};
struct OutputStmt : Stmt {  // {{ expr }}
  OutputStmt(ExprPtr e, int l) : Stmt(Kind::kOutput, l), expr(std::move(e)) {}
  ExprPtr expr;
};
struct IfStmt : Stmt {  // if / elif branches, then else
  explicit IfStmt(int l) : Stmt(Kind::kIf, l) {}
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body otherwise;
};
struct ForStmt : Stmt {
  explicit ForStmt(int l) : Stmt(Kind::kFor, l) {}
  std::vector<std::string> targets;  // one name, or several to unpack each item into
  bool unpack = false;
  ExprPtr iterable, condition;  // condition: the optional `if` filter
  Body body, otherwise;
};
struct SetStmt : Stmt {
  explicit SetStmt(int l) : Stmt(Kind::kSet, l) {}
  std::vector<std::string> targets;
  bool unpack = false;
  std::string attribute;  // set ns.attribute = ...: targets[0] is the namespace
  ExprPtr value;          // set x = value; or, when null, the rendered body through `filters`
  Body body;
  std::vector<std::unique_ptr<FilterExpr>> filters;
};
struct MacroStmt : Stmt {
  explicit MacroStmt(int l) : Stmt(Kind::kMacro, l) {}
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;  // default value or null
  Body body;
};
struct FilterBlockStmt : Stmt {  // {% filter f | g %}body{% endfilter %}
  explicit FilterBlockStmt(int l) : Stmt(Kind::kFilterBlock, l) {}
  std::vector<std::unique_ptr<FilterExpr>> filters;
  Body body;
};
struct BlockStmt : Stmt {  // {% generation %}: its body, rendered in place
  explicit BlockStmt(int l) : Stmt(Kind::kBlock, l) {}
  Body body;
};

}  // namespace zeroshard::text::jinja
