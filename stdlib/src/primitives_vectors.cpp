// primitives_vectors.cpp — immutable vectors of doubles: the natives
// that compute them.
//
// A vector stores its elements unboxed (object.h Vector). These natives compute
// primal values only. The prelude wraps the differentiable ones with custom-vjp
// (`vector`, `make-vector`, `vector-ref`, `vector-sum`, `vector-prod`, `vector-dot`, `vector-map`,
// `vector-map2`, `build`, `vector->list`, `list->vector`), whose pullbacks are written
// with the same wrapped operations, so they differentiate again to any order. Under
// *j a vector is tagged as a whole (a Rev whose primal is the vector), and its
// sensitivity is a vector of the same length, a sparse chain of nodes (object.h; made
// by %vector-onehot, read here in its dense form: vec) or the symbolic zero (ad.cpp:
// plus; primitives_ad.cpp: %materialize and the shape checks).
//
// vector-map, vector-map2 and build call their procedure from C++ (a primitive directly,
// a closure through VM::call); when natives are already nested they hand the work to
// the prelude's dlam versions, so deep user recursion through them never recurses in C++.
#include <cmath>
#include <string>

#include "primitives.h"

namespace dlam::prim {

namespace {

constexpr double kMaxVectorLength = 1u << 30;

// The vector argument i, dense: a sparse sensitivity (object.h) that reaches a native
// (the ybar of a user's pullback) is made dense first, in place of the argument.
Vector* vec(VM& vm, const char* who, Value* a, int i) {
  if (!isObj(a[i], ObjType::Vector) || static_cast<Vector*>(a[i].asObject())->rank != 1)
    vm.typeError(who, i, "vector", a[i]);
  auto* v = static_cast<Vector*>(a[i].asObject());
  if (isSparse(v)) [[unlikely]] {
    v = vm.dense(v);
    a[i] = Value::object(v);
  }
  return v;
}

uint32_t lengthArg(VM& vm, const char* who, Value* a, int i) {
  double n = num(vm, who, a, i);
  if (!(n >= 0 && n <= kMaxVectorLength && n == std::floor(n)))
    vm.runtimeError(std::string(who) +
                    ": expected a length (an integer from 0 to 2^30) as argument " +
                    std::to_string(i + 1) + ", got " + vm.show(a[i], true));
  return static_cast<uint32_t>(n);
}

uint32_t indexArg(VM& vm, const char* who, Value* a, int i, uint32_t length) {
  double k = num(vm, who, a, i);
  if (!(k >= 0 && k < length && k == std::floor(k)))
    vm.runtimeError(std::string(who) + ": index " + vm.show(a[i], true) +
                    " is out of range for a vector of length " + std::to_string(length));
  return static_cast<uint32_t>(k);
}

// An element for a vector: a number, or the symbolic zero (a sensitivity nothing reached).
double element(VM& vm, const char* who, Value v) {
  if (v.isNumber()) [[likely]]
    return v.asNumber();
  if (v.isZero()) return 0;
  Value args[1] = {v};
  return num(vm, who, args, 0);
}

bool isRank1(Value x) {
  return isObj(x, ObjType::Vector) && static_cast<Vector*>(x.asObject())->rank == 1;
}

// (a bundled vector, under forward mode, is a vector)
Value isVector(VM&, Value* a, int) { return Value::boolean(isRank1(fwdPrimal(a[0]))); }

Value vectorLength(VM& vm, Value* a, int) {
  if (!isRank1(a[0])) vm.typeError("vector-length", 0, "vector", a[0]);
  return Value::number(dlam::vectorLength(static_cast<Vector*>(a[0].asObject())));
}

Value vectorOf(VM& vm, Value* a, int n) {
  Vector* v = vm.makeVector(static_cast<uint32_t>(n));
  for (int i = 0; i < n; ++i) v->items[i] = num(vm, "vector", a, i);
  return Value::object(v);
}

// (make-vector n [fill]): the fill is 0 when left out.
Value makeVector(VM& vm, Value* a, int nargs) {
  uint32_t n = lengthArg(vm, "make-vector", a, 0);
  double x = nargs > 1 ? num(vm, "make-vector", a, 1) : 0.0;
  Vector* v = vm.makeVector(n);
  for (uint32_t i = 0; i < n; ++i) v->items[i] = x;
  return Value::object(v);
}

// (vector-ref v i). Differentiated by its own rule (ad_transform.cpp): a sparse
// sensitivity for v, made by %vector-onehot, whose rule takes element i of its
// sensitivity with vector-ref again; that may be the symbolic zero (of any length),
// whose elements are the symbolic zero.
Value vectorRef(VM& vm, Value* a, int) {
  if (a[0].isZero()) {
    indexArg(vm, "vector-ref", a, 1, UINT32_MAX);
    return a[0];
  }
  Vector* v = vec(vm, "vector-ref", a, 0);
  return numberResult(v->items[indexArg(vm, "vector-ref", a, 1, v->aux)]);
}

Value vectorSum(VM& vm, Value* a, int) {
  Vector* v = vec(vm, "vector-sum", a, 0);
  double s = 0;
  for (uint32_t i = 0; i < v->aux; ++i) s += v->items[i];
  return numberResult(s);
}

Value vectorProd(VM& vm, Value* a, int) {
  Vector* v = vec(vm, "vector-prod", a, 0);
  double s = 1;
  for (uint32_t i = 0; i < v->aux; ++i) s *= v->items[i];
  return numberResult(s);
}

Vector* sameLength(VM& vm, const char* who, Value* a, int i, Vector* u) {
  Vector* v = vec(vm, who, a, i);
  if (v->aux != u->aux)
    vm.runtimeError(std::string(who) + ": vectors of different lengths (" + std::to_string(u->aux) +
                    " and " + std::to_string(v->aux) + ")");
  return v;
}

Value vectorDot(VM& vm, Value* a, int) {
  Vector* u = vec(vm, "vector-dot", a, 0);
  Vector* v = sameLength(vm, "vector-dot", a, 1, u);
  double s = 0;
  for (uint32_t i = 0; i < u->aux; ++i) s += u->items[i] * v->items[i];
  return numberResult(s);
}

// (%vector-scale s v): s v.
Value vectorScale(VM& vm, Value* a, int) {
  double s = num(vm, "%vector-scale", a, 0);
  Vector* v = vec(vm, "%vector-scale", a, 1);
  Vector* r = vm.makeVector(v->aux);
  for (uint32_t i = 0; i < v->aux; ++i) r->items[i] = s * v->items[i];
  return Value::object(r);
}

// (%vector-onehot v i y [rest]): the vector of v's length that is y at i and 0
// elsewhere (the sensitivity of v from that of its element i), as a sparse node
// (object.h): O(1), and plus keeps a sum of them sparse. With rest, that plus rest:
// the node in front of rest when rest is a vector sensitivity of that length or the
// symbolic zero (what vector-ref's rule does with the sensitivity accumulated so far)
// and the chain fits, else through plus.
Value vectorOnehot(VM& vm, Value* a, int argc) {
  // An element of the symbolic zero (a sensitivity that nothing reached, as a value
  // differentiated again) is zero whatever the vector's other values: it passes on
  // no sensitivity.
  if (a[0].isZero()) return argc == 4 ? a[3] : a[0];
  if (!isObj(a[0], ObjType::Vector)) vm.typeError("%vector-onehot", 0, "vector", a[0]);
  uint32_t n = vectorLength(static_cast<Vector*>(a[0].asObject()));
  uint32_t i = indexArg(vm, "%vector-onehot", a, 1, n);
  // g may carry the axes the element was broadcast along (ad_rules.cpp): summed.
  Value g = a[2];
  if (isObj(g, ObjType::Vector)) {
    Value to = Value::number(0);
    Value args[2] = {g, to};
    g = vm.callPrimitive(vm.builtin(NativeId::SumTo), args, 2);
  }
  double y = element(vm, "%vector-onehot", g);
  Value rest = argc == 4 ? a[3] : Value::zero();
  if (rest.isZero()) return Value::object(vm.makeSparse(n, i, y, Value::nil()));
  if (isObj(rest, ObjType::Vector) && vectorLength(static_cast<Vector*>(rest.asObject())) == n &&
      sparseChainFits(uint64_t(sparseCount(static_cast<Vector*>(rest.asObject()))) + 1, n))
    return Value::object(vm.makeSparse(n, i, y, rest));
  return vm.plus(Value::object(vm.makeSparse(n, i, y, Value::nil())), rest);
}

Value vectorToList(VM& vm, Value* a, int) {
  Vector* v = vec(vm, "vector->list", a, 0);
  Value l = Value::nil();
  // No collection runs inside a native: v stays where it is while the list grows.
  for (uint32_t i = v->aux; i > 0; --i) l = vm.cons(numberResult(v->items[i - 1]), l);
  return l;
}

Value listToVector(VM& vm, Value* a, int) {
  uint32_t n = 0;
  Value l = a[0];
  for (; isPair(l); l = asPair(l)->cdr) ++n;
  if (!l.isNil()) vm.typeError("list->vector", 0, "list", a[0]);
  Vector* v = vm.makeVector(n);
  l = a[0];
  for (uint32_t i = 0; i < n; ++i, l = asPair(l)->cdr)
    v->items[i] = element(vm, "list->vector", asPair(l)->car);
  return Value::object(v);
}

// The vector of (f args(i)...) for i < len, for (%vector-map f v), (%vector-map2 f u v)
// and (%build n f); args(i, xs) writes the arguments of call i from values the caller
// roots. The result is made first and filled as the calls return: it is rooted across
// them (a call may collect), and it holds no pointers, so its stores need no write barrier.
// Under forward mode a call may return a bundle (f captures one, or was given elements
// of a bundled vector): from then on the results are kept in a list, and the vector is
// made from it by list->array, whose forward rule makes it a bundle of vectors.
template <class Args>
Value fillByCalls(VM& vm, const char* who, Value fn, uint32_t len, int nargs, Args args) {
  VM::Root f(vm, fn), r(vm, Value::object(vm.makeVector(len))), bundled(vm, Value::nil());
  Value xs[2];
  uint32_t i = 0;
  for (; i < len; ++i) {
    args(i, xs);
    Value y = applyProcedure(vm, f.get(), xs, nargs);
    if (y.isNumber()) [[likely]] {
      static_cast<Vector*>(r.get().asObject())->items[i] = y.asNumber();
      continue;
    }
    if (!isFwd(y) || asFwd(y)->co())
      vm.runtimeError(std::string(who) + ": the procedure returned " + vm.show(y, true) +
                      ", not a number");
    Value l = Value::nil();
    for (uint32_t k = i; k-- > 0;)
      l = vm.cons(Value::number(static_cast<Vector*>(r.get().asObject())->items[k]), l);
    l = vm.cons(y, l);  // (reversed: the newest first)
    bundled.set(l);
    break;
  }
  if (i == len) return r.get();
  for (++i; i < len; ++i) {
    args(i, xs);
    Value y = applyProcedure(vm, f.get(), xs, nargs);
    if (!y.isNumber() && (!isFwd(y) || asFwd(y)->co()))
      vm.runtimeError(std::string(who) + ": the procedure returned " + vm.show(y, true) +
                      ", not a number");
    bundled.set(vm.cons(y, bundled.get()));
  }
  Value l = Value::nil();
  for (Value p = bundled.get(); isPair(p); p = asPair(p)->cdr) l = vm.cons(asPair(p)->car, l);
  // (The library's, whatever a program defines under the name.)
  Value toArray = vm.libraryValue("%list->array");
  if (!isNative(toArray)) vm.runtimeError("internal error: the library's %list->array is missing");
  return vm.callPrimitive(asNative(toArray), &l, 1);
}

// Element i of the vector v, or of a bundled vector: the bundle of its primal's and
// its tangent's elements (tags nest as deep as derivatives do).
Value elementOf(VM& vm, Value v, uint32_t i) {
  if (!isFwd(v)) return numberResult(static_cast<Vector*>(v.asObject())->items[i]);
  auto* b = asFwd(v);
  Value p = elementOf(vm, b->primal, i);
  Value t = b->tangent.isZero() ? Value::zero() : elementOf(vm, b->tangent, i);
  return vm.fwdBundle(b->tag(), p, t);
}

// The length of the vector argument a[i] of who: a vector (made dense in a[i] by vec),
// or under forward mode a bundle of one (its innermost primal's). Anything else is
// vec's type error, naming argument i.
uint32_t vectorLengthArg(VM& vm, const char* who, Value* a, int i) {
  Value v = fwdPrimal(a[i]);
  if (v.bits() != a[i].bits() && isRank1(v))
    return vectorLength(static_cast<Vector*>(v.asObject()));
  return vec(vm, who, a, i)->aux;
}

Value vectorMap(VM& vm, Value* a, int n) {
  uint32_t len = vectorLengthArg(vm, "vector-map", a, 1);
  if (nestedTooDeep(vm)) return handOver(vm, "%vector-map-plain", a, n);
  VM::Root v(vm, a[1]);
  return fillByCalls(vm, "vector-map", a[0], len, 1,
                     [&](uint32_t i, Value* xs) { xs[0] = elementOf(vm, v.get(), i); });
}

Value vectorMap2(VM& vm, Value* a, int n) {
  uint32_t len = vectorLengthArg(vm, "vector-map2", a, 1);
  uint32_t len2 = vectorLengthArg(vm, "vector-map2", a, 2);
  if (len2 != len)
    vm.runtimeError("vector-map2: vectors of different lengths (" + std::to_string(len) + " and " +
                    std::to_string(len2) + ")");
  if (nestedTooDeep(vm)) return handOver(vm, "%vector-map2-plain", a, n);
  VM::Root u(vm, a[1]), v(vm, a[2]);
  return fillByCalls(vm, "vector-map2", a[0], len, 2, [&](uint32_t i, Value* xs) {
    xs[0] = elementOf(vm, u.get(), i);
    xs[1] = elementOf(vm, v.get(), i);
  });
}

Value build(VM& vm, Value* a, int n) {
  uint32_t len = lengthArg(vm, "build", a, 0);
  if (nestedTooDeep(vm)) return handOver(vm, "%build-plain", a, n);
  return fillByCalls(vm, "build", a[1], len, 1,
                     [](uint32_t i, Value* xs) { xs[0] = Value::number(i); });
}

// Forward mode through %vector-dot and %vector-scale, where the library's vector-dot
// and %vector-scale* (custom rules, whose forward mode is their own) hand them bundles
// or cobundles: the product rule; linear in each argument apart, so a cobundle (the
// tangent of a vector under reverse over forward over forward, which the transposed
// rule of vector-sum dots with its pullback) goes part by part (VM::fwdCoLinearParts).
Value productRule(VM& vm, Native* self, const Value* p, const Value* t, int, Value) {
  Value r = Value::zero();
  for (int i = 0; i < 2; ++i) {
    if (t[i].isZero()) continue;
    Value a[2] = {i == 0 ? t[0] : p[0], i == 0 ? p[1] : t[1]};
    Value d = vm.callPrimitive(self, a, 2);
    r = r.isZero() ? d : vm.arith(NativeId::Add, r, d);
  }
  return r.isZero() ? Value::undefined() : r;
}

// Forward mode through %vector-onehot (forward over reverse: vector-ref's sensitivity
// computed on bundles): linear in y and rest jointly; v gives only the shape.
Value onehotRule(VM& vm, Native* self, const Value* p, const Value* t, int n, Value) {
  bool ty = !t[2].isZero(), tr = n == 4 && !t[3].isZero();
  if (!ty && !tr) return Value::undefined();
  Value a[4] = {p[0], p[1], ty ? t[2] : Value::number(0), tr ? t[3] : Value::zero()};
  return vm.callPrimitive(self, a, n);
}

}  // namespace

void openVectorPrimitives(Registrar& r) {
  VM& vm = r.vm;
  vm.defineNative("vector?", isVector, 1, 1);
  r.define(NativeId::VectorLength, vectorLength);
  r.wrapped("%vector", "vector", vectorOf, 0, -1);
  r.wrapped("%make-vector", "make-vector", makeVector, 1, 2);
  // Linear in the vector: a cobundle (a vector's sensitivity, reverse over forward over
  // reverse, where the transpose of its reverse rule's onehot is a vector-ref) goes part
  // by part.
  r.define(NativeId::VectorRef, vectorRef)->fwdCoLinear = 0b01;
  r.wrapped("%vector-sum", "vector-sum", vectorSum, 1, 1);
  Native* dot = r.wrapped("%vector-dot", "vector-dot", vectorDot, 2, 2);
  r.wrapped("%vector-prod", "vector-prod", vectorProd, 1, 1);
  Native* scale = vm.defineNative("%vector-scale", vectorScale, 2, 2);
  for (Native* n : {dot, scale}) {
    n->fwdRule = productRule;
    n->fwdCoLinear = 0b11;
    n->fwdCoEach = true;
    n->flags |= kDualRule;
  }
  Native* onehot = r.define(NativeId::VectorOnehot, vectorOnehot);
  onehot->fwdRule = onehotRule;
  onehot->fwdCoLinear = 0b1100;
  onehot->flags |= kDualRule;
  // (Linear: a bundle's tangent is that of its tangent; a cobundle's parts become a list
  // of cobundles, fwdCoLinearParts.)
  Native* toList = r.wrapped("%vector->list", "vector->list", vectorToList, 1, 1);
  toList->fwdRule = [](VM& vm, Native* self, const Value*, const Value* t, int, Value) {
    Value a = t[0];
    return a.isZero() ? Value::undefined() : vm.callPrimitive(self, &a, 1);
  };
  toList->fwdCoLinear = 0b1;
  toList->flags |= kDualRule;
  r.wrapped("%list->vector", "list->vector", listToVector, 1, 1);
  vm.defineNative("%vector-map", vectorMap, 2, 2);
  vm.defineNative("%vector-map2", vectorMap2, 3, 3);
  vm.defineNative("%build", build, 2, 2);
}

}  // namespace dlam::prim
