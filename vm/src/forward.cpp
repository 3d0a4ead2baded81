// forward.cpp — forward mode on runtime values: bundles (dual numbers tagged with the
// nesting level of their perturbation), the dual-number arithmetic of the numeric
// primitives, and the cobundles that carry a bundle's sensitivity through a reverse
// pass.
//
// A bundle (object.h, Fwd) of tag e is primal + tangent·ε_e; its parts carry only
// tags below e. A numeric primitive given bundles (VM::callPrimitive) works at the
// highest tag among its arguments: it takes each argument apart at that tag (anything
// else is its own primal with a zero tangent), applies itself to the primals (lower
// tags: the same path again, once per level) and its tangent rule (the compiler's
// table, compiler/src/ad_rules.cpp) to the parts. Tags are handed out in nesting order
// (VM::fwdBegin), and reverse tags (Rev) wrap bundles as they wrap numbers, so forward
// and reverse derivatives nest in any order without confusing their perturbations.
//
// Reverse over forward: the reverse pass of code that makes bundles gives a bundle's
// sensitivity as a cobundle (flag kCoBundle), the linear form (p, t) ↦ P·p + T·t. The
// reverse rules are products of a sensitivity with primal values, so * and / given a
// cobundle and a bundle of its tag apply the transpose of multiplication by the bundle:
// (P, T)·(p + tε) = (P p + T t, T p). A cobundle reaching a value that has no
// perturbation of its tag keeps only its P part (fwdProject): that is all of it that
// such a value receives. Over two forward passes that have ended, a cobundle's parts
// are cobundles of the lower tag, and a part without a tangent stands for one with
// a zero tangent in a product with a bundle of that tag. Under a second reverse pass
// the sensitivity of a cobundle is a bundle of its tag (primitives_ad.cpp).
//
// Structures: a bundle of a pair is the pair of the bundles of its parts, of a closure
// the closure over its bundled environment (made by fwdBundle, walked with explicit
// stacks); a vector is bundled as a whole. Nothing here recurses in C++ along data;
// the recursion through callPrimitive is bounded by the number of nested tags.
#include <string>
#include <unordered_map>
#include <vector>

#include "dlam/vm.h"
#include "forward_arith.h"

