// builtins.h — identifiers of the primitives the compiler and the AD transform know by name.
//
// A Native carries one of these ids; codegen emits a dedicated opcode for calls of
// the arithmetic and list primitives when the global still holds the builtin, and
// the reverse transform looks up the derivative rule of a primitive by its id.
#pragma once
#include <cstdint>

namespace dlam {

enum class NativeId : uint16_t {
  None = 0,
  // arithmetic
  Add, Sub, Mul, Div, Expt, Sqrt, Exp, Log, Log1p, Expm1, Sin, Cos, Tan, Asin, Acos, Atan,
  Sinh, Cosh, Tanh, Abs, Min, Max, Floor, Ceiling, Round, Truncate,
  // comparisons and numeric predicates
  NumEq, Lt, Gt, Le, Ge, ZeroP, PositiveP, NegativeP, NanP,
  // data
  Cons, Car, Cdr, Caar, Cadr, Cdar, Cddr, Caddr, Cdddr, List, Length, Append, Reverse, ListRef,
  ListTail, NullP, PairP, NumberP, BooleanP, ProcedureP, StringP, SymbolP, Not, EqP, EqualP,
  EqvP, ListP, NumberToString, StringAppend, Iota,
  // control
  Apply,
  // output and errors
  Display, Write, Newline, Print, Error, Assert,
  // AD (issue 3 onwards)
  StarJ, StarJInverse, Zero, Plus, AttachStarJ,
  // internal helpers of transformed code (names start with %)
  SZeroP, SCar, SCdr, Sign, Step, Materialize, RepResult, BpResult, CheckXbar,
  Count
};

// The car/cdr steps of car, cdr and caar ... cdddr as written ("ad" for cadr: the car
// of the cdr, the innermost step last); nullptr for any other primitive.
constexpr const char* cxrPath(NativeId id) {
  switch (id) {
    case NativeId::Car: return "a";
    case NativeId::Cdr: return "d";
    case NativeId::Caar: return "aa";
    case NativeId::Cadr: return "ad";
    case NativeId::Cdar: return "da";
    case NativeId::Cddr: return "dd";
    case NativeId::Caddr: return "add";
    case NativeId::Cdddr: return "ddd";
    default: return nullptr;
  }
}

}  // namespace dlam
