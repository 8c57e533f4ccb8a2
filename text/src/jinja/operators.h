// SPDX-License-Identifier: Apache-2.0
#pragma once
// Jinja's operators with Python's semantics: arithmetic on int and float (bool counts as int,
// int overflow is an error where Python would grow), str and list concatenation and repetition,
// ordering, membership. A type Python refuses is an EvalError with Python's wording; so is an
// undefined operand, with the reason it is undefined.

#include "jinja/value.h"

namespace zeroshard::text::jinja {

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow };
enum class CompareOp { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

const char* op_text(BinaryOp op);  // "+", "//", ...
const char* op_text(CompareOp op);

Value binary(BinaryOp op, const Value& a, const Value& b);
Value negate(const Value& v);          // unary -
Value unary_plus(const Value& v);      // unary +
bool compare(CompareOp op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);  // item in container

// Throws the EvalError for using `v` (undefined) where a value is needed.
[[noreturn]] void fail_undefined(const Value& v);

}  // namespace zeroshard::text::jinja