namespace dlam {

Fwd* VM::makeFwd(uint32_t tag, Value primal, Value tangent, bool co) {
  auto* f = static_cast<Fwd*>(allocate(ObjType::Fwd, sizeof(Fwd)));
  f->aux = tag;
  f->primal = primal;
  f->tangent = tangent;
  if (co)
    f->flags |= kCoBundle;
  else if (primal.isNumber() && tangent.isNumber())
    f->flags |= kScalarFwd;
  return f;
}

Value VM::arith(NativeId op, Value a, Value b) {
  Value args[2] = {a, b};
  return callPrimitive(builtin(op), args, 2);
}

namespace {

// The tag of a bundle or cobundle, 0 for anything else.
uint32_t tagOf(Value v) { return isFwd(v) ? asFwd(v)->tag() : 0; }

// The error of a cobundle (a sensitivity) used as a number it cannot be.
[[noreturn]] void coMisuse(VM& vm, const char* who) {
  vm.runtimeError(std::string(who) +
                  ": got the sensitivity of a bundle where a number was expected (only + - * / "
                  "apply to sensitivities)");
}

}  // namespace

Value VM::fwdApply(Native* n, Value* args, int nargs) {
  if (n->fwdRule) return fwdRuleApply(n, args, nargs);
  auto id = static_cast<NativeId>(n->id);
  if (nargs == 2) {
    Value r = fwdArith2(id, args[0], args[1]);
    if (!r.isUndefined()) return r;
  }
  // + - * / of more than two: a left fold, the pairs by the rules below.
  if (nargs > 2 &&
      (id == NativeId::Add || id == NativeId::Mul || id == NativeId::Sub || id == NativeId::Div)) {
    Value acc = arith(id, args[0], args[1]);
    for (int i = 2; i < nargs; ++i) acc = arith(id, acc, args[i]);
    return acc;
  }
  uint32_t e = 0;
  bool co = false;
  for (int i = 0; i < nargs; ++i) e = std::max(e, tagOf(args[i]));
  for (int i = 0; i < nargs; ++i)
    if (tagOf(args[i]) == e && asFwd(args[i])->co()) co = true;
  Value p[8], t[8];
  if (nargs > 8) runtimeError(std::string(n->name) + ": too many arguments for a bundle");
  for (int i = 0; i < nargs; ++i) {
    if (tagOf(args[i]) == e) {
      p[i] = asFwd(args[i])->primal;
      t[i] = asFwd(args[i])->tangent;
    } else {
      p[i] = args[i];
      t[i] = Value::zero();
    }
  }
  if (co) {
    // Sensitivities: only the linear operations. a and b are the two operands; which
    // one is the cobundle decides the rule.
    auto isCo = [&](int i) { return tagOf(args[i]) == e && asFwd(args[i])->co(); };
    auto isB = [&](int i) { return tagOf(args[i]) == e && !asFwd(args[i])->co(); };
    auto make = [&](Value P, Value T) {
      if (P.isZero() && T.isZero()) return Value::zero();
      return Value::object(makeFwd(e, P, T, true));
    };
    // A part x of the cobundle times (or over) a part b of a value. The parts of a
    // cobundle are sensitivities of the bundle's parts: where b is a bundle of a lower
    // tag whose forward pass has ended too (reverse over forward over forward), x is
    // the sensitivity of a bundle of that tag, a cobundle, even where it holds no
    // tangent part (a plain number or array, the part a plain sensitivity was added
    // to): it is taken as the cobundle (x, 0), so that the product is one (x b would be
    // a bundle, a perturbation that is not there). A bundle of a tag still in use
    // (forward over reverse over forward) is a perturbation of x and multiplies as one.
    auto coArith = [&](NativeId op, Value x, Value b) {
      if (isFwd(b) && !asFwd(b)->co() && asFwd(b)->tag() > fwdTagInUse() && !x.isZero() &&
          !(isFwd(x) && asFwd(x)->tag() >= asFwd(b)->tag()))
        x = Value::object(makeFwd(asFwd(b)->tag(), x, Value::zero(), true));
      return arith(op, x, b);
    };
    if (nargs == 1 && id == NativeId::Sub)
      return make(callPrimitive(n, p, 1), callPrimitive(n, t, 1));
    // abs of a sensitivity, part by part: what a convergence test on sensitivities
    // (fixed-point*'s adjoint iteration) measures.
    if (nargs == 1 && id == NativeId::Abs)
      return make(callPrimitive(n, p, 1), callPrimitive(n, t, 1));
    if (n->fwdCoLinear) return fwdCoLinearParts(n, args, nargs, e);
    // %sens-back: linear in the first argument, part by part; the others give shapes
    // (through the parts of bundles and cobundles) and whether the operand is zero.
    // (A cobundle as the operand is a sensitivity with a part, not the zero: 1 stands
    // for it; a cobundle as a like gives its parts' shape.)
    if (id == NativeId::SensBack) {
      std::vector<Value> pl(args, args + nargs);
      for (int i = 1; i < nargs; ++i)
        pl[i] = !isCo(i) ? (tagOf(args[i]) == e ? p[i] : args[i])
                : i == 1 ? Value::number(1)
                         : fwdLeaf(args[i]);
      if (!isCo(0)) return callPrimitive(n, pl.data(), nargs);
      std::vector<Value> tl = pl;
      pl[0] = p[0];
      tl[0] = t[0];
      return make(callPrimitive(n, pl.data(), nargs), callPrimitive(n, tl.data(), nargs));
    }
    if (nargs == 1 || nargs > 2) coMisuse(*this, n->name);
    // The shape operations of array sensitivities (%sum-to, %broadcast-to, %unreduce):
    // linear in the first argument, part by part; the second only gives a shape.
    // (A cobundle as the second is a sensitivity too, whose parts have its shape.)
    if (id == NativeId::SumTo || id == NativeId::BroadcastTo || id == NativeId::Unreduce) {
      Value like = dlam::fwdPrimal(!isCo(1) ? args[1] : p[1].isZero() ? t[1] : p[1]);
      if (!isCo(0)) {
        Value xl[2] = {args[0], like};
        return callPrimitive(n, xl, 2);
      }
      Value pl[2] = {p[0], like}, tl[2] = {t[0], like};
      return make(callPrimitive(n, pl, 2), callPrimitive(n, tl, 2));
    }
    switch (id) {
      case NativeId::Add:
      case NativeId::SensAdd:
      case NativeId::Sub:
      case NativeId::SensSub:
        if (isCo(0) && isCo(1)) return make(arith(id, p[0], p[1]), arith(id, t[0], t[1]));
        // A cobundle and a plain sensitivity: the plain one has no tangent part (its
        // uses saw no perturbation of this tag), so it adds to the primal part. (Dropping
        // the tangent part instead lost the tangent's sensitivity when a bundle was
        // passed through a recursive call: tests/lang/ad/forward/reverse_over_loops.dlam.)
        {
          Value P = arith(id, isCo(0) ? p[0] : args[0], isCo(1) ? p[1] : args[1]);
          // The tangent part is the cobundle's, negated where it is subtracted. (A
          // symbolic zero stays one: 0 - Z made it the number 0, which is not the shape
          // of an array's; and %sens- from the number 0 summed an array to a number,
          // the sensitivity of a number, where it was an array's.)
          bool minus = !isCo(0) && (id == NativeId::Sub || id == NativeId::SensSub);
          Value T = t[isCo(0) ? 0 : 1];
          if (minus && !T.isZero()) T = callPrimitive(builtin(NativeId::Sub), &T, 1);
          return make(P, T);
        }
      case NativeId::Mul: {
        int c = isCo(0) ? 0 : 1, o = 1 - c;
        if (isCo(o)) coMisuse(*this, n->name);
        // The transpose of multiplying by the bundle. The primal part's two terms are
        // sensitivities of one value, added as such (%sens+): one may carry the axes of
        // a broadcast the other does not (the sensitivity of a number used beside its
        // product with a vector), which + would count the other once per element of.
        if (isB(o))
          return make(arith(NativeId::SensAdd, coArith(NativeId::Mul, p[c], p[o]),
                            coArith(NativeId::Mul, t[c], t[o])),
                      coArith(NativeId::Mul, t[c], p[o]));
        return make(coArith(NativeId::Mul, p[c], args[o]), coArith(NativeId::Mul, t[c], args[o]));
      }
      case NativeId::Div: {
        if (!isCo(0) || isCo(1)) coMisuse(*this, n->name);
        if (isB(1))
          return arith(NativeId::Mul, args[0], arith(NativeId::Div, Value::number(1), args[1]));
        return make(coArith(NativeId::Div, p[0], args[1]), coArith(NativeId::Div, t[0], args[1]));
      }
      case NativeId::NumEq:
      case NativeId::Lt:
      case NativeId::Gt:
      case NativeId::Le:
      case NativeId::Ge: {
        // A comparison of sensitivities (a convergence test) holds when it holds of
        // both parts (a part that is the symbolic zero compares as 0).
        auto part = [&](int i, bool tangent) {
          Value v = isCo(i) ? (tangent ? t[i] : p[i]) : args[i];
          return v.isZero() ? Value::number(0) : v;
        };
        Value q[2] = {part(0, false), part(1, false)};
        Value r[2] = {part(0, true), part(1, true)};
        return Value::boolean(callPrimitive(n, q, 2).isTruthy() &&
                              callPrimitive(n, r, 2).isTruthy());
      }
      default:
        coMisuse(*this, n->name);
    }
  }
  Value y = callPrimitive(n, p, nargs);
  if (!tangentRule) runtimeError("forward mode: no tangent rules are installed in this VM");
  Value ydot = tangentRule(*this, id, p, t, nargs, y);
  if (ydot.isZero() || ydot.isUndefined()) return y;  // comparisons, rounding: no tangent
  return Value::object(makeFwd(e, y, ydot));
}

namespace {

// The highest tag of a bundle in v (in its pairs too when deep), and whether one of
// that tag is a cobundle. Iterative.
uint32_t highestTag(Value v, bool deep, bool& co) {
  uint32_t e = 0;
  co = false;
  std::vector<Value> work{v};
  while (!work.empty()) {
    Value x = work.back();
    work.pop_back();
    if (isFwd(x)) {
      uint32_t t = asFwd(x)->tag();
      if (t > e) co = false;
      if (t >= e) co = co || asFwd(x)->co();
      e = std::max(e, t);
    } else if (deep && isPair(x)) {
      work.push_back(asPair(x)->cdr);
      work.push_back(asPair(x)->car);
    }
  }
  return e;
}

}  // namespace

bool bundleInList(Value v) {
  std::vector<Value> work{v};
  while (!work.empty()) {
    Value x = work.back();
    work.pop_back();
    while (isPair(x)) {
      Value car = asPair(x)->car;
      if (isFwd(car) && !asFwd(car)->co()) return true;
      if (isPair(car)) work.push_back(car);
      x = asPair(x)->cdr;
    }
    if (isFwd(x) && !asFwd(x)->co()) return true;
  }
  return false;
}

namespace {
// A bundle, or a list holding one.
bool carriesBundle(Value x) {
  return (isFwd(x) && !asFwd(x)->co()) || (isPair(x) && bundleInList(x));
}
bool envCarriesBundle(Value f) {
  if (!isClosure(f)) return false;
  auto* c = asClosure(f);
  for (uint32_t i = 0; i < c->count(); ++i)
    if (carriesBundle(c->upvals[i])) return true;
  return false;
}
}  // namespace

bool attachedTransposesSlow(Value fn, const Value* args, int nargs) {
  auto* a = static_cast<const Attached*>(fn.asObject());
  for (int i = 0; i < nargs; ++i)
    if (carriesBundle(args[i])) return true;
  return envCarriesBundle(a->primal) || envCarriesBundle(a->rep);
}

// Each argument taken apart at the highest tag among them (fwdPrimal, fwdTangent walk
// lists), the native applied to the primals (through callPrimitive: lower tags are
// taken apart in turn), and the tangent its rule gives bundled with the result
// (structurally: a list's elements each).
// A native linear in the arguments its fwdCoLinear bits name, given a cobundle of tag e
// among them: each part through the native; a linear argument that is no cobundle of e
// gives its all to the primal part (as + does with one), unless the native is linear in
// each apart (fwdCoEach), the others their primal at e.
Value VM::fwdCoLinearParts(Native* n, Value* args, int nargs, uint32_t e) {
  Value pp[8], tp[8];
  for (int i = 0; i < nargs; ++i) {
    Value a = args[i];
    bool c = isFwd(a) && asFwd(a)->tag() == e && asFwd(a)->co();
    if (((n->fwdCoLinear >> i) & 1u) && (c || !n->fwdCoEach)) {
      pp[i] = c ? asFwd(a)->primal : a;
      tp[i] = c ? asFwd(a)->tangent : Value::zero();
    } else {
      pp[i] = tp[i] = highestTag(a, n->fwdDeep, c) == e ? fwdPrimal(e, a) : a;
    }
  }
  // (Linear in each apart, the part of a product with a zero factor is zero.)
  auto part = [&](Value* xs) {
    if (n->fwdCoEach)
      for (int i = 0; i < nargs; ++i)
        if (((n->fwdCoLinear >> i) & 1u) && xs[i].isZero()) return Value::zero();
    return callPrimitive(n, xs, nargs);
  };
  Value P = part(pp), T = part(tp);
  if (P.isZero() && T.isZero()) return Value::zero();
  if (!isPair(P) && !isPair(T)) return Value::object(makeFwd(e, P, T, true));
  // Parts that are lists (vector->list of a cobundle): a list of cobundles, element by
  // element, as a list's sensitivity is (a zero part gives zeros).
  std::vector<Value> items;
  for (Value p = P, t = T; isPair(p) || isPair(t);) {
    Value pi = isPair(p) ? asPair(p)->car : Value::zero();
    Value ti = isPair(t) ? asPair(t)->car : Value::zero();
    items.push_back(pi.isZero() && ti.isZero() ? Value::zero()
                                               : Value::object(makeFwd(e, pi, ti, true)));
    p = isPair(p) ? asPair(p)->cdr : p;
    t = isPair(t) ? asPair(t)->cdr : t;
  }
  return list(items.data(), items.size());
}

Value VM::fwdRuleApply(Native* n, Value* args, int nargs) {
  uint32_t e = 0, tags[8];
  bool co = false;
  if (nargs > 8) runtimeError(std::string(n->name) + ": too many arguments for a bundle");
  for (int i = 0; i < nargs; ++i) {
    bool c;
    tags[i] = highestTag(args[i], n->fwdDeep, c);
    if (tags[i] > e) co = false;
    if (tags[i] >= e) co = co || c;
    e = std::max(e, tags[i]);
  }
  if (e == 0) return n->fn(*this, args, nargs);
  if (co) {
    if (!n->fwdCoLinear) coMisuse(*this, n->name);
    return fwdCoLinearParts(n, args, nargs, e);
  }
  Value p[8], t[8];
  for (int i = 0; i < nargs; ++i) {
    p[i] = tags[i] == e ? fwdPrimal(e, args[i]) : args[i];
    t[i] = tags[i] == e ? fwdTangent(e, args[i]) : Value::zero();
  }
  Value y = callPrimitive(n, p, nargs);
  Value ydot = n->fwdRule ? n->fwdRule(*this, n, p, t, nargs, y) : Value::undefined();
  if (ydot.isUndefined() || ydot.isZero()) return y;
  return fwdBundle(e, y, ydot);
}

namespace {

// One step of a structural walk: pairs and closures are taken apart, everything else
// is a leaf given to `leaf`. Iterative; the results are rebuilt bottom-up.
template <class Leaf>
Value mapStructure(VM& vm, Value root, Leaf leaf) {
  struct Item {
    Value v;
    bool expanded;
  };
  std::vector<Item> work{{root, false}};
  std::vector<Value> results;
  while (!work.empty()) {
    Item it = work.back();
    work.pop_back();
    if (!it.expanded) {
      if (isPair(it.v)) {
        work.push_back({it.v, true});
        work.push_back({asPair(it.v)->cdr, false});
        work.push_back({asPair(it.v)->car, false});
      } else {
        results.push_back(leaf(it.v));
      }
      continue;
    }
    Value cdr = results.back();
    results.pop_back();
    Value car = results.back();
    results.pop_back();
    results.push_back(vm.cons(car, cdr));
  }
  return results.back();
}

// The tangent of a value with no perturbation that is not a number: a discrete value
// ((), booleans, strings, symbols, characters) is its own, as its sensitivity is.
Value discreteTangent(VM& vm, Value x) {
  if (!x.isObject() || isObj(x, ObjType::String) || isObj(x, ObjType::Symbol)) return x;
  return vm.zeroOf(x);
}

}  // namespace

Value VM::attachedForward() {
  Value f = libraryValue("%attached-forward");
  if (!isClosure(f)) runtimeError("forward mode: the library's %attached-forward is not loaded");
  return f;
}

namespace {
// Whether the list structure v holds a bundle of the tag (walking cars and cdrs).
bool listHasTag(uint32_t tag, Value v) {
  std::vector<Value> work{v};
  while (!work.empty()) {
    Value x = work.back();
    work.pop_back();
    for (; isPair(x); x = asPair(x)->cdr) {
      Value car = asPair(x)->car;
      if (tagOf(car) == tag) return true;
      if (isPair(car)) work.push_back(car);
    }
    if (tagOf(x) == tag) return true;
  }
  return false;
}
// The procedures an environment reaches: closures, and attach-*j values (primal, rep).
bool envNode(Value v) {
  return isClosure(v) || (isObj(v, ObjType::Attached) && (v.asObject()->flags & kUserRep));
}
template <typename F>
void forEachEnvSlot(Obj* o, F&& f) {
  if (o->type == ObjType::Closure) {
    auto* c = static_cast<Closure*>(o);
    for (uint32_t i = 0; i < c->count(); ++i) f(c->upvals[i]);
  } else {
    auto* a = static_cast<Attached*>(o);
    f(a->primal);
    f(a->rep);
  }
}
}  // namespace

// A closure or attach-*j value without the tag in its environment, and in those of the
// procedures it reaches through it (a rep's forward function capturing a bundle):
// the graph of procedures (cycles among letrec closures included) is walked with a
// work list, the procedures that reach a bundle of the tag copied, and the copies
// linked to each other.
Value VM::fwdPrimalProcedure(uint32_t tag, Value root) {
  std::unordered_map<Obj*, size_t> index;
  std::vector<Obj*> nodes;
  std::vector<Obj*> work{root.asObject()};
  index.emplace(root.asObject(), 0);
  nodes.push_back(root.asObject());
  std::vector<bool> direct;
  std::vector<std::vector<size_t>> edges;
  for (size_t n = 0; n < nodes.size(); ++n) {
    bool d = false;
    std::vector<size_t> out;
    forEachEnvSlot(nodes[n], [&](Value x) {
      if (tagOf(x) == tag || (isPair(x) && listHasTag(tag, x))) d = true;
      if (envNode(x)) {
        auto [it, fresh] = index.emplace(x.asObject(), nodes.size());
        if (fresh) nodes.push_back(x.asObject());
        out.push_back(it->second);
      }
    });
    direct.push_back(d);
    edges.push_back(std::move(out));
  }
  // needs: reaches a bundle of the tag (a fixed point over the graph, cycles included)
  std::vector<bool> needs = direct;
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t n = 0; n < nodes.size(); ++n)
      if (!needs[n])
        for (size_t m : edges[n])
          if (needs[m]) {
            needs[n] = true;
            changed = true;
            break;
          }
  }
  if (!needs[0]) return root;
  std::vector<Obj*> copy(nodes.size(), nullptr);
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (!needs[n]) continue;
    if (nodes[n]->type == ObjType::Closure) {
      auto* c = static_cast<Closure*>(nodes[n]);
      Closure* r = makeClosure(c->proto, c->count());
      for (uint32_t i = 0; i < c->count(); ++i) r->upvals[i] = Value::nil();
      copy[n] = r;
    } else {
      Attached* r = makeAttached(Value::nil(), Value::nil());
      r->flags |= kUserRep;
      copy[n] = r;
    }
  }
  auto mapped = [&](Value x) -> Value {
    if (tagOf(x) == tag) return asFwd(x)->primal;
    if (envNode(x)) {
      size_t m = index.at(x.asObject());
      return needs[m] ? Value::object(copy[m]) : x;
    }
    if (isPair(x) && listHasTag(tag, x))
      return mapStructure(*this, x,
                          [&](Value y) { return tagOf(y) == tag ? asFwd(y)->primal : y; });
    return x;
  };
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (!needs[n]) continue;
    if (nodes[n]->type == ObjType::Closure) {
      auto* c = static_cast<Closure*>(nodes[n]);
      auto* r = static_cast<Closure*>(copy[n]);
      for (uint32_t i = 0; i < c->count(); ++i) r->upvals[i] = mapped(c->upvals[i]);
    } else {
      auto* a = static_cast<Attached*>(nodes[n]);
      auto* r = static_cast<Attached*>(copy[n]);
      r->primal = mapped(a->primal);
      r->rep = mapped(a->rep);
    }
  }
  return Value::object(copy[0]);
}

