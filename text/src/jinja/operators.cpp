// SPDX-License-Identifier: Apache-2.0
#include "jinja/operators.h"

#include <cmath>

#include "jinja/eval_error.h"

namespace zeroshard::text::jinja {
namespace {

std::string quoted_type(const Value& v) { return std::string("'") + v.type_name() + "'"; }

[[noreturn]] void unsupported(BinaryOp op, const Value& a, const Value& b) {
  throw EvalError(std::string("unsupported operand type(s) for ") + op_text(op) + ": " +
                  quoted_type(a) + " and " + quoted_type(b));
}

bool is_integral(const Value& v) { return v.is_int() || v.is_bool(); }

// a op b on int64, or an EvalError where Python's unbounded int would go past 64 bits.
Value int_arithmetic(BinaryOp op, int64_t a, int64_t b) {
  int64_t r = 0;
  const bool overflow = op == BinaryOp::kAdd   ? __builtin_add_overflow(a, b, &r)
                        : op == BinaryOp::kSub ? __builtin_sub_overflow(a, b, &r)
                                               : __builtin_mul_overflow(a, b, &r);
  if (overflow) throw EvalError(std::string("integer overflow in ") + op_text(op));
  return Value(r);
}

Value repeat(const Value& seq, int64_t times) {
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.as_string();
    return Value(out);
  }
  ValueList out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
  return Value::list(std::move(out), seq.is_tuple());
}

Value concatenate(const Value& a, const Value& b) {
  if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    ValueList out = a.as_list();
    out.insert(out.end(), b.as_list().begin(), b.as_list().end());
    return Value::list(std::move(out), a.is_tuple());
  }
  if (a.is_string() || a.is_list()) {
    throw EvalError(std::string("can only concatenate ") + a.type_name() + " (not \"" + b.type_name() +
                    "\") to " + a.type_name());
  }
  unsupported(BinaryOp::kAdd, a, b);
}

double float_mod(double x, double y) {
  double r = std::fmod(x, y);
  if (r != 0 && ((r < 0) != (y < 0))) r += y;
  if (r == 0) r = std::copysign(0.0, y);
  return r;
}

// CPython's float floor division (float_floor_div).
double float_floordiv(double x, double y) {
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0 && ((y < 0) != (mod < 0))) div -= 1.0;
  if (div == 0) return std::copysign(0.0, x / y);
  double floored = std::floor(div);
  if (div - floored > 0.5) floored += 1.0;
  return floored;
}

Value int_power(int64_t base, int64_t exponent) {
  if (exponent < 0) {
    if (base == 0) throw EvalError("0.0 cannot be raised to a negative power");
    return Value(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
  }
  if (base == 0) return Value(int64_t{exponent == 0 ? 1 : 0});
  if (base == 1) return Value(int64_t{1});
  if (base == -1) return Value(int64_t{exponent % 2 == 0 ? 1 : -1});
  int64_t result = 1;  // |base| >= 2: overflows within 63 steps
  for (int64_t i = 0; i < exponent; ++i) {
    if (__builtin_mul_overflow(result, base, &result)) throw EvalError("integer overflow in **");
  }
  return Value(result);
}

Value arithmetic(BinaryOp op, const Value& a, const Value& b) {
  const bool ints = is_integral(a) && is_integral(b);
  const int64_t x = a.as_int(), y = b.as_int();
  const double fx = a.as_float(), fy = b.as_float();
  switch (op) {
    case BinaryOp::kAdd: return ints ? int_arithmetic(op, x, y) : Value(fx + fy);
    case BinaryOp::kSub: return ints ? int_arithmetic(op, x, y) : Value(fx - fy);
    case BinaryOp::kMul: return ints ? int_arithmetic(op, x, y) : Value(fx * fy);
    case BinaryOp::kDiv:
      if (fy == 0) throw EvalError("division by zero");
      return Value(fx / fy);
    case BinaryOp::kFloorDiv:
      if (fy == 0) throw EvalError(ints ? "integer division or modulo by zero" : "float floor division by zero");
      if (!ints) return Value(float_floordiv(fx, fy));
      if (x == INT64_MIN && y == -1) throw EvalError("integer overflow in //");
      return Value(x / y - ((x % y != 0) && ((x < 0) != (y < 0))));
    case BinaryOp::kMod:
      if (fy == 0) throw EvalError(ints ? "integer division or modulo by zero" : "float modulo");
      if (!ints) return Value(float_mod(fx, fy));
      if (y == -1) return Value(int64_t{0});
      {
        const int64_t r = x % y;
        return Value(r != 0 && ((r < 0) != (y < 0)) ? r + y : r);
      }
    case BinaryOp::kPow:
      if (ints) return int_power(x, y);
      if (fx == 0 && fy < 0) throw EvalError("0.0 cannot be raised to a negative power");
      if (fx < 0 && fy != std::floor(fy)) {
        throw EvalError("a negative number raised to a fractional power has no real result");
      }
      return Value(std::pow(fx, fy));
  }
  return Value();
}

int compare_sequences(const Value& a, const Value& b);

// -1, 0 or 1 for Python's ordering of a and b; EvalError for types Python does not order.
int order(const Value& a, const Value& b, CompareOp op) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() < b.as_float() ? -1 : a.as_float() > b.as_float();
    return a.as_int() < b.as_int() ? -1 : a.as_int() > b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string().compare(b.as_string()) < 0 ? -1 : a.as_string() != b.as_string();
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) return compare_sequences(a, b);
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  throw EvalError(std::string("'") + op_text(op) + "' not supported between instances of " +
                  quoted_type(a) + " and " + quoted_type(b));
}

