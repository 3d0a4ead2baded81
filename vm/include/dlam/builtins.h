// builtins.h — the table of the primitives the compiler, the VM and the AD transform know
// by id (DLAM_PRIMITIVES), and what is generated from it.
//
// A Native carries one of these ids; codegen emits a dedicated opcode for calls of
// the arithmetic and list primitives when the global still holds the builtin, and
// the reverse transform looks up the derivative rule of a primitive by its id.
#pragma once
#include <cstddef>
#include <cstdint>
#include <iterator>

#include "dlam/value.h"

namespace dlam {

// X(ID, NAME, MIN, MAX, KIND): every primitive the compiler, the VM or the AD transform
// knows by its NativeId, defined once. NAME is the global it is bound to, MIN and MAX its
// arity (MAX -1: no limit), KIND its family (PrimKind). The enum, the kind predicates below
// and the registration of the primitives (stdlib/src/primitives.h, Registrar: name and
// arity come from here) are all generated from this table; the C++ function implementing
// each one is in its family's file (stdlib/src/primitives_*.cpp). Natives nothing refers to
// by id (collect-garbage, %call-vjp, ...) are registered by name alone.
#define DLAM_PRIMITIVES(X)                            \
  X(Add, "+", 0, -1, Arithmetic)                      \
  X(Sub, "-", 1, -1, Arithmetic)                      \
  X(Mul, "*", 0, -1, Arithmetic)                      \
  X(Div, "/", 1, -1, Arithmetic)                      \
  X(Expt, "expt", 2, 2, Arithmetic)                   \
  X(Sqrt, "sqrt", 1, 1, Arithmetic)                   \
  X(Exp, "exp", 1, 1, Arithmetic)                     \
  X(Log, "log", 1, 2, Arithmetic)                     \
  X(Log1p, "log1p", 1, 1, Arithmetic)                 \
  X(Expm1, "expm1", 1, 1, Arithmetic)                 \
  X(Sin, "sin", 1, 1, Arithmetic)                     \
  X(Cos, "cos", 1, 1, Arithmetic)                     \
  X(Tan, "tan", 1, 1, Arithmetic)                     \
  X(Asin, "asin", 1, 1, Arithmetic)                   \
  X(Acos, "acos", 1, 1, Arithmetic)                   \
  X(Atan, "atan", 1, 2, Arithmetic)                   \
  X(Sinh, "sinh", 1, 1, Arithmetic)                   \
  X(Cosh, "cosh", 1, 1, Arithmetic)                   \
  X(Tanh, "tanh", 1, 1, Arithmetic)                   \
  X(Abs, "abs", 1, 1, Arithmetic)                     \
  X(Min, "min", 1, -1, Arithmetic)                    \
  X(Max, "max", 1, -1, Arithmetic)                    \
  X(Floor, "floor", 1, 1, Arithmetic)                 \
  X(Ceiling, "ceiling", 1, 1, Arithmetic)             \
  X(Round, "round", 1, 1, Arithmetic)                 \
  X(Truncate, "truncate", 1, 1, Arithmetic)           \
  X(NumEq, "=", 1, -1, Comparison)                    \
  X(Lt, "<", 1, -1, Comparison)                       \
  X(Gt, ">", 1, -1, Comparison)                       \
  X(Le, "<=", 1, -1, Comparison)                      \
  X(Ge, ">=", 1, -1, Comparison)                      \
  X(ZeroP, "zero?", 1, 1, Comparison)                 \
  X(PositiveP, "positive?", 1, 1, Comparison)         \
  X(NegativeP, "negative?", 1, 1, Comparison)         \
  X(NanP, "nan?", 1, 1, Comparison)                   \
  X(Cons, "cons", 2, 2, Data)                         \
  X(Car, "car", 1, 1, Data)                           \
  X(Cdr, "cdr", 1, 1, Data)                           \
  X(Caar, "caar", 1, 1, Data)                         \
  X(Cadr, "cadr", 1, 1, Data)                         \
  X(Cdar, "cdar", 1, 1, Data)                         \
  X(Cddr, "cddr", 1, 1, Data)                         \
  X(Caddr, "caddr", 1, 1, Data)                       \
  X(Cdddr, "cdddr", 1, 1, Data)                       \
  X(List, "list", 0, -1, Data)                        \
  X(Length, "length", 1, 1, Data)                     \
  X(Append, "append", 0, -1, Data)                    \
  X(Reverse, "reverse", 1, 1, Data)                   \
  X(ListRef, "list-ref", 2, 2, Data)                  \
  X(ListTail, "list-tail", 2, 2, Data)                \
  X(NullP, "null?", 1, 1, Data)                       \
  X(PairP, "pair?", 1, 1, Data)                       \
  X(NumberP, "number?", 1, 1, Data)                   \
  X(BooleanP, "boolean?", 1, 1, Data)                 \
  X(ProcedureP, "procedure?", 1, 1, Data)             \
  X(StringP, "string?", 1, 1, Data)                   \
  X(SymbolP, "symbol?", 1, 1, Data)                   \
  X(Not, "not", 1, 1, Data)                           \
  X(EqP, "eq?", 2, 2, Data)                           \
  X(EqualP, "equal?", 2, 2, Data)                     \
  X(EqvP, "eqv?", 2, 2, Data)                         \
  X(ListP, "list?", 1, 1, Data)                       \
  X(NumberToString, "number->string", 1, 2, Data)     \
  X(StringAppend, "string-append", 0, -1, Data)       \
  X(Iota, "iota", 1, 3, Data)                         \
  X(VectorRef, "vector-ref", 2, 2, Data)              \
  X(VectorLength, "vector-length", 1, 1, Data)        \
  X(VectorOnehot, "%vector-onehot", 3, 4, Data)       \
  X(Apply, "apply", 1, -1, Control)                   \
  X(Display, "display", 1, 2, Io)                     \
  X(Write, "write", 1, 2, Io)                         \
  X(Newline, "newline", 0, 1, Io)                     \
  X(Print, "print", 0, -1, Io)                        \
  X(Error, "error", 1, -1, Io)                        \
  X(Assert, "assert", 1, 2, Io)                       \
  X(StarJ, "*j", 1, 1, Ad)                            \
  X(StarJInverse, "*j-inverse", 1, 1, Ad)             \
  X(Zero, "zero", 1, 1, Ad)                           \
  X(Plus, "plus", 2, 2, Ad)                           \
  X(AttachStarJ, "attach-*j", 2, 2, Ad)               \
  X(AttachJStar, "attach-j*", 2, 2, Ad)               \
  X(BundleAt, "%bundle-at", 3, 3, Ad)                 \
  X(PrimalAt, "%primal-at", 2, 2, Ad)                 \
  X(TangentAt, "%tangent-at", 2, 2, Ad)               \
  X(SZeroP, "%zero?", 1, 1, Internal)                 \
  X(SCar, "%scar", 1, 1, Internal)                    \
  X(SCdr, "%scdr", 1, 1, Internal)                    \
  X(Sign, "%sign", 1, 1, Internal)                    \
  X(Step, "%step", 2, 2, Internal)                    \
  X(ZeroIfZero, "%zero-if-zero", 1, 1, Internal)      \
  X(Materialize, "%materialize", 2, 2, Internal)      \
  X(Observed, "%observed", 2, 2, Internal)            \
  X(RepResult, "%rep-result", 2, 2, Internal)         \
  X(BpResult, "%bp-result", 2, 2, Internal)           \
  X(CheckXbar, "%check-xbar", 3, 3, Internal)         \
  X(SumTo, "%sum-to", 2, 2, Internal)                 \
  X(BroadcastTo, "%broadcast-to", 2, 2, Internal)     \
  X(SensAdd, "%sens+", 2, 2, Arithmetic)              \
  X(SensSub, "%sens-", 2, 2, Arithmetic)              \
  X(AttachedImage, "%attached-image", 2, 2, Internal) \
  X(Unreduce, "%unreduce", 2, 2, Internal)            \
  X(SensBack, "%sens-back", 2, -1, Internal)          \
  X(StarJConstant, "%*j-constant", 1, 1, Internal)    \
  X(UserRep, "%user-rep", 1, 1, Internal)

// A primitive's family. Arithmetic: numbers to a number, or the symbolic zero.
// Comparison: numbers to a boolean (= < > <= >= and the numeric predicates). Data: pairs,
// lists, vectors, strings, and predicates on any value. Control: apply. Io: output and
// errors. Ad: the differentiation primitives of the language. Internal: the helpers that
// reverse-transformed code calls (their names start with %).
enum class PrimKind : uint8_t { None, Arithmetic, Comparison, Data, Control, Io, Ad, Internal };

enum class NativeId : uint16_t {
  None = 0,
#define DLAM_PRIMITIVE_ENUM(id, name, min, max, kind) id,
  DLAM_PRIMITIVES(DLAM_PRIMITIVE_ENUM)
#undef DLAM_PRIMITIVE_ENUM
      Count
};

struct PrimitiveInfo {
  const char* name;  // nullptr for NativeId::None
  int minArgs;
  int maxArgs;  // -1: no limit
  PrimKind kind;
};

inline constexpr PrimitiveInfo kPrimitives[] = {{nullptr, 0, 0, PrimKind::None},
#define DLAM_PRIMITIVE_INFO(id, name, min, max, kind) {name, min, max, PrimKind::kind},
                                                DLAM_PRIMITIVES(DLAM_PRIMITIVE_INFO)
#undef DLAM_PRIMITIVE_INFO
};
static_assert(std::size(kPrimitives) == static_cast<size_t>(NativeId::Count));

constexpr const PrimitiveInfo& primitive(NativeId id) {
  return kPrimitives[static_cast<size_t>(id)];
}
constexpr PrimKind kindOf(NativeId id) { return primitive(id).kind; }

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
constexpr bool isArithmetic(NativeId id) { return kindOf(id) == PrimKind::Arithmetic; }
// The comparisons and numeric predicates: numbers to a boolean.
constexpr bool isComparison(NativeId id) { return kindOf(id) == PrimKind::Comparison; }

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
    case NativeId::SensAdd:
      // x + 0 is x itself (-0.0 stays -0.0), as plus gives it: the reverse transform sums
      // numeric sensitivities with + (ad_transform.cpp, numericPair).
      if (zeros == n - 1)
        for (int i = 0; i < n; ++i)
          if (!a[i].isZero()) return a[i];
      return zeros == n ? Value::zero() : Value::undefined();
    case NativeId::Sub:
    case NativeId::SensSub:
      // x - 0 is x, 0 - x is -x (what x + (-0) and (-x) + 0 give)
      if (n == 2 && zeros == 1)
        return a[1].isZero()     ? a[0]
               : a[1].isNumber() ? Value::number(-a[1].asNumber())
                                 : Value::undefined();  // 0 - an array: computed
      return zeros == n ? Value::zero() : Value::undefined();
    default:
      return Value::undefined();
  }
}

}  // namespace dlam
