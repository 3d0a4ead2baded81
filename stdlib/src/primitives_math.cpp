// primitives_math.cpp — the numeric primitives: arithmetic, libm
// functions, rounding, comparisons and numeric predicates.
//
// These natives are what first-class uses of `+`, `sin`, ... call (codegen
// emits dedicated opcodes for direct calls). All numbers are IEEE doubles, so
// division by zero and domain errors give infinities and NaNs, not errors.
#include <cmath>
#include <string>
#include <utility>

#include "primitives.h"

namespace dlam::prim {

double numSlow(VM& vm, const char* who, const Value* args, int i) {
  Value v = fwdPrimal(unwrapAttached(args[i]));
  if (v.isNumber()) return v.asNumber();
  if (v.isZero()) return 0.0;  // the symbolic zero sensitivity is the number 0 here
  if (isObj(v, ObjType::Rev))
    vm.runtimeError(std::string(who) +
                    ": got a reverse-tagged value (a derivative level was mixed up)");
  vm.typeError(who, i, "number", args[i]);
}

namespace {

// ---- arithmetic ------------------------------------------------------------

// The result of + - * / computed as numbers (type errors raised), unless the symbolic
// zero among the operands makes it the symbolic zero (arithWithZero).
Value withZero(NativeId id, const Value* a, int n, double r) {
  Value z = arithWithZero(id, a, n);
  return z.isUndefined() ? numberResult(r) : z;
}

// The array path of a primitive: a symbolic zero among arrays keeps its meaning
// (arithWithZero), the rest is elementwise with broadcasting (primitives_arrays.cpp).
Value arrayArith(VM& vm, NativeId id, Value* a, int n) {
  if (id == NativeId::Add || id == NativeId::Sub || id == NativeId::Mul || id == NativeId::Div)
    if (Value z = arithWithZero(id, a, n); !z.isUndefined()) return z;
  return arrayNary(vm, id, a, n);
}

Value add(VM& vm, Value* a, int n) {
  if (n == 2 && a[0].isNumber() && a[1].isNumber())  // (map + ...), (fold-left + ...)
    return numberResult(a[0].asNumber() + a[1].asNumber());
  if (anyArray(a, n)) [[unlikely]]
    return arrayArith(vm, NativeId::Add, a, n);
  double s = 0;
  for (int i = 0; i < n; ++i) s += num(vm, "+", a, i);
  return withZero(NativeId::Add, a, n, s);
}

Value sub(VM& vm, Value* a, int n) {
  if (n == 2 && a[0].isNumber() && a[1].isNumber())  // (map - ...), (fold-left - ...)
    return numberResult(a[0].asNumber() - a[1].asNumber());
  if (anyArray(a, n)) [[unlikely]]
    return arrayArith(vm, NativeId::Sub, a, n);
  double d = num(vm, "-", a, 0);
  if (n == 1) return withZero(NativeId::Sub, a, n, -d);
  for (int i = 1; i < n; ++i) d -= num(vm, "-", a, i);
  return withZero(NativeId::Sub, a, n, d);
}

Value mul(VM& vm, Value* a, int n) {
  if (n == 2 && a[0].isNumber() && a[1].isNumber())  // (map * ...), (fold-left * ...)
    return numberResult(a[0].asNumber() * a[1].asNumber());
  if (anyArray(a, n)) [[unlikely]]
    return arrayArith(vm, NativeId::Mul, a, n);
  double p = 1;
  for (int i = 0; i < n; ++i) p *= num(vm, "*", a, i);
  return withZero(NativeId::Mul, a, n, p);
}

Value div(VM& vm, Value* a, int n) {
  if (n == 2 && a[0].isNumber() && a[1].isNumber())  // (map / ...), (fold-left / ...)
    return numberResult(a[0].asNumber() / a[1].asNumber());
  if (anyArray(a, n)) [[unlikely]]
    return arrayArith(vm, NativeId::Div, a, n);
  double q = num(vm, "/", a, 0);
  if (n == 1) return numberResult(1 / q);
  for (int i = 1; i < n; ++i) q /= num(vm, "/", a, i);
  return withZero(NativeId::Div, a, n, q);
}

Value expt(VM& vm, Value* a, int n) {
  if (anyArray(a, n)) [[unlikely]]
    return arrayArith(vm, NativeId::Expt, a, n);
  return numberResult(std::pow(num(vm, "expt", a, 0), num(vm, "expt", a, 1)));
}

Value log(VM& vm, Value* a, int n) {
  if (anyArray(a, n)) [[unlikely]] {
    if (n == 1)
      return arrayUnary(
          vm, [](double x) { return std::log(x); }, a[0]);
    return arrayArith(vm, NativeId::Log, a, n);
  }
  double x = std::log(num(vm, "log", a, 0));
  if (n == 2) x /= std::log(num(vm, "log", a, 1));
  return numberResult(x);
}

Value atan(VM& vm, Value* a, int n) {
  if (anyArray(a, n)) [[unlikely]] {
    if (n == 1)
      return arrayUnary(
          vm, [](double x) { return std::atan(x); }, a[0]);
    return arrayArith(vm, NativeId::Atan, a, n);
  }
  if (n == 2) return numberResult(std::atan2(num(vm, "atan", a, 0), num(vm, "atan", a, 1)));
  return numberResult(std::atan(num(vm, "atan", a, 0)));
}

// min/max propagate NaN (an unordered argument makes the answer unknown).
template <bool kMax>
Value extremum(VM& vm, Value* a, int n) {
  const char* who = kMax ? "max" : "min";
  if (anyArray(a, n)) [[unlikely]]
    return arrayArith(vm, kMax ? NativeId::Max : NativeId::Min, a, n);
  double m = num(vm, who, a, 0);
  for (int i = 1; i < n; ++i) {
    double x = num(vm, who, a, i);
    if (std::isnan(x) || (kMax ? x > m : x < m)) m = x;
    if (std::isnan(m)) {
      for (int j = i + 1; j < n; ++j) num(vm, who, a, j);  // still type-check the rest
      break;
    }
  }
  return numberResult(m);
}

// ---- one-argument functions, table-driven ----------------------------------

struct UnaryFn {
  NativeId id;
  double (*fn)(double);
};

constexpr UnaryFn kUnary[] = {
    {NativeId::Sqrt, [](double x) { return std::sqrt(x); }},
    {NativeId::Exp, [](double x) { return std::exp(x); }},
    {NativeId::Log1p, [](double x) { return std::log1p(x); }},
    {NativeId::Expm1, [](double x) { return std::expm1(x); }},
    {NativeId::Sin, [](double x) { return std::sin(x); }},
    {NativeId::Cos, [](double x) { return std::cos(x); }},
    {NativeId::Tan, [](double x) { return std::tan(x); }},
    {NativeId::Asin, [](double x) { return std::asin(x); }},
    {NativeId::Acos, [](double x) { return std::acos(x); }},
    {NativeId::Sinh, [](double x) { return std::sinh(x); }},
    {NativeId::Cosh, [](double x) { return std::cosh(x); }},
    {NativeId::Tanh, [](double x) { return std::tanh(x); }},
    {NativeId::Abs, [](double x) { return std::fabs(x); }},
    {NativeId::Floor, [](double x) { return std::floor(x); }},
    {NativeId::Ceiling, [](double x) { return std::ceil(x); }},
    // Half to even, as Scheme's round: nearbyint under the default rounding mode.
    {NativeId::Round, [](double x) { return std::nearbyint(x); }},
    {NativeId::Truncate, [](double x) { return std::trunc(x); }},
};

template <size_t I>
Value unary(VM& vm, Value* a, int) {
  if (anyArray(a, 1)) [[unlikely]]
    return arrayUnary(vm, kUnary[I].fn, a[0]);
  return numberResult(kUnary[I].fn(num(vm, primitive(kUnary[I].id).name, a, 0)));
}

template <size_t... I>
void defineUnary(Registrar& r, std::index_sequence<I...>) {
  (r.define(kUnary[I].id, &unary<I>), ...);
}

// ---- comparisons (chained: (< a b c) is a < b and b < c) -------------------

struct CompareFn {
  NativeId id;
  bool (*holds)(double, double);
};

constexpr CompareFn kCompare[] = {
    {NativeId::NumEq, [](double x, double y) { return x == y; }},
    {NativeId::Lt, [](double x, double y) { return x < y; }},
    {NativeId::Gt, [](double x, double y) { return x > y; }},
    {NativeId::Le, [](double x, double y) { return x <= y; }},
    {NativeId::Ge, [](double x, double y) { return x >= y; }},
};

template <size_t I>
Value compare(VM& vm, Value* a, int n) {
  const CompareFn& c = kCompare[I];
  const char* name = primitive(c.id).name;
  bool result = true;
  double prev = num(vm, name, a, 0);
  // Every argument is checked even once the answer is known, so a type error is never hidden.
  for (int i = 1; i < n; ++i) {
    double x = num(vm, name, a, i);
    result = result && c.holds(prev, x);
    prev = x;
  }
  return Value::boolean(result);
}

template <size_t... I>
void defineCompare(Registrar& r, std::index_sequence<I...>) {
  (r.define(kCompare[I].id, &compare<I>), ...);
}

// ---- numeric predicates ------------------------------------------------------

Value zeroP(VM& vm, Value* a, int) { return Value::boolean(num(vm, "zero?", a, 0) == 0); }
Value positiveP(VM& vm, Value* a, int) { return Value::boolean(num(vm, "positive?", a, 0) > 0); }
Value negativeP(VM& vm, Value* a, int) { return Value::boolean(num(vm, "negative?", a, 0) < 0); }
Value nanP(VM& vm, Value* a, int) { return Value::boolean(std::isnan(num(vm, "nan?", a, 0))); }

}  // namespace

void openMathPrimitives(Registrar& r) {
  r.define(NativeId::Add, add);
  r.define(NativeId::Sub, sub);
  r.define(NativeId::Mul, mul);
  r.define(NativeId::Div, div);
  r.define(NativeId::Expt, expt);
  r.define(NativeId::Log, log);
  r.define(NativeId::Atan, atan);
  r.define(NativeId::Min, extremum<false>);
  r.define(NativeId::Max, extremum<true>);
  defineUnary(r, std::make_index_sequence<std::size(kUnary)>());
  defineCompare(r, std::make_index_sequence<std::size(kCompare)>());
  r.define(NativeId::ZeroP, zeroP);
  r.define(NativeId::PositiveP, positiveP);
  r.define(NativeId::NegativeP, negativeP);
  r.define(NativeId::NanP, nanP);
}

}  // namespace dlam::prim