int compare_sequences(const Value& a, const Value& b) {
  const ValueList& x = a.as_list();
  const ValueList& y = b.as_list();
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
    if (!equal(x[i], y[i])) return order(x[i], y[i], CompareOp::kLt);
  }
  return x.size() < y.size() ? -1 : x.size() > y.size();
}

}  // namespace

const char* op_text(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd: return "+";
    case BinaryOp::kSub: return "-";
    case BinaryOp::kMul: return "*";
    case BinaryOp::kDiv: return "/";
    case BinaryOp::kFloorDiv: return "//";
    case BinaryOp::kMod: return "%";
    case BinaryOp::kPow: return "**";
  }
  return "?";
}

const char* op_text(CompareOp op) {
  switch (op) {
    case CompareOp::kEq: return "==";
    case CompareOp::kNe: return "!=";
    case CompareOp::kLt: return "<";
    case CompareOp::kLe: return "<=";
    case CompareOp::kGt: return ">";
    case CompareOp::kGe: return ">=";
    case CompareOp::kIn: return "in";
    case CompareOp::kNotIn: return "not in";
  }
  return "?";
}

void fail_undefined(const Value& v) {
  throw EvalError(v.undefined_hint().empty() ? "an undefined value was used" : v.undefined_hint());
}

Value binary(BinaryOp op, const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) return arithmetic(op, a, b);
  if (op == BinaryOp::kAdd) return concatenate(a, b);
  if (op == BinaryOp::kMul) {
    if ((a.is_string() || a.is_list()) && is_integral(b)) return repeat(a, b.as_int());
    if (is_integral(a) && (b.is_string() || b.is_list())) return repeat(b, a.as_int());
  }
  if (op == BinaryOp::kMod && a.is_string()) {
    throw EvalError("the % string formatting operator is not supported: build the text with ~ or +");
  }
  unsupported(op, a, b);
}

Value negate(const Value& v) {
  if (v.is_float()) return Value(-v.as_float());
  if (is_integral(v)) {
    if (v.as_int() == INT64_MIN) throw EvalError("integer overflow in unary -");
    return Value(-v.as_int());
  }
  if (v.is_undefined()) fail_undefined(v);
  throw EvalError(std::string("bad operand type for unary -: '") + v.type_name() + "'");
}

Value unary_plus(const Value& v) {
  if (v.is_float()) return v;
  if (is_integral(v)) return Value(v.as_int());
  if (v.is_undefined()) fail_undefined(v);
  throw EvalError(std::string("bad operand type for unary +: '") + v.type_name() + "'");
}

bool contains(const Value& container, const Value& item) {
  switch (container.type()) {
    case Value::Type::kString:
      if (!item.is_string()) {
        throw EvalError(std::string("'in <string>' requires string as left operand, not ") + item.type_name());
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Type::kList:
      for (const Value& v : container.as_list()) {
        if (equal(v, item)) return true;
      }
      return false;
    case Value::Type::kDict:
      return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
    case Value::Type::kUndefined:
      return false;  // Jinja's Undefined iterates as empty
    default:
      throw EvalError(std::string("argument of type '") + container.type_name() + "' is not iterable");
  }
}

bool compare(CompareOp op, const Value& a, const Value& b) {
  switch (op) {
    case CompareOp::kEq: return equal(a, b);
    case CompareOp::kNe: return !equal(a, b);
    case CompareOp::kIn: return contains(b, a);
    case CompareOp::kNotIn: return !contains(b, a);
    case CompareOp::kLt: return order(a, b, op) < 0;
    case CompareOp::kLe: return order(a, b, op) <= 0;
    case CompareOp::kGt: return order(a, b, op) > 0;
    case CompareOp::kGe: return order(a, b, op) >= 0;
  }
  return false;
}

}  // namespace zeroshard::text::jinja
