// primitives_lists.cpp — the data primitives: pairs and lists, type
// predicates (and list?), eq?/eqv?/equal?, strings (number->string, string->number,
// string-append, symbol->string, string->symbol, the comparisons
// string=? string<? ...) and iota.
//
// Everything that walks a list or a structure loops (equal? with an explicit
// stack): lists of a million elements and deeply nested data must not grow the
// C++ stack. Natives run between safe points, so Values held in C++ locals and
// vectors here are never collected under our feet.
#include <charconv>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "dlam/dict.h"
#include "dlam/syntax.h"
#include "primitives.h"

namespace dlam::prim {

namespace {

// ---- pairs -------------------------------------------------------------------

Value cons(VM& vm, Value* a, int) { return vm.cons(a[0], a[1]); }

// car, cdr and their compositions, table-driven; the steps are cxrPath's.
struct Accessor {
  NativeId id;
  const char* expected;  // what argument 1 must be, for the error message
};

constexpr Accessor kAccessors[] = {
    {NativeId::Car, "pair"},
    {NativeId::Cdr, "pair"},
    {NativeId::Caar, "pair whose car is a pair"},
    {NativeId::Cadr, "list of at least 2 elements"},
    {NativeId::Cdar, "pair whose car is a pair"},
    {NativeId::Cddr, "pair whose cdr is a pair"},
    {NativeId::Caddr, "list of at least 3 elements"},
    {NativeId::Cdddr, "pair whose cddr is a pair"},
};

template <size_t I>
Value access(VM& vm, Value* a, int) {
  const Accessor& acc = kAccessors[I];
  const char* name = primitive(acc.id).name;
  Value v = unwrapAttached(a[0]);
  if (!isPair(v)) vm.typeError(name, 0, "pair", a[0]);
  const char* path = cxrPath(acc.id);  // read right to left: the innermost step is last
  for (const char* p = path + std::char_traits<char>::length(path); p != path;) {
    v = unwrapAttached(v);
    if (!isPair(v)) vm.typeError(name, 0, acc.expected, a[0]);
    v = *--p == 'a' ? asPair(v)->car : asPair(v)->cdr;
  }
  return v;
}

template <size_t... I>
void defineAccessors(Registrar& r, std::index_sequence<I...>) {
  (r.define(kAccessors[I].id, &access<I>), ...);
}

// ---- lists -------------------------------------------------------------------

// Appends the elements of the proper list a[i] to `out`, or raises a type error.
void collectList(VM& vm, const char* who, Value* a, int i, std::vector<Value>& out) {
  Value l = unwrapAttached(a[i]);
  while (isPair(l)) {
    out.push_back(asPair(l)->car);
    l = unwrapAttached(asPair(l)->cdr);
  }
  if (!l.isNil()) vm.typeError(who, i, "list", a[i]);
}

// Length of the proper list a[i], or a type error.
size_t listLength(VM& vm, const char* who, Value* a, int i) {
  size_t n = 0;
  Value l = unwrapAttached(a[i]);
  for (; isPair(l); l = unwrapAttached(asPair(l)->cdr)) ++n;
  if (!l.isNil()) vm.typeError(who, i, "list", a[i]);
  return n;
}

Value list(VM& vm, Value* a, int n) { return vm.list(a, static_cast<size_t>(n)); }

Value length(VM& vm, Value* a, int) {
  return Value::number(static_cast<double>(listLength(vm, "length", a, 0)));
}

// Copies every list but the last, which is shared (and may be any value).
Value append(VM& vm, Value* a, int n) {
  if (n == 0) return Value::nil();
  std::vector<Value> items;
  for (int i = 0; i < n - 1; ++i) collectList(vm, "append", a, i, items);
  Value result = a[n - 1];
  for (size_t i = items.size(); i > 0; --i) result = vm.cons(items[i - 1], result);
  return result;
}

Value reverse(VM& vm, Value* a, int) {
  Value result = Value::nil();
  Value l = unwrapAttached(a[0]);
  for (; isPair(l); l = unwrapAttached(asPair(l)->cdr)) result = vm.cons(asPair(l)->car, result);
  if (!l.isNil()) vm.typeError("reverse", 0, "list", a[0]);
  return result;
}

// A list index: a non-negative integer.
size_t indexArg(VM& vm, const char* who, Value* a, int i) {
  // Indices are not differentiable: in transformed code they arrive reverse-tagged.
  Value v = untagged(fwdPrimal(unwrapAttached(a[i])));
  if (!v.isNumber()) vm.typeError(who, i, "number", a[i]);
  double k = v.asNumber();
  if (!(k >= 0) || k != std::trunc(k) || k > 9007199254740992.0)
    vm.typeError(who, i, "non-negative integer", a[i]);
  return static_cast<size_t>(k);
}

[[noreturn]] void indexRangeError(VM& vm, const char* who, size_t k, size_t len) {
  vm.runtimeError(std::string(who) + ": index " + std::to_string(k) +
                  " out of range for a list of length " + std::to_string(len));
}

// The k-th tail of a[0]; `needPair` asks for a pair there (list-ref), otherwise
// any tail will do (list-tail, whose result may be '() or an improper end).
Value tailAt(VM& vm, const char* who, Value* a, bool needPair) {
  size_t k = indexArg(vm, who, a, 1);
  Value l = unwrapAttached(a[0]);
  size_t i = 0;
  for (; i < k && isPair(l); ++i) l = unwrapAttached(asPair(l)->cdr);
  if (i == k && (isPair(l) || !needPair)) return l;
  size_t len = listLength(vm, who, a, 0);  // a type error if a[0] is not a list at all
  indexRangeError(vm, who, k, len);
}

Value listRef(VM& vm, Value* a, int) { return asPair(tailAt(vm, "list-ref", a, true))->car; }
Value listTail(VM& vm, Value* a, int) { return tailAt(vm, "list-tail", a, false); }

// ---- predicates --------------------------------------------------------------

Value nullP(VM&, Value* a, int) { return Value::boolean(unwrapAttached(a[0]).isNil()); }
Value pairP(VM&, Value* a, int) { return Value::boolean(isPair(unwrapAttached(a[0]))); }
Value numberP(VM&, Value* a, int) {
  // A reverse-tagged number is a number; a tagged array (a vector or matrix) is not. A
  // bundle or cobundle is what its primal part is, or its tangent part where the primal
  // is the symbolic zero (a cobundle of an array's sensitivity can have a zero primal).
  Value v = leafPart(unwrapAttached(a[0]));
  return Value::boolean(v.isNumber() || v.isZero());
}
Value booleanP(VM&, Value* a, int) { return Value::boolean(unwrapAttached(a[0]).isBool()); }
Value procedureP(VM&, Value* a, int) { return Value::boolean(isProcedure(unwrapAttached(a[0]))); }
Value stringP(VM&, Value* a, int) { return Value::boolean(isString(unwrapAttached(a[0]))); }
Value symbolP(VM&, Value* a, int) { return Value::boolean(isSymbol(unwrapAttached(a[0]))); }
Value notP(VM&, Value* a, int) { return Value::boolean(unwrapAttached(a[0]).isFalse()); }

// A proper list: '() or pairs ending in '() (pairs are immutable, so no cycles).
Value listP(VM&, Value* a, int) {
  Value l = unwrapAttached(a[0]);
  while (isPair(l)) l = unwrapAttached(asPair(l)->cdr);
  return Value::boolean(l.isNil());
}

// ---- eq?, eqv? and equal? -----------------------------------------------------
//
// All numbers are doubles compared by value, so eqv? is eq?: numbers by value (0 and
// -0 are eqv?, and a NaN is eqv? to any NaN: sameNumber), everything else by identity.

bool isNumeric(Value v) { return v.isNumber() || v.isZero(); }
double numericValue(Value v) { return v.isNumber() ? v.asNumber() : 0.0; }

// Identity, except that numbers compare by value and reverse-tagged values and
// forward bundles by their primals (a tag is not an identity of its own: the bundle of
// 3 is eqv? to 3, so case and memv dispatch on it). Loops through nested tags.
bool eqValues(Value x, Value y) {
  for (;;) {
    x = fwdPrimal(unwrapAttached(x));
    y = fwdPrimal(unwrapAttached(y));
    if (x == y) return true;
    if (isNumeric(x) && isNumeric(y)) return sameNumber(numericValue(x), numericValue(y));
    if (isObj(x, ObjType::Rev) && isObj(y, ObjType::Rev)) {
      x = static_cast<Rev*>(x.asObject())->primal;
      y = static_cast<Rev*>(y.asObject())->primal;
      continue;
    }
    return false;
  }
}

bool equalValues(Value x0, Value y0) {
  std::vector<std::pair<Value, Value>> todo{{x0, y0}};
  while (!todo.empty()) {
    auto [x, y] = todo.back();
    todo.pop_back();
    x = unwrapAttached(x);
    y = unwrapAttached(y);
    if (isPair(x) && isPair(y)) {
      if (x == y) continue;
      todo.push_back({asPair(x)->cdr, asPair(y)->cdr});
      todo.push_back({asPair(x)->car, asPair(y)->car});
    } else if (isString(x) && isString(y)) {
      if (asString(x)->view() != asString(y)->view()) return false;
    } else if (isObj(x, ObjType::Vector) && isObj(y, ObjType::Vector)) {
      auto* vx = static_cast<Vector*>(x.asObject());
      auto* vy = static_cast<Vector*>(y.asObject());
      if (!sameShape(vx, vy)) return false;
      std::vector<double> bx, by;
      const double *ex = elementsOf(vx, bx), *ey = elementsOf(vy, by);
      for (uint32_t i = 0, n = vectorLength(vx); i < n; ++i)
        if (!(ex[i] == ey[i])) return false;
    } else if (isObj(x, ObjType::Record) && isObj(y, ObjType::Record)) {
      auto *rx = static_cast<Record*>(x.asObject()), *ry = static_cast<Record*>(y.asObject());
      if (x == y) continue;
      if (isRecordType(rx) || rx->type != ry->type) return false;
      for (uint32_t i = rx->count(); i-- > 0;) todo.push_back({rx->fields[i], ry->fields[i]});
    } else if (isObj(x, ObjType::Dict) && isObj(y, ObjType::Dict)) {
      auto *dx = static_cast<Dict*>(x.asObject()), *dy = static_cast<Dict*>(y.asObject());
      if (x == y) continue;
      if (dx->size() != dy->size()) return false;
      std::vector<std::pair<Value, Value>> ex, ey;
      forEachEntry(dx, [&](Value k, Value v) { ex.emplace_back(k, v); });
      forEachEntry(dy, [&](Value k, Value v) { ey.emplace_back(k, v); });
      for (size_t i = ex.size(); i-- > 0;) {
        if (compareKeys(ex[i].first, ey[i].first) != 0) return false;
        todo.push_back({ex[i].second, ey[i].second});
      }
    } else if (isObj(x, ObjType::Rev) && isObj(y, ObjType::Rev)) {
      todo.push_back(
          {static_cast<Rev*>(x.asObject())->primal, static_cast<Rev*>(y.asObject())->primal});
    } else if (!eqValues(x, y)) {
      return false;
    }
  }
  return true;
}

// eq? and eqv?: eqValues with numbers compared before bits, as the EQP opcode does
// (which decides them without calling this), so that +nan.0 is never eq? and the
// answer does not depend on the path. equal? keeps eqValues for its leaves.
Value eqP(VM&, Value* a, int) {
  Value x = fwdPrimal(unwrapAttached(a[0])), y = fwdPrimal(unwrapAttached(a[1]));
  if (isNumeric(x) && isNumeric(y))
    return Value::boolean(sameNumber(numericValue(x), numericValue(y)));
  return Value::boolean(eqValues(x, y));
}
Value equalP(VM&, Value* a, int) { return Value::boolean(equalValues(a[0], a[1])); }

// ---- strings -----------------------------------------------------------------

// Integers in radix 2..36; anything else only in radix 10.
Value numberToString(VM& vm, Value* a, int n) {
  double x = num(vm, "number->string", a, 0);
  int radix = 10;
  if (n == 2) {
    double r = num(vm, "number->string", a, 1);
    if (r != std::trunc(r) || r < 2 || r > 36)
      vm.typeError("number->string", 1, "radix between 2 and 36", a[1]);
    radix = static_cast<int>(r);
  }
  if (radix == 10) return vm.makeString(vm.show(Value::numberChecked(x), false));
  if (x != std::trunc(x) || std::fabs(x) >= 9.2e18)
    vm.runtimeError("number->string: only integers can be written in radix " +
                    std::to_string(radix) + ", got " + vm.show(Value::numberChecked(x)));
  char buf[80];
  auto r = std::to_chars(buf, buf + sizeof buf, static_cast<long long>(x), radix);
  return vm.makeString(std::string_view(buf, static_cast<size_t>(r.ptr - buf)));
}

// The characters of the string argument i, or a type error naming `who`.
std::string_view text(VM& vm, const char* who, Value* a, int i) {
  Value s = unwrapAttached(a[i]);
  if (!isString(s)) vm.typeError(who, i, "string", a[i]);
  return asString(s)->view();
}

// (string->number s [radix]): the number s denotes as the reader reads it, or #f.
Value stringToNumber(VM& vm, Value* a, int n) {
  std::string_view s = text(vm, "string->number", a, 0);
  int radix = 10;
  if (n == 2) {
    double r = num(vm, "string->number", a, 1);
    if (r != 2 && r != 8 && r != 10 && r != 16)
      vm.typeError("string->number", 1, "radix 2, 8, 10 or 16", a[1]);
    radix = static_cast<int>(r);
  }
  double x = 0;
  return parseNumber(s, radix, x) ? Value::numberChecked(x) : Value::boolean(false);
}

Value symbolToString(VM& vm, Value* a, int) {
  Value s = unwrapAttached(a[0]);
  if (!isSymbol(s)) vm.typeError("symbol->string", 0, "symbol", a[0]);
  return vm.makeString(asSymbol(s)->name);
}

Value stringToSymbol(VM& vm, Value* a, int) { return vm.symbol(text(vm, "string->symbol", a, 0)); }

Value stringAppend(VM& vm, Value* a, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += text(vm, "string-append", a, i);
  return vm.makeString(s);
}

// (string=? s1 s2 ...), string<? string>? string<=? string>=?: whether every neighbouring
// pair is in that order, comparing bytes, which for UTF-8 is the order of the code
// points (Scheme's lexicographic order on characters).
template <int kWhich>
Value stringCompare(VM& vm, Value* a, int n) {
  static constexpr const char* kNames[] = {"string=?", "string<?", "string>?", "string<=?",
                                           "string>=?"};
  for (int i = 0; i < n; ++i) text(vm, kNames[kWhich], a, i);  // every argument a string
  for (int i = 0; i + 1 < n; ++i) {
    int c = text(vm, kNames[kWhich], a, i).compare(text(vm, kNames[kWhich], a, i + 1));
    bool holds = kWhich == 0   ? c == 0
                 : kWhich == 1 ? c < 0
                 : kWhich == 2 ? c > 0
                 : kWhich == 3 ? c <= 0
                               : c >= 0;
    if (!holds) return Value::boolean(false);
  }
  return Value::boolean(true);
}

// ---- iota --------------------------------------------------------------------

// (iota count [start [step]]): element i is start + i*step (no accumulated rounding).
Value iota(VM& vm, Value* a, int n) {
  double count = num(vm, "iota", a, 0);
  if (!(count >= 0) || count != std::trunc(count) || count > 4294967295.0)
    vm.typeError("iota", 0, "non-negative integer", a[0]);
  double start = n >= 2 ? num(vm, "iota", a, 1) : 0;
  double step = n >= 3 ? num(vm, "iota", a, 2) : 1;
  Value result = Value::nil();
  for (size_t i = static_cast<size_t>(count); i > 0; --i)
    result = vm.cons(numberResult(start + static_cast<double>(i - 1) * step), result);
  return result;
}

}  // namespace

void openListPrimitives(Registrar& r) {
  VM& vm = r.vm;
  r.define(NativeId::Cons, cons);
  defineAccessors(r, std::make_index_sequence<std::size(kAccessors)>());
  r.define(NativeId::List, list);
  r.define(NativeId::Length, length);
  r.define(NativeId::Append, append);
  r.define(NativeId::Reverse, reverse);
  r.define(NativeId::ListRef, listRef);
  r.define(NativeId::ListTail, listTail);
  r.define(NativeId::NullP, nullP);
  r.define(NativeId::PairP, pairP);
  r.define(NativeId::NumberP, numberP);
  r.define(NativeId::BooleanP, booleanP);
  r.define(NativeId::ProcedureP, procedureP);
  r.define(NativeId::StringP, stringP);
  r.define(NativeId::SymbolP, symbolP);
  r.define(NativeId::Not, notP);
  r.define(NativeId::EqP, eqP);
  r.define(NativeId::EqualP, equalP);
  r.define(NativeId::EqvP, eqP);
  r.define(NativeId::ListP, listP);
  r.define(NativeId::NumberToString, numberToString);
  r.define(NativeId::StringAppend, stringAppend);
  vm.defineNative("string->number", stringToNumber, 1, 2);
  vm.defineNative("symbol->string", symbolToString, 1, 1);
  vm.defineNative("string->symbol", stringToSymbol, 1, 1);
  vm.defineNative("string=?", stringCompare<0>, 1, -1);
  vm.defineNative("string<?", stringCompare<1>, 1, -1);
  vm.defineNative("string>?", stringCompare<2>, 1, -1);
  vm.defineNative("string<=?", stringCompare<3>, 1, -1);
  vm.defineNative("string>=?", stringCompare<4>, 1, -1);
  r.define(NativeId::Iota, iota);
}

}  // namespace dlam::prim
