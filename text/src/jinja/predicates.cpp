// SPDX-License-Identifier: Apache-2.0
#include "jinja/predicates.h"

#include <algorithm>

#include "jinja/arguments.h"
#include "jinja/operators.h"
#include "jinja/unicode.h"
#include "jinja/value_text.h"

namespace zeroshard::text::jinja {
namespace {

// The one argument of a comparing test (`x is equalto 3`, `x is divisibleby(2)`).
const Value& argument(const CallArgs& args, const char* test) {
  if (args.positional.size() != 1 || !args.keyword.empty()) {
    throw EvalError(std::string("the test '") + test + "' takes exactly one argument");
  }
  return args.positional[0];
}

void no_arguments(const CallArgs& args, const char* test) {
  if (!args.positional.empty() || !args.keyword.empty()) {
    throw EvalError(std::string("the test '") + test + "' takes no arguments");
  }
}

#define ZS_SIMPLE_TEST(fn, name, expr)               \
  bool fn(const Value& v, const CallArgs& args) {    \
    no_arguments(args, name);                        \
    return (expr);                                   \
  }

ZS_SIMPLE_TEST(t_defined, "defined", !v.is_undefined())
ZS_SIMPLE_TEST(t_undefined, "undefined", v.is_undefined())
ZS_SIMPLE_TEST(t_none, "none", v.is_none())
ZS_SIMPLE_TEST(t_boolean, "boolean", v.is_bool())
ZS_SIMPLE_TEST(t_true, "true", v.is_bool() && v.as_bool())
ZS_SIMPLE_TEST(t_false, "false", v.is_bool() && !v.as_bool())
ZS_SIMPLE_TEST(t_integer, "integer", v.is_int())
ZS_SIMPLE_TEST(t_float, "float", v.is_float())
ZS_SIMPLE_TEST(t_number, "number", v.is_number())
ZS_SIMPLE_TEST(t_string, "string", v.is_string())
ZS_SIMPLE_TEST(t_mapping, "mapping", v.is_dict())
// Jinja's Undefined is callable (it raises) and has len() and [] (test_sequence's check).
ZS_SIMPLE_TEST(t_callable, "callable", v.is_callable() || v.is_undefined())
// Python's iter() works on str, list, tuple, dict and Jinja's Undefined.
ZS_SIMPLE_TEST(t_iterable, "iterable", v.is_string() || v.is_list() || v.is_dict() || v.is_undefined())
ZS_SIMPLE_TEST(t_sequence, "sequence", v.is_string() || v.is_list() || v.is_dict() || v.is_undefined())
ZS_SIMPLE_TEST(t_lower, "lower", unicode::is_lower(to_str(v)))
ZS_SIMPLE_TEST(t_upper, "upper", unicode::is_upper(to_str(v)))
// value % 2 == 1 and == 0, as Jinja writes them (floats allowed).
ZS_SIMPLE_TEST(t_odd, "odd", equal(binary(BinaryOp::kMod, v, Value(int64_t{2})), Value(int64_t{1})))
ZS_SIMPLE_TEST(t_even, "even", equal(binary(BinaryOp::kMod, v, Value(int64_t{2})), Value(int64_t{0})))
#undef ZS_SIMPLE_TEST

bool t_divisibleby(const Value& v, const CallArgs& args) {
  return equal(binary(BinaryOp::kMod, v, argument(args, "divisibleby")), Value(int64_t{0}));
}

bool t_eq(const Value& v, const CallArgs& args) { return equal(v, argument(args, "eq")); }
bool t_ne(const Value& v, const CallArgs& args) { return !equal(v, argument(args, "ne")); }
bool t_lt(const Value& v, const CallArgs& args) { return compare(CompareOp::kLt, v, argument(args, "lt")); }
bool t_le(const Value& v, const CallArgs& args) { return compare(CompareOp::kLe, v, argument(args, "le")); }
bool t_gt(const Value& v, const CallArgs& args) { return compare(CompareOp::kGt, v, argument(args, "gt")); }
bool t_ge(const Value& v, const CallArgs& args) { return compare(CompareOp::kGe, v, argument(args, "ge")); }
bool t_in(const Value& v, const CallArgs& args) { return contains(argument(args, "in"), v); }

struct TestEntry {
  const char* name;
  TestFn fn;
};

const TestEntry kTests[] = {
    {"boolean", t_boolean}, {"callable", t_callable}, {"defined", t_defined}, {"divisibleby", t_divisibleby},
    {"eq", t_eq},           {"equalto", t_eq},        {"==", t_eq},           {"even", t_even},
    {"false", t_false},     {"float", t_float},       {"ge", t_ge},           {">=", t_ge},
    {"gt", t_gt},           {"greaterthan", t_gt},    {">", t_gt},            {"in", t_in},
    {"integer", t_integer}, {"iterable", t_iterable}, {"le", t_le},           {"<=", t_le},
    {"lower", t_lower},     {"lt", t_lt},             {"lessthan", t_lt},     {"<", t_lt},
    {"mapping", t_mapping}, {"ne", t_ne},             {"!=", t_ne},           {"none", t_none},
    {"number", t_number},   {"odd", t_odd},           {"sequence", t_sequence}, {"string", t_string},
    {"true", t_true},       {"undefined", t_undefined}, {"upper", t_upper},
};

}  // namespace

TestFn find_test(std::string_view name) {
  for (const TestEntry& t : kTests) {
    if (name == t.name) return t.fn;
  }
  return nullptr;
}

bool is_jinja_test(std::string_view name) {
  return find_test(name) != nullptr || name == "escaped" || name == "filter" || name == "sameas" || name == "test";
}

std::string supported_test_names() {
  std::string out;
  for (const TestEntry& t : kTests) {
    if (t.name[0] < 'a' || t.name[0] > 'z') continue;  // the operator aliases
    out += std::string(out.empty() ? "" : ", ") + t.name;
  }
  return out;
}

}  // namespace zeroshard::text::jinja
