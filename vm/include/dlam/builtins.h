// builtins.h — identifiers of the primitives the compiler and the AD transform know by name.
//
// A Native carries one of these ids; codegen emits a dedicated opcode for calls of
// the arithmetic and list primitives when the global still holds the builtin, and
// the reverse transform looks up the derivative rule of a primitive by its id.
#pragma once
#include <cstdint>

#include "dlam/value.h"

namespace dlam {

enum class NativeId : uint16_t {
  None = 0,
  // arithmetic
  Add,
  Sub,
  Mul,
  Div,
  Expt,
  Sqrt,
  Exp,
  Log,
  Log1p,
  Expm1,
  Sin,
  Cos,
  Tan,
  Asin,
  Acos,
  Atan,
  Sinh,
  Cosh,
  Tanh,
  Abs,
  Min,
  Max,
  Floor,
  Ceiling,
  Round,
  Truncate,
  // comparisons and numeric predicates
  NumEq,
  Lt,
  Gt,
  Le,
  Ge,
  ZeroP,
  PositiveP,
  NegativeP,
  NanP,
  // data
  Cons,
  Car,
  Cdr,
  Caar,
  Cadr,
  Cdar,
  Cddr,
  Caddr,
  Cdddr,
  List,
  Length,
  Append,
  Reverse,
  ListRef,
  ListTail,
  NullP,
  PairP,
  NumberP,
  BooleanP,
  ProcedureP,
  StringP,
  SymbolP,
  Not,
  EqP,
  EqualP,
  EqvP,
  ListP,
  NumberToString,
  StringAppend,
  Iota,
  // vectors (the rest have custom derivatives in the prelude)
  VectorRef,
  VectorLength,
  VectorOnehot,
  // control
  Apply,
  // output and errors
  Display,
  Write,
  Newline,
  Print,
  Error,
  Assert,
  // AD (issue 3 onwards)
  StarJ,
  StarJInverse,
  Zero,
  Plus,
  AttachStarJ,
  // internal helpers of transformed code (names start with %)
  SZeroP,
  SCar,
  SCdr,
  Sign,
  Step,
  ZeroIfZero,
  Materialize,
  RepResult,
  BpResult,
  CheckXbar,
  Count
};

// The car/cdr steps of car, cdr and caar ... cdddr as written ("ad" for cadr: the car
// of the cdr, the innermost step last); nullptr for any other primitive.
constexpr const char* cxrPath(NativeId id) {
  switch (id) {
    case NativeId::Car:
      return "a";
    case NativeId::Cdr:
      return "d";
    case NativeId::Caar:
      return "aa";
    case NativeId::Cadr:
      return "ad";
    case NativeId::Cdar:
      return "da";
    case NativeId::Cddr:
      return "dd";
    case NativeId::Caddr:
      return "add";
    case NativeId::Cdddr:
      return "ddd";
    default:
      return nullptr;
  }
}

// The arithmetic primitives (+ - * / and the functions of numbers to numbers): their
// result is a number, or the symbolic zero.
constexpr bool isArithmetic(NativeId id) { return id >= NativeId::Add && id <= NativeId::Truncate; }

// The symbolic zero (Value::zero(), a sensitivity nothing reached) is an exact 0 to
// + - * /: a product with it, or a quotient of it, is the symbolic zero whatever the
// other operands (also an infinity or a NaN, as JAX's symbolic zeros), and so is a sum
// or difference of nothing but zeros. So a sensitivity that reached nothing stays exact
// through a derivative's formula: the second derivative of (expt x n) with n a variable
// is not 0 times log x (NaN for x < 0). A sum of one number and zeros is that number,
// x - 0 is x and 0 - x is -x (signed zeros kept). Returns undefined when the answer is
// an ordinary number to compute (no zero, or more numbers than one).
inline Value arithWithZero(NativeId id, const Value* a, int n) {
  int zeros = 0;
  for (int i = 0; i < n; ++i) zeros += a[i].isZero();
  if (zeros == 0) return Value::undefined();
  switch (id) {
    case NativeId::Mul:
      return Value::zero();
    case NativeId::Div:
      return a[0].isZero() ? Value::zero() : Value::undefined();
    case NativeId::Add:
      // x + 0 is x itself (-0.0 stays -0.0), as plus gives it: the reverse transform sums
      // numeric sensitivities with + (ad_transform.cpp, numericPair).
      if (zeros == n - 1)
        for (int i = 0; i < n; ++i)
          if (!a[i].isZero()) return a[i];
      return zeros == n ? Value::zero() : Value::undefined();
    case NativeId::Sub:
      // x - 0 is x, 0 - x is -x (what x + (-0) and (-x) + 0 give)
      if (n == 2 && zeros == 1) return a[1].isZero() ? a[0] : Value::number(-a[1].asNumber());
      return zeros == n ? Value::zero() : Value::undefined();
    default:
      return Value::undefined();
  }
}

}  // namespace dlam