Value VM::fwdPrimal(uint32_t tag, Value v) {
  if (tagOf(v) == tag) return asFwd(v)->primal;
  if (!isPair(v)) return envNode(v) ? fwdPrimalProcedure(tag, v) : v;
  return mapStructure(*this, v, [&](Value x) { return tagOf(x) == tag ? asFwd(x)->primal : x; });
}

Value VM::fwdTangent(uint32_t tag, Value v) {
  // The tangent of a number or array with no perturbation of the tag (a bundle of
  // another tag, a reverse-tagged value): 0, or the zero array of its shape, as for an
  // array that is not tagged at all.
  auto untangled = [&](Value x) {
    while (isFwd(x) || isObj(x, ObjType::Rev))
      x = isFwd(x) ? asFwd(x)->primal : static_cast<Rev*>(x.asObject())->primal;
    return isObj(x, ObjType::Vector) ? discreteTangent(*this, x) : Value::number(0);
  };
  if (tagOf(v) == tag) return asFwd(v)->tangent;
  if (v.isNumber()) return Value::number(0);
  if (isFwd(v) || isObj(v, ObjType::Rev)) return untangled(v);
  if (!isPair(v)) {
    if (isClosure(v)) {
      // A closure's tangent: its environment's, in free-variable order.
      auto* c = asClosure(v);
      Value l = Value::nil();
      for (uint32_t i = c->count(); i-- > 0;) l = cons(fwdTangent(tag, c->upvals[i]), l);
      return l;
    }
    return discreteTangent(*this, v);
  }
  return mapStructure(*this, v, [&](Value x) {
    if (tagOf(x) == tag) return asFwd(x)->tangent;
    if (x.isNumber()) return Value::number(0);
    if (isFwd(x) || isObj(x, ObjType::Rev)) return untangled(x);
    return discreteTangent(*this, x);
  });
}

