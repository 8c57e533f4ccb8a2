// SPDX-License-Identifier: Apache-2.0
#include "jinja/parser.h"

#include <algorithm>
#include <initializer_list>

namespace zeroshard::text::jinja {
namespace {

using T = Token::Type;

bool one_of(const std::string& s, std::initializer_list<const char*> names) {
  return std::any_of(names.begin(), names.end(), [&](const char* n) { return s == n; });
}

std::string describe(const Token& t) {
  switch (t.type) {
    case T::kVarEnd: return "'}}'";
    case T::kBlockEnd: return "'%}'";
    case T::kEnd: return "the end of the template";
    case T::kString: return "a string";
    case T::kInt: case T::kFloat: return "the number " + t.text;
    case T::kText: return "text";
    default: return "'" + t.text + "'";
  }
}

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, const std::string& name) : tokens_(tokens), name_(name) {}

  Body parse_template() {
    Body body;
    parse_body(body, {});
    return body;
  }

 private:
  struct OpenBlock {
    std::string tag;
    int line;
  };

  // ---- token stream ----
  const Token& peek(size_t ahead = 0) const { return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)]; }
  const Token& next() { return tokens_[std::min(pos_++, tokens_.size() - 1)]; }
  bool at_op(const char* op, size_t ahead = 0) const { return peek(ahead).type == T::kOp && peek(ahead).text == op; }
  bool at_name(const char* name, size_t ahead = 0) const {
    return peek(ahead).type == T::kName && peek(ahead).text == name;
  }
  [[noreturn]] void fail(int line, const std::string& message) const { fail_at(name_, line, message); }
  [[noreturn]] void fail_expected(const std::string& what) const {
    fail(peek().line, "expected " + what + ", got " + describe(peek()));
  }
  void expect_op(const char* op) {
    if (!at_op(op)) fail_expected(std::string("'") + op + "'");
    next();
  }
  std::string expect_name(const char* what) {
    if (peek().type != T::kName) fail_expected(what);
    return next().text;
  }
  void expect_block_end(const std::string& tag) {
    if (peek().type != T::kBlockEnd) fail_expected("'%}' to close '{% " + tag + " %}'");
    next();
  }

  // ---- statements ----

  // Parses statements into `body` until a block tag named in `ends` (consumed up to the tag
  // name, which is returned) or the end of the template ("", only when `ends` is empty).
  std::string parse_body(Body& body, std::initializer_list<const char*> ends) {
    while (true) {
      const Token& t = peek();
      if (t.type == T::kEnd) {
        if (ends.size() == 0) return "";
        const OpenBlock& open = open_.back();
        fail(t.line, "'{% " + open.tag + " %}' opened on line " + std::to_string(open.line) +
                         " is never closed: expected '{% " + *(ends.end() - 1) + " %}'");
      }
      if (t.type == T::kText) {
        body.push_back(std::make_unique<TextStmt>(next().text, t.line));
      } else if (t.type == T::kVarBegin) {
        next();
        ExprPtr e = parse_tuple(true, {});
        if (peek().type != T::kVarEnd) fail_expected("'}}'");
        next();
        body.push_back(std::make_unique<OutputStmt>(std::move(e), t.line));
      } else {
        next();  // {%
        if (peek().type != T::kName) fail_expected("a tag name after '{%'");
        const std::string tag = peek().text;
        if (std::any_of(ends.begin(), ends.end(), [&](const char* e) { return tag == e; })) {
          next();
          return tag;
        }
        body.push_back(parse_statement(t.line));
      }
    }
  }

  StmtPtr parse_statement(int line) {
    const std::string tag = next().text;
    if (tag == "if") return parse_if(line);
    if (tag == "for") return parse_for(line);
    if (tag == "set") return parse_set(line);
    if (tag == "macro") return parse_macro(line);
    if (tag == "filter") return parse_filter_block(line);
    if (tag == "generation") return parse_generation(line);
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail(line, "'{% " + tag + " %}' is only allowed inside a '{% for %}' loop");
      expect_block_end(tag);
      return std::make_unique<Stmt>(tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, line);
    }
    if (one_of(tag, {"elif", "else"}) || tag.rfind("end", 0) == 0) {
      if (open_.empty()) fail(line, "unexpected '{% " + tag + " %}': no block is open");
      fail(line, "unexpected '{% " + tag + " %}': the innermost open block is '{% " + open_.back().tag +
                     " %}' from line " + std::to_string(open_.back().line) + ", closed by '{% end" +
                     open_.back().tag + " %}'");
    }
    if (one_of(tag, {"extends", "include", "import", "from", "block", "call", "with", "autoescape", "do",
                     "trans", "pluralize", "print"})) {
      fail(line, "unsupported construct '{% " + tag + " %}': a chat template must be one self-contained "
                 "template using only these tags: " + supported_tag_names());
    }
    fail(line, "unknown tag '{% " + tag + " %}' (supported tags: " + supported_tag_names() + ")");
  }

  // Parses the body of a block opened by `tag` up to one of `ends`; returns the end tag found.
  std::string parse_block(const std::string& tag, int line, Body& body, std::initializer_list<const char*> ends) {
    open_.push_back({tag, line});
    std::string end = parse_body(body, ends);
    open_.pop_back();
    return end;
  }

  StmtPtr parse_if(int line) {
    auto stmt = std::make_unique<IfStmt>(line);
    ExprPtr test = parse_tuple(true, {});
    expect_block_end("if");
    while (true) {
      Body body;
      const std::string end = parse_block("if", line, body, {"elif", "else", "endif"});
      stmt->branches.emplace_back(std::move(test), std::move(body));
      if (end == "elif") {
        test = parse_tuple(true, {});
        expect_block_end("elif");
        continue;
      }
      if (end == "else") {
        expect_block_end("else");
        parse_block("if", line, stmt->otherwise, {"endif"});
      }
      expect_block_end("endif");
      return stmt;
    }
  }

  // Assignment targets: `name`, or `a, b` (optionally in parentheses) to unpack into.
  std::vector<std::string> parse_targets(const char* tag, bool& unpack) {
    const bool parens = at_op("(");
    if (parens) next();
    std::vector<std::string> names{expect_name((std::string("a variable name after '") + tag + "'").c_str())};
    unpack = false;
    while (at_op(",")) {
      next();
      unpack = true;
      if (peek().type != T::kName) break;  // trailing comma
      names.push_back(next().text);
    }
    if (at_op("(")) fail(peek().line, std::string("nested unpacking in '{% ") + tag + " %}' is not supported");
    if (parens) expect_op(")");
    return names;
  }

  StmtPtr parse_for(int line) {
    auto stmt = std::make_unique<ForStmt>(line);
    stmt->targets = parse_targets("for", stmt->unpack);
    if (!at_name("in")) fail_expected("'in' after the loop variable");
    next();
    stmt->iterable = parse_tuple(false, {"recursive"});
    if (at_name("if")) {
      next();
      stmt->condition = parse_expression(true);
    }
    if (at_name("recursive")) fail(peek().line, "recursive loops ('{% for ... recursive %}') are not supported");
    expect_block_end("for");
    ++loop_depth_;
    const std::string end = parse_block("for", line, stmt->body, {"else", "endfor"});
    --loop_depth_;
    if (end == "else") {
      expect_block_end("else");
      parse_block("for", line, stmt->otherwise, {"endfor"});
    }
    expect_block_end("endfor");
    return stmt;
  }

  StmtPtr parse_set(int line) {
    auto stmt = std::make_unique<SetStmt>(line);
    if (peek().type == T::kName && at_op(".", 1)) {
      stmt->targets.push_back(next().text);
      next();
      stmt->attribute = expect_name("an attribute name after '.'");
    } else {
      stmt->targets = parse_targets("set", stmt->unpack);
    }
    if (at_op("=")) {
      next();
      stmt->value = parse_tuple(true, {});
      expect_block_end("set");
      return stmt;
    }
    while (at_op("|")) {
      next();
      stmt->filters.push_back(parse_filter(nullptr));
    }
    expect_block_end("set");
    parse_block("set", line, stmt->body, {"endset"});
    expect_block_end("endset");
    return stmt;
  }

  StmtPtr parse_macro(int line) {
    auto stmt = std::make_unique<MacroStmt>(line);
    stmt->name = expect_name("a macro name");
    expect_op("(");
    bool has_default = false;
    while (!at_op(")")) {
      if (!stmt->params.empty()) expect_op(",");
      if (at_op(")")) break;
      std::string param = expect_name("a parameter name");
      ExprPtr default_value;
      if (at_op("=")) {
        next();
        default_value = parse_expression(true);
        has_default = true;
      } else if (has_default) {
        fail(peek().line, "non-default argument '" + param + "' follows default argument");
      }
      stmt->params.emplace_back(std::move(param), std::move(default_value));
    }
    next();
    expect_block_end("macro");
    const int saved_depth = loop_depth_;
    loop_depth_ = 0;  // break/continue cannot leave a macro
    parse_block("macro", line, stmt->body, {"endmacro"});
    loop_depth_ = saved_depth;
    if (peek().type == T::kName && peek().text == stmt->name) next();
    expect_block_end("endmacro");
    return stmt;
  }

  StmtPtr parse_filter_block(int line) {
    auto stmt = std::make_unique<FilterBlockStmt>(line);
    stmt->filters.push_back(parse_filter(nullptr));
    while (at_op("|")) {
      next();
      stmt->filters.push_back(parse_filter(nullptr));
    }
    expect_block_end("filter");
    parse_block("filter", line, stmt->body, {"endfilter"});
    expect_block_end("endfilter");
    return stmt;
  }

  StmtPtr parse_generation(int line) {
    auto stmt = std::make_unique<BlockStmt>(line);
    expect_block_end("generation");
    parse_block("generation", line, stmt->body, {"endgeneration"});
    expect_block_end("endgeneration");
    return stmt;
  }

  // ---- expressions (Jinja's grammar, lowest precedence first) ----

  bool at_tuple_end(std::initializer_list<const char*> extra_ends) const {
    const Token& t = peek();
    if (t.type == T::kVarEnd || t.type == T::kBlockEnd || at_op(")")) return true;
    return t.type == T::kName && one_of(t.text, extra_ends);
  }

  // `a` or `a, b, ...` (a tuple). Without `with_condexpr`, `x if y` is not an expression.
  ExprPtr parse_tuple(bool with_condexpr, std::initializer_list<const char*> extra_ends,
                      bool explicit_parentheses = false) {
    const int line = peek().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_op(",");
      if (at_tuple_end(extra_ends)) break;
      items.push_back(with_condexpr ? parse_expression(true) : parse_or());
      if (!at_op(",")) break;
      is_tuple = true;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items[0]);
      if (!explicit_parentheses) fail_expected("an expression");
    }
    auto tuple = std::make_unique<ListExpr>(true, line);
    tuple->items = std::move(items);
    return tuple;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    if (!with_condexpr) return parse_or();
    ExprPtr expr = parse_or();
    while (at_name("if")) {
      const int line = next().line;
      auto cond = std::make_unique<ConditionalExpr>(std::move(expr), parse_or(), line);
      if (at_name("else")) {
        next();
        cond->otherwise = parse_expression(true);
      }
      expr = std::move(cond);
    }
    return expr;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (at_name("or")) {
      const int line = next().line;
      left = std::make_unique<BinaryExpr>(Expr::Kind::kOr, BinaryOp::kAdd, std::move(left), parse_and(), line);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (at_name("and")) {
      const int line = next().line;
      left = std::make_unique<BinaryExpr>(Expr::Kind::kAnd, BinaryOp::kAdd, std::move(left), parse_not(), line);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (at_name("not")) {
      const int line = next().line;
      return std::make_unique<UnaryExpr>(Expr::Kind::kNot, parse_not(), line);
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const int line = peek().line;
    ExprPtr first = parse_math1();
    std::vector<std::pair<CompareOp, ExprPtr>> rest;
    static const std::pair<const char*, CompareOp> kOps[] = {
        {"==", CompareOp::kEq}, {"!=", CompareOp::kNe}, {"<", CompareOp::kLt},
        {"<=", CompareOp::kLe}, {">", CompareOp::kGt},  {">=", CompareOp::kGe}};
    while (true) {
      const auto op = std::find_if(std::begin(kOps), std::end(kOps), [&](const auto& o) { return at_op(o.first); });
      if (op != std::end(kOps)) {
        next();
        rest.emplace_back(op->second, parse_math1());
      } else if (at_name("in")) {
        next();
        rest.emplace_back(CompareOp::kIn, parse_math1());
      } else if (at_name("not") && at_name("in", 1)) {
        next();
        next();
        rest.emplace_back(CompareOp::kNotIn, parse_math1());
      } else {
        break;
      }
    }
    if (rest.empty()) return first;
    auto cmp = std::make_unique<CompareExpr>(std::move(first), line);
    cmp->rest = std::move(rest);
    return cmp;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (at_op("+") || at_op("-")) {
      const Token& op = next();
      const BinaryOp kind = op.text == "+" ? BinaryOp::kAdd : BinaryOp::kSub;
      left = std::make_unique<BinaryExpr>(Expr::Kind::kBinary, kind, std::move(left), parse_concat(), op.line);
    }
    return left;
  }

  ExprPtr parse_concat() {
    const int line = peek().line;
    ExprPtr first = parse_math2();
    if (!at_op("~")) return first;
    auto concat = std::make_unique<ConcatExpr>(line);
    concat->parts.push_back(std::move(first));
    while (at_op("~")) {
      next();
      concat->parts.push_back(parse_math2());
    }
    return concat;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const Token& op = next();
      const BinaryOp kind = op.text == "*" ? BinaryOp::kMul : op.text == "/" ? BinaryOp::kDiv
                            : op.text == "//" ? BinaryOp::kFloorDiv : BinaryOp::kMod;
      left = std::make_unique<BinaryExpr>(Expr::Kind::kBinary, kind, std::move(left), parse_pow(), op.line);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (at_op("**")) {
      const int line = next().line;
      left = std::make_unique<BinaryExpr>(Expr::Kind::kBinary, BinaryOp::kPow, std::move(left), parse_unary(true), line);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    ExprPtr node;
    const int line = peek().line;
    if (at_op("-")) {
      next();
      node = std::make_unique<UnaryExpr>(Expr::Kind::kNegate, parse_unary(false), line);
    } else if (at_op("+")) {
      next();
      node = std::make_unique<UnaryExpr>(Expr::Kind::kPlus, parse_unary(false), line);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    return with_filter ? parse_filter_expr(std::move(node)) : std::move(node);
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    switch (t.type) {
      case T::kName: {
        next();
        if (t.text == "true" || t.text == "True") return std::make_unique<LiteralExpr>(Value(true), t.line);
        if (t.text == "false" || t.text == "False") return std::make_unique<LiteralExpr>(Value(false), t.line);
        if (t.text == "none" || t.text == "None") return std::make_unique<LiteralExpr>(Value::none(), t.line);
        return std::make_unique<NameExpr>(t.text, t.line);
      }
      case T::kString: {
        std::string s;
        while (peek().type == T::kString) s += next().text;  // "a" "b" is "ab"
        return std::make_unique<LiteralExpr>(Value(std::move(s)), t.line);
      }
      case T::kInt: next(); return std::make_unique<LiteralExpr>(Value(t.int_value), t.line);
      case T::kFloat: next(); return std::make_unique<LiteralExpr>(Value(t.float_value), t.line);
      default: break;
    }
    if (at_op("(")) {
      next();
      ExprPtr e = parse_tuple(true, {}, true);
      expect_op(")");
      return e;
    }
    if (at_op("[")) return parse_list();
    if (at_op("{")) return parse_dict();
    fail_expected("an expression");
  }

  ExprPtr parse_list() {
    auto list = std::make_unique<ListExpr>(false, next().line);
    while (!at_op("]")) {
      if (!list->items.empty()) expect_op(",");
      if (at_op("]")) break;
      list->items.push_back(parse_expression(true));
    }
    next();
    return list;
  }

  ExprPtr parse_dict() {
    auto dict = std::make_unique<DictExpr>(next().line);
    while (!at_op("}")) {
      if (!dict->items.empty()) expect_op(",");
      if (at_op("}")) break;
      ExprPtr key = parse_expression(true);
      expect_op(":");
      dict->items.emplace_back(std::move(key), parse_expression(true));
    }
    next();
    return dict;
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (at_op(".")) {
        const int line = next().line;
        if (peek().type == T::kName) {
          node = std::make_unique<AttributeExpr>(std::move(node), next().text, line);
        } else if (peek().type == T::kInt) {
          auto index = std::make_unique<LiteralExpr>(Value(next().int_value), line);
          node = std::make_unique<ItemExpr>(std::move(node), std::move(index), line);
        } else {
          fail_expected("a name after '.'");
        }
      } else if (at_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (at_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr object) {
    const int line = next().line;  // [
    ExprPtr start;
    if (!at_op(":")) {
      start = parse_expression(true);
      if (at_op(",")) fail(peek().line, "tuple subscripts (x[a, b]) are not supported");
      if (!at_op(":")) {
        expect_op("]");
        return std::make_unique<ItemExpr>(std::move(object), std::move(start), line);
      }
    }
    auto slice = std::make_unique<SliceExpr>(std::move(object), line);
    slice->start = std::move(start);
    next();  // :
    if (!at_op("]") && !at_op(":")) slice->stop = parse_expression(true);
    if (at_op(":")) {
      next();
      if (!at_op("]")) slice->step = parse_expression(true);
    }
    expect_op("]");
    return slice;
  }

  void parse_call_args(Arguments& args) {
    expect_op("(");
    bool first = true;
    while (!at_op(")")) {
      if (!first) {
        expect_op(",");
        if (at_op(")")) break;
      }
      first = false;
      if (at_op("*") || at_op("**")) fail(peek().line, "argument unpacking (*args, **kwargs) is not supported");
      if (peek().type == T::kName && at_op("=", 1)) {
        std::string key = next().text;
        next();
        args.keyword.emplace_back(std::move(key), parse_expression(true));
      } else {
        if (!args.keyword.empty()) fail(peek().line, "a positional argument follows keyword arguments");
        args.positional.push_back(parse_expression(true));
      }
    }
    next();
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto call = std::make_unique<CallExpr>(std::move(callee), peek().line);
    parse_call_args(call->args);
    return call;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (at_op("|")) {
        next();
        node = parse_filter(std::move(node));
      } else if (at_name("is")) {
        node = parse_test(std::move(node));
      } else if (at_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  std::unique_ptr<FilterExpr> parse_filter(ExprPtr operand) {
    const int line = peek().line;
    const std::string name = expect_name("a filter name after '|'");
    const FilterFn fn = find_filter(name);
    if (fn == nullptr) {
      fail(line, std::string(is_jinja_filter(name) ? "unsupported" : "unknown") + " filter '" + name +
                     "' (supported filters: " + supported_filter_names() + ")");
    }
    auto filter = std::make_unique<FilterExpr>(std::move(operand), name, fn, line);
    if (at_op("(")) parse_call_args(filter->args);
    return filter;
  }

  ExprPtr parse_test(ExprPtr operand) {
    const int line = next().line;  // is
    const bool negated = at_name("not");
    if (negated) next();
    const std::string name = expect_name("a test name after 'is'");
    const TestFn fn = find_test(name);
    if (fn == nullptr) {
      fail(line, std::string(is_jinja_test(name) ? "unsupported" : "unknown") + " test '" + name +
                     "' (supported tests: " + supported_test_names() + ")");
    }
    auto test = std::make_unique<TestExpr>(std::move(operand), name, fn, negated, line);
    const Token& t = peek();
    if (at_op("(")) {
      parse_call_args(test->args);
    } else if ((t.type == T::kName || t.type == T::kString || t.type == T::kInt || t.type == T::kFloat ||
                at_op("[") || at_op("{")) &&
               !(t.type == T::kName && one_of(t.text, {"else", "or", "and", "is", "if"}))) {
      // `x is divisibleby 3`: one argument without parentheses.
      test->args.positional.push_back(parse_postfix(parse_primary()));
    }
    return test;
  }

  const std::vector<Token>& tokens_;
  const std::string& name_;
  size_t pos_ = 0;
  std::vector<OpenBlock> open_;
  int loop_depth_ = 0;
};

}  // namespace

const char* supported_tag_names() {
  return "if/elif/else, for/else, set, macro, filter, break, continue, raw, generation";
}

Body parse(const std::vector<Token>& tokens, const std::string& source_name) {
  return Parser(tokens, source_name).parse_template();
}

}  // namespace zeroshard::text::jinja
