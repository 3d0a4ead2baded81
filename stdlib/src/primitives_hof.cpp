// primitives_hof.cpp — native fast paths for the primal of map and fold-left.
//
// The prelude defines map and fold-left in dlam (so *j can transform them) and
// attaches constant-stack derivatives to them; the procedures it attaches them to
// are these natives, which loop in C++ and call the mapped procedure directly
// (a primitive) or through VM::call (a closure). When natives are already nested
// (callDepth), or for more than two lists, they hand the call to the dlam definition
// with vm.tailCall, so deep user recursion through map never recurses in C++.
// %check-lists lets prelude procedures that hand lists on check them under their
// own name.
#include <string>
#include <vector>

#include "primitives.h"

namespace dlam::prim {

namespace {

bool callableDirectly(Value f) {
  if (!isNative(f)) return false;
  Native* n = asNative(f);
  return n->kind == 0 && n->fn && n->id != static_cast<uint16_t>(NativeId::Apply);
}

// f's native when f is a primitive called directly (callableDirectly) that takes k
// arguments, else null: the loops below test f once and call such a primitive without
// applyProcedure's tests per element.
Native* directPrimitive(Value f, int k) {
  return callableDirectly(f) && asNative(f)->takes(k) ? asNative(f) : nullptr;
}

// (f x ...) for each element: through direct (directPrimitive(f, nargs)) or else
// applyProcedure, as applyProcedure would.
inline Value applyEach(VM& vm, Native* direct, Value f, Value* args, int nargs) {
  if (direct) {
    vm.callingNative = direct;
    Value r = vm.callPrimitive(direct, args, nargs);
    if (!r.isTailCall()) return r;
    return vm.call(f, args, nargs);
  }
  return applyProcedure(vm, f, args, nargs);
}

// (map f l1 l2): side by side up to the shorter list, as the dlam definition
// (%mapn) goes: at each step the first list that has run out ends the map, and one
// that is neither a pair nor empty is the error.
Value map2(VM& vm, Value* a) {
  VM::Root f(vm, a[0]), l1(vm, a[1]), l2(vm, a[2]), head(vm, Value::nil());
  Native* direct = directPrimitive(a[0], 2);
  Value tail = Value::nil();
  for (;;) {
    bool done = false;
    for (Value l : {l1.get(), l2.get()}) {
      if (l.isNil()) {
        done = true;
        break;
      }
      if (!isPair(l)) vm.runtimeError("map: expected a list, got " + vm.show(l, true));
    }
    if (done) break;
    Value xs[2] = {asPair(l1.get())->car, asPair(l2.get())->car};
    Value y = applyEach(vm, direct, f.get(), xs, 2);
    Value cell = vm.cons(y, Value::nil());
    if (tail.isNil()) {
      head.set(cell);
    } else {
      asPair(tail)->cdr = cell;
      vm.writeBarrier(tail.asObject(), cell);
    }
    tail = cell;
    l1.set(asPair(l1.get())->cdr);
    l2.set(asPair(l2.get())->cdr);
  }
  return head.get();
}

// (map f l): builds the result front to back (the cells are new, so setting the
// cdr of the last one is invisible to the program).
Value mapNative(VM& vm, Value* a, int n) {
  if (n == 2 && nestedTooDeep(vm)) return handOver(vm, "%map-plain1", a, n);
  if (n > 3 || nestedTooDeep(vm)) return handOver(vm, "%map-plain", a, n);
  if (n == 3) return map2(vm, a);
  VM::Root f(vm, a[0]), l(vm, a[1]), head(vm, Value::nil());
  Native* direct = directPrimitive(a[0], 1);
  Value tail = Value::nil();
  while (isPair(l.get())) {
    Value x = asPair(l.get())->car;
    Value y = applyEach(vm, direct, f.get(), &x, 1);
    Value cell = vm.cons(y, Value::nil());
    if (tail.isNil()) {
      head.set(cell);
    } else {
      // The last cell may have become old in a collection during applyProcedure.
      asPair(tail)->cdr = cell;
      vm.writeBarrier(tail.asObject(), cell);
    }
    tail = cell;
    l.set(asPair(l.get())->cdr);
  }
  if (!l.get().isNil()) vm.runtimeError("map: expected a list, got " + vm.show(a[1], true));
  return head.get();
}

// (fold-left f init l) = (f (... (f init x1) ...) xn)
// (fold-left + acc l), or * or -, over numbers: the arithmetic in the loop, no call per
// element (what `(fold-left + 0 (map f l))` does at every node of a tree walk). Gives
// up at the first element that is not a number, with the sum so far in a[1] and the
// rest in `rest` (left as it is when f is not one of them); true when the whole list
// was numbers.
bool foldNumbers(Value* a, Value& rest) {
  Native* d = directPrimitive(a[0], 2);
  if (!d || !a[1].isNumber()) return false;
  auto id = static_cast<NativeId>(d->id);
  if (id != NativeId::Add && id != NativeId::Mul && id != NativeId::Sub) return false;
  double acc = a[1].asNumber();
  Value l = a[2];
  for (; isPair(l) && asPair(l)->car.isNumber(); l = asPair(l)->cdr) {
    double x = asPair(l)->car.asNumber();
    acc = numberResult(id == NativeId::Add   ? acc + x
                       : id == NativeId::Mul ? acc * x
                                             : acc - x)
              .asNumber();
  }
  a[1] = Value::number(acc);
  rest = l;
  return l.isNil();
}

Value foldLeftNative(VM& vm, Value* a, int n) {
  Value whole = n == 3 ? a[2] : Value::nil();
  if (n == 3) {
    Value rest = a[2];
    if (foldNumbers(a, rest)) return a[1];
    a[2] = rest;
  }
  if (n == 3 && nestedTooDeep(vm)) return handOver(vm, "%fold-left-plain1", a, n);
  if (n != 3) return handOver(vm, "%fold-left-plain", a, n);
  VM::Root f(vm, a[0]), acc(vm, a[1]), l(vm, a[2]);
  Native* direct = directPrimitive(a[0], 2);
  while (isPair(l.get())) {
    Value args[2] = {acc.get(), asPair(l.get())->car};
    acc.set(applyEach(vm, direct, f.get(), args, 2));
    l.set(asPair(l.get())->cdr);
  }
  if (!l.get().isNil()) vm.runtimeError("fold-left: expected a list, got " + vm.show(whole, true));
  return acc.get();
}

// (%check-lists who ls): #t when each of the lists ls is a list as far as a procedure
// over them goes: one list to its end, several side by side up to the shortest (as
// %any-null? in the prelude; pairs are immutable, so every list ends). Else the error
// naming `who`: a prelude procedure that hands its lists to reverse, map or fold-left
// checks them first, else their error would name those. It shows the whole list when
// there is one, else the tail that is not a list (as %any-null?).
Value checkLists(VM& vm, Value* a, int) {
  std::string who(stringArg(vm, "%check-lists", a, 0));
  std::vector<Value> ls;
  Value r = unwrapAttached(a[1]);
  for (; isPair(r); r = unwrapAttached(asPair(r)->cdr))
    ls.push_back(unwrapAttached(asPair(r)->car));
  if (!r.isNil()) vm.typeError("%check-lists", 1, "list", a[1]);
  if (ls.empty()) return Value::boolean(true);
  for (;;) {
    for (Value& l : ls) {
      if (l.isNil()) return Value::boolean(true);
      if (!isPair(l))
        vm.runtimeError(who + ": expected a list, got " +
                        vm.show(ls.size() == 1 ? asPair(unwrapAttached(a[1]))->car : l, true));
    }
    for (Value& l : ls) l = unwrapAttached(asPair(l)->cdr);
  }
}

}  // namespace

// (f x ...) from C++: a primitive directly, anything else through the VM.
Value applyProcedure(VM& vm, Value f, Value* args, int nargs) {
  if (callableDirectly(f)) {
    Native* n = asNative(f);
    if (nargs < n->minArgs || (n->maxArgs >= 0 && nargs > n->maxArgs))
      vm.runtimeError(std::string(n->name) + ": wrong number of arguments (" +
                      std::to_string(nargs) + ")");
    vm.callingNative = n;
    Value r = vm.callPrimitive(n, args, nargs);
    if (!r.isTailCall()) return r;
  }
  return vm.call(f, args, nargs);
}

void openHofPrimitives(Registrar& r) {
  VM& vm = r.vm;
  // The prelude attaches their derivatives and binds them to map and fold-left.
  r.wrapped("%map-native", "map", mapNative, 2, -1);
  r.wrapped("%fold-left-native", "fold-left", foldLeftNative, 3, -1);
  vm.defineNative("%check-lists", checkLists, 2, 2);
}

}  // namespace dlam::prim