Value VM::fwdBundle(uint32_t tag, Value x, Value t) {
  auto shapeError = [&](Value d, Value p) {
    runtimeError("bundle: the tangent " + show(d, true) + " does not have the shape of " +
                 show(p, true));
  };
  auto leaf = [&](Value p, Value d) -> Value {
    if (d.isZero()) return p;
    if (p.isNumber() || isFwd(p) || isObj(p, ObjType::Vector)) {
      if (!(d.isNumber() || isFwd(d) || isObj(d, ObjType::Vector))) shapeError(d, p);
      return Value::object(makeFwd(tag, p, d));
    }
    if (isClosure(p)) {
      auto* c = asClosure(p);
      Closure* r = makeClosure(c->proto, c->count());
      Value l = d;
      for (uint32_t i = 0; i < c->count(); ++i) {
        Value di = isPair(l) ? asPair(l)->car : Value::zero();
        if (isPair(l)) l = asPair(l)->cdr;
        r->upvals[i] = fwdBundle(tag, c->upvals[i], di);
      }
      return Value::object(r);
    }
    // The end of a list: a tangent list that goes on past it has not its shape.
    if (p.isNil() && !d.isNil()) shapeError(d, p);
    return p;  // (), booleans, strings, symbols: their own bundle
  };
  if (!isPair(x)) return leaf(x, t);
  // A list of leaves (a point given as a list of reals, the common case): along its
  // spine, the list rebuilt from its end. A list with a pair among its elements takes
  // the general walk below. (Nothing here collects: allocation only requests it.)
  {
    std::vector<Value> leaves;
    Value xi = x, ti = t;
    bool flat = true;
    while (isPair(xi)) {
      Value xc = asPair(xi)->car;
      if (isPair(xc)) {
        flat = false;
        break;
      }
      if (!ti.isZero() && !isPair(ti)) shapeError(t, x);
      leaves.push_back(leaf(xc, ti.isZero() ? ti : asPair(ti)->car));
      if (!ti.isZero()) ti = asPair(ti)->cdr;
      xi = asPair(xi)->cdr;
    }
    if (flat && xi.isNil() && isPair(ti)) shapeError(t, x);
    if (flat) {
      Value r = leaf(xi, ti);
      for (size_t i = leaves.size(); i-- > 0;) r = cons(leaves[i], r);
      return r;
    }
  }
  // Walk x and t together (t may end in the symbolic zero: zeros from there on).
  struct Item {
    Value x, t;
    bool expanded;
  };
  std::vector<Item> work{{x, t, false}};
  std::vector<Value> results;
  while (!work.empty()) {
    Item it = work.back();
    work.pop_back();
    if (!it.expanded) {
      if (isPair(it.x)) {
        if (!it.t.isZero() && !isPair(it.t)) shapeError(it.t, it.x);
        Value tc = it.t.isZero() ? it.t : asPair(it.t)->car;
        Value td = it.t.isZero() ? it.t : asPair(it.t)->cdr;
        work.push_back({it.x, it.t, true});
        work.push_back({asPair(it.x)->cdr, td, false});
        work.push_back({asPair(it.x)->car, tc, false});
      } else {
        results.push_back(leaf(it.x, it.t));
      }
      continue;
    }
    Value cdr = results.back();
    results.pop_back();
    Value car = results.back();
    results.pop_back();
    results.push_back(cons(car, cdr));
  }
  return results.back();
}

Value VM::fwdProject(Value g, Value v) {
  // Each level: a cobundle of a tag v's top does not have keeps its primal part; of
  // v's own tag, its parts are projected on v's parts (bounded by the nesting). So does
  // a bundle of a tag whose forward pass has ended, the sensitivity of a cobundle
  // (reverse over reverse over forward, primitives_ad.cpp): of v's tag where v is a
  // cobundle. (A bundle of a tag in use is a perturbation, forward over reverse: kept.)
  // Where v's top tag is above g's, g has none of it: it stands for g at v's primal
  // part (its part at v's tangent is 0), so it is projected on that. (Taken as having
  // nothing of v, it kept only its primal part, and reverse twice over three nested
  // forward passes lost the sensitivity of the outermost pass's tangent.)
  while (isFwd(g) && (asFwd(g)->co() || asFwd(g)->tag() > fwdTagInUse())) {
    while (isObj(v, ObjType::Rev)) v = static_cast<Rev*>(v.asObject())->primal;
    Fwd* c = asFwd(g);
    if (isFwd(v) && asFwd(v)->tag() > c->tag()) {
      v = asFwd(v)->primal;
      continue;
    }
    if (tagOf(v) == c->tag() && asFwd(v)->co() != c->co()) {
      Value P = fwdProject(c->primal, asFwd(v)->primal);
      Value T = fwdProject(c->tangent, asFwd(v)->tangent);
      if (P == c->primal && T == c->tangent) return g;
      return Value::object(makeFwd(c->tag(), P, T, c->co()));
    }
    g = c->primal;
  }
  return g;
}

}  // namespace dlam
