// primitives_ad.cpp — the differentiation primitives: *j, *j-inverse, zero, plus,
// free-variables, and the %-helpers that transformed code and the prelude use
// (symbolic-zero-aware car/cdr, sign and step for derivative rules, materialising
// symbolic zeros into the shape of a value).
#include <algorithm>
#include <vector>

#include "dlam/aggregate.h"
#include "dlam/compiler.h"
#include "dlam/dict.h"
#include "primitives.h"

namespace dlam::prim {

namespace {

Value starJ(VM& vm, Value* a, int) { return vm.starJ(a[0]); }
Value starJInverse(VM& vm, Value* a, int) { return vm.starJInverse(a[0]); }
Value starJConstant(VM& vm, Value* a, int) { return vm.starJConstant(a[0]); }
// (%wanted? x): whether the sensitivity of x, an argument's image in a rep (prelude.dlam,
// %vjp-rep-dual), is wanted: #f for the image of a constant (VM::starJConstant).
// Only when the rep runs as plain code: a rep transformed again (a derivative taken
// inside differentiated code) sees its arguments through the outer transform, whose
// liftings take off the outermost tag, which need not be the one the constant mark is
// on (reverse tags do not say their level). There every sensitivity is wanted: taking
// the mark of an outer constant for the inner argument's dropped (d/dt (dot t t)) at a
// global t: 0 instead of 2t).
Value wantedP(VM& vm, Value* a, int) {
  return Value::boolean(vm.runningAdLevel() > 0 || !VM::isConstantImage(a[0]));
}
Value zero(VM& vm, Value* a, int) { return vm.zeroOf(a[0]); }
Value plus(VM& vm, Value* a, int) { return vm.plusChecked(a[0], a[1]); }

// (%sens+ a b): two sensitivities of one value, added as plus adds them (ad_rules.cpp:
// one that carries a broadcast's axes is first summed to the shape both have), which
// the reverse transform emits where it adds the sensitivities of an arithmetic result
// (Sens::merge). Numbers are added in place, as by the ADDS opcode's fast path.
Value sensAdd(VM& vm, Value* a, int) {
  if (a[0].isNumber() && a[1].isNumber()) return Value::number(a[0].asNumber() + a[1].asNumber());
  return vm.plus(a[0], a[1]);
}

// (%sens- a b): a plus the negation of b, likewise (the simplifier's form of a %sens+
// of a negation, ad_simplify.cpp).
Value sensSub(VM& vm, Value* a, int) {
  if (a[0].isNumber() && a[1].isNumber()) return Value::number(a[0].asNumber() - a[1].asNumber());
  if (a[1].isZero()) return a[0];
  Value nb = a[1];
  nb = vm.callPrimitive(vm.builtin(NativeId::Sub), &nb, 1);
  return vm.plus(a[0], nb);
}

Value attach(VM& vm, Value* a, int) { return Value::object(vm.attachRep(a[0], a[1])); }

// (%attached-image ṽ r̃): what transformed code computes for (attach-*j v rep), whose *j
// is rep (Estep): (*j-inverse r̃). The rep is also given (attach-*j v rep) as its
// *j-inverse, as attach-*j does, unless it has one, so that a value made by
// differentiated code can be undone (a custom-vjp captured by another one's rule).
// Under a further *j (the attach-*j made by code differentiated twice or more), rep is
// itself the image of the rep one level down, a transformed closure whose *j-inverse
// (made on demand) has no inverse of its own yet: each level down gets the attachment of
// the value's inverse at that level, until one has its inverse. (Without this a
// custom-vjp made inside a function differentiated twice, and reached again through a
// letrec by its own rule, could not be undone: "not a reverse-transformed procedure".)
Value attachedImage(VM& vm, Value* a, int) {
  Value rep = vm.starJInverse(a[1]);
  Value r = rep, v = a[0];
  for (;;) {
    if (!vm.hasInverse(r)) {
      vm.makeAttached(vm.starJInverse(v), r);
      break;
    }
    if (!isClosure(r) || !asClosure(r)->proto->primal) break;  // its inverse is set
    r = vm.starJInverse(r);
    if (!isClosure(r)) break;  // (a remembered attachment: done)
    v = vm.starJInverse(v);
  }
  return rep;
}

// Asks for a collection at the next safe point (the next call): natives run
// between safe points and cannot collect themselves.
Value collectGarbage(VM& vm, Value*, int) {
  vm.requestCollection();
  return Value::voidValue();
}

// Where the library's gradient functions start and end (VM::gradientBoundary).
Value gradientStart(VM& vm, Value*, int) {
  vm.gradientBoundary(false);
  return Value::voidValue();
}
Value gradientEnd(VM& vm, Value*, int) {
  vm.gradientBoundary(true);
  return Value::voidValue();
}

Value szeroP(VM&, Value* a, int) { return Value::boolean(a[0].isZero()); }

// (%symbolic-zero): the zero of any shape that transformed code and the library use
// (the prelude's %Z); user code gets shaped zeros from zero.
Value symbolicZero(VM&, Value*, int) { return Value::zero(); }

// car and cdr of a sensitivity, where the symbolic zero stands for a pair of zeros.
Value scar(VM& vm, Value* a, int) {
  if (a[0].isZero()) return a[0];
  if (!isPair(a[0])) vm.sensitivityPartError(a[0]);
  return asPair(a[0])->car;
}
Value scdr(VM& vm, Value* a, int) {
  if (a[0].isZero()) return a[0];
  if (!isPair(a[0])) vm.sensitivityPartError(a[0]);
  return asPair(a[0])->cdr;
}

// Strips reverse tags (for indices, which are not differentiable).
Value strip(VM&, Value* a, int) { return untagged(a[0]); }

// (%sign x): -1, 0 or 1 — the derivative of abs.
Value sign(VM& vm, Value* a, int) {
  if (anyArray(a, 1)) [[unlikely]]
    return arrayUnary(
        vm, [](double x) { return x > 0   ? 1.0
                                  : x < 0 ? -1.0
                                          : 0.0; }, a[0]);
  double x = num(vm, "%sign", a, 0);
  return Value::number(x > 0 ? 1 : x < 0 ? -1 : 0);
}

// (%zero-if-zero x): x, or the symbolic zero where x is 0 — a factor of a derivative
// rule that makes the product exactly 0 there (arithWithZero), even with an infinite
// or NaN factor beside it. Its derivative is the identity's.
Value zeroIfZero(VM& vm, Value* a, int) {
  // An array stays as it is: its zeros are plain zeros (no element is the symbolic zero).
  if (anyArray(a, 1)) [[unlikely]]
    return a[0];
  return num(vm, "%zero-if-zero", a, 0) == 0 ? Value::zero() : a[0];
}

// (%step a b): 1 if a >= b else 0 — which argument max selected.
Value step(VM& vm, Value* a, int) {
  if (anyArray(a, 2)) [[unlikely]]
    return arrayBinary(vm, NativeId::Step, a[0], a[1]);
  return Value::number(num(vm, "%step", a, 0) >= num(vm, "%step", a, 1) ? 1 : 0);
}

// ---- forward mode (vm/src/forward.cpp) -----------------------------------------

// A forward tag is passed around as a character (its own image and sensitivity under
// *j, so reverse passes over forward code carry it as it is).
uint32_t tagArg(VM& vm, const char* who, const Value* a, int i) {
  if (!a[i].isChar()) vm.typeError(who, i, "forward tag", a[i]);
  return a[i].asChar();
}
Value tagValue(uint32_t tag) { return Value::character(tag); }

// (%fwd-begin) → a new tag above every tag in use; (%fwd-end tag) ends it.
Value fwdBegin(VM& vm, Value*, int) {
  uint32_t tag = vm.fwdBegin();
  if (tag >= 0x10ffff) vm.limitError("forward mode: derivatives nested too deeply");
  return tagValue(tag);
}
Value fwdEnd(VM& vm, Value* a, int) {
  vm.fwdEnd(tagArg(vm, "%fwd-end", a, 0));
  return Value::voidValue();
}
// (%fwd-tag): the innermost tag begun (user-level bundle, primal and tangent).
Value fwdTag(VM& vm, Value*, int) { return tagValue(vm.fwdTagInUse()); }
// (%top-tag xs): the highest tag of a bundle among the list xs (or inside a list
// among them, under reverse tags), or #f.
Value topTag(VM&, Value* a, int) {
  uint32_t top = 0;
  std::vector<Value> work{a[0]};
  while (!work.empty()) {
    Value l = work.back();
    work.pop_back();
    for (; isPair(l); l = asPair(l)->cdr) {
      Value x = unwrapAttached(asPair(l)->car);
      while (isObj(x, ObjType::Rev)) x = static_cast<Rev*>(x.asObject())->primal;
      if (isFwd(x) && !asFwd(x)->co()) top = std::max(top, asFwd(x)->tag());
      if (isPair(x)) work.push_back(x);
    }
  }
  return top ? tagValue(top) : Value::boolean(false);
}

// (%rep-tag v xs): the highest tag among the bundles in xs (as %top-tag) and in the
// environments of the attach-*j value v's primal and rep; #f if none.
Value repTag(VM& vm, Value* a, int) {
  Value v = a[0];
  if (!isObj(v, ObjType::Attached)) vm.typeError("%rep-tag", 0, "attached value", v);
  auto* at = static_cast<Attached*>(v.asObject());
  Value l = a[1];
  for (Value f : {at->primal, at->rep})
    if (isClosure(f)) {
      auto* c = asClosure(f);
      for (uint32_t i = 0; i < c->count(); ++i) l = vm.cons(c->upvals[i], l);
    }
  return topTag(vm, &l, 1);
}
// (%user-rep a): a, made by the library's attach-*j for a program (custom-vjp*), its rep
// then serving forward mode by transposition as a program's own attach-*j does.
// In transformed code it gets the image of the attachment (the rep) and gives it back.
Value userRep(VM&, Value* a, int) {
  if (isObj(a[0], ObjType::Attached) &&
      isProcedure(static_cast<Attached*>(a[0].asObject())->primal))
    a[0].asObject()->flags |= kUserRep;
  return a[0];
}
// (%attached-primal v): the value attach-*j gave a rep.
Value attachedPrimal(VM& vm, Value* a, int) {
  if (!isObj(a[0], ObjType::Attached)) vm.typeError("%attached-primal", 0, "attached value", a[0]);
  return static_cast<Attached*>(a[0].asObject())->primal;
}

// (%co-tags vals ybar): the tags of the bundles in vals (the value and the arguments of a
// custom rule, along lists, under reverse tags, and inside bundles of bundles) whose
// forward passes have ended, highest first: reverse over forward (over forward ...),
// where the sensitivity the rule's pullback is given is a cobundle of those tags, which
// the pullback is run on part by part (%rule-pullback, prelude.dlam). A tag still in
// use (forward over reverse, or over reverse over forward) is a perturbation of
// everything here and is carried along, as is anything with no such bundle in it.
// () where the sensitivity ybar holds no cobundle of those tags, unless tags that ended
// are the only ones about (below).
Value coTags(VM& vm, Value* a, int) {
  // Each bundle or cobundle in x, along lists and under reverse tags, its parts too,
  // until visit returns false.
  auto eachFwd = [](Value x, auto visit) {
    std::vector<Value> work{x};
    while (!work.empty()) {
      Value v = untagged(work.back());
      work.pop_back();
      if (isFwd(v)) {
        if (!visit(asFwd(v))) return;
        work.push_back(asFwd(v)->primal);
        work.push_back(asFwd(v)->tangent);
      } else if (isPair(v)) {
        work.push_back(asPair(v)->cdr);
        work.push_back(asPair(v)->car);
      }
    }
  };
  std::vector<uint32_t> tags;
  bool inUse = false;  // a bundle or cobundle of a tag still in use
  eachFwd(a[0], [&](Fwd* f) {
    uint32_t t = f->tag();
    if (t <= vm.fwdTagInUse()) inUse = true;
    if (!f->co() && t > vm.fwdTagInUse() && std::find(tags.begin(), tags.end(), t) == tags.end())
      tags.push_back(t);
    return true;
  });
  // Where the sensitivity holds a cobundle of one of them (else it is given to the
  // pullback as it is, as before) ...
  bool any = false;
  eachFwd(a[1], [&](Fwd* f) {
    bool ours = std::find(tags.begin(), tags.end(), f->tag()) != tags.end();
    if (f->co() && ours) any = true;
    if (!ours) inUse = true;
    return !any;
  });
  // ... or, tags that ended being the only ones about, where it holds none: a
  // sensitivity that reached the value from uses that saw no perturbation of the tags
  // is the cobundle with that primal part and no tangent part, and what the arguments
  // get is the primal part of pb's bundle. (Given to pb as it was, it came back a
  // bundle, which went on as a sensitivity of values that never had the tag: a gradient
  // of a jvp returned a bundle, or a wrong value; with two such tags, reverse twice over
  // forward twice through a vector, the second derivative was 0.)
  if (!any && !(!tags.empty() && !inUse)) return Value::nil();
  std::sort(tags.begin(), tags.end());
  Value l = Value::nil();
  for (uint32_t t : tags) l = vm.cons(tagValue(t), l);
  return l;
}

// (%fwd-resume tag): tag in use again (VM::fwdSetTagInUse) if it is above the tag in
// use; returns the tag in use before, for %fwd-restore.
Value fwdResume(VM& vm, Value* a, int) {
  uint32_t tag = tagArg(vm, "%fwd-resume", a, 0), before = vm.fwdTagInUse();
  if (tag > before) vm.fwdSetTagInUse(tag);
  return tagValue(before);
}
Value fwdRestore(VM& vm, Value* a, int) {
  vm.fwdSetTagInUse(tagArg(vm, "%fwd-restore", a, 0));
  return Value::voidValue();
}

Value bundleAt(VM& vm, Value* a, int) {
  return vm.fwdBundle(tagArg(vm, "%bundle-at", a, 0), a[1], a[2]);
}
Value primalAt(VM& vm, Value* a, int) { return vm.fwdPrimal(tagArg(vm, "%primal-at", a, 0), a[1]); }
Value tangentAt(VM& vm, Value* a, int) {
  return vm.fwdTangent(tagArg(vm, "%tangent-at", a, 0), a[1]);
}

// The reverse rules of %bundle-at, %primal-at and %tangent-at (ad_rules.cpp).
// (%co-primal tag g) and (%co-tangent tag g): the parts of the sensitivity g of a
// bundle of that tag that its primal and its tangent receive (a pair: part by part).
// With co false, the parts of a bundle (not a cobundle) of the tag: what the
// sensitivity of a cobundle is (%dual-primal, %dual-tangent, below).
Value coPart(VM& vm, uint32_t tag, Value g, bool tangent, bool co = true) {
  std::vector<Value> out;
  struct Item {
    Value v;
    bool expanded;
  };
  std::vector<Item> todo{{g, false}};
  while (!todo.empty()) {
    Item it = todo.back();
    todo.pop_back();
    if (it.expanded) {
      Value cdr = out.back();
      out.pop_back();
      Value car = out.back();
      out.pop_back();
      out.push_back(vm.cons(car, cdr));
      continue;
    }
    Value x = it.v;
    // A cobundle of a tag above this one is the sensitivity of a perturbation the
    // bundle (of this tag: its parts carry lower tags only) does not have: it gets the
    // primal part (VM::fwdProject). (Taken as a whole for the primal, it left the
    // tangent nothing when a bundle was also observed at a later tag: the gradient of
    // a jvp whose function takes a derivative of a function returning its argument.)
    while (isFwd(x) && asFwd(x)->co() && asFwd(x)->tag() > tag) x = asFwd(x)->primal;
    if (isPair(x)) {
      todo.push_back({x, true});
      todo.push_back({asPair(x)->cdr, false});
      todo.push_back({asPair(x)->car, false});
    } else if (isFwd(x) && asFwd(x)->co() == co && asFwd(x)->tag() == tag) {
      out.push_back(tangent ? asFwd(x)->tangent : asFwd(x)->primal);
    } else {
      // A sensitivity that is not a cobundle of the tag: all of it is the primal's.
      out.push_back(tangent ? Value::zero() : x);
    }
  }
  return out.back();
}
Value coPrimal(VM& vm, Value* a, int) {
  return coPart(vm, tagArg(vm, "%co-primal", a, 0), a[1], false);
}
Value coTangent(VM& vm, Value* a, int) {
  return coPart(vm, tagArg(vm, "%co-tangent", a, 0), a[1], true);
}
// (%cobundle-primal tag g y), (%cobundle-tangent tag g y): the sensitivity of a
// bundle from g, that of its primal (tangent) y: cobundles of the tag holding g, made
// the shape of y (fwdProject), as the primal (tangent) part; where y is #t, as they are
// (the sensitivity of values not at hand: a custom-vjp* function's captured values).
// (With wrap false, g made the shape of y and nothing more: %fwd-project-tree.)
// (With co false, bundles rather than cobundles: %dual-bundle-primal and
// %dual-bundle-tangent, below.)
Value coBundle(VM& vm, uint32_t tag, Value g, Value y, bool tangent, bool wrap = true,
               bool co = true) {
  struct Item {
    Value g, y;
    bool expanded;
  };
  std::vector<Item> todo{{g, y, false}};
  std::vector<Value> out;
  while (!todo.empty()) {
    Item it = todo.back();
    todo.pop_back();
    if (it.expanded) {
      Value cdr = out.back();
      out.pop_back();
      Value car = out.back();
      out.pop_back();
      out.push_back(vm.cons(car, cdr));
      continue;
    }
    bool keep = it.y.isBool() && it.y.isTruthy();
    if (it.g.isZero()) {
      out.push_back(it.g);
    } else if (isPair(it.g)) {
      Value yc = isPair(it.y) ? asPair(it.y)->car : keep ? it.y : Value::zero();
      Value yd = isPair(it.y) ? asPair(it.y)->cdr : keep ? it.y : Value::zero();
      todo.push_back({it.g, it.y, true});
      todo.push_back({asPair(it.g)->cdr, yd, false});
      todo.push_back({asPair(it.g)->car, yc, false});
    } else if (it.g.isNumber() || isFwd(it.g) || isObj(it.g, ObjType::Vector) ||
               isObj(it.g, ObjType::Rev)) {
      Value p = keep ? it.g : vm.fwdProject(it.g, it.y);
      if (!wrap)
        out.push_back(p);
      else
        out.push_back(Value::object(tangent ? vm.makeFwd(tag, Value::zero(), p, co)
                                            : vm.makeFwd(tag, p, Value::zero(), co)));
    } else {
      out.push_back(it.g);
    }
  }
  return out.back();
}
Value coBundlePrimal(VM& vm, Value* a, int) {
  return coBundle(vm, tagArg(vm, "%cobundle-primal", a, 0), a[1], a[2], false);
}
// (With a fourth argument, the value whose tangent y is: where that is a number or an
// array with no bundle of the tag (under reverse tags), the symbolic zero: its tangent
// is the constant 0. A tangent taken inside a function that vector-map maps, of a
// value the function did not perturb, gave the element a cobundle.)
bool constantTangent(uint32_t tag, Value b) {
  b = untagged(b);
  return b.isNumber() || isObj(b, ObjType::Vector) || (isFwd(b) && asFwd(b)->tag() != tag);
}
Value coBundleTangent(VM& vm, Value* a, int n) {
  uint32_t tag = tagArg(vm, "%cobundle-tangent", a, 0);
  if (n > 3 && constantTangent(tag, a[3])) return Value::zero();
  return coBundle(vm, tag, a[1], a[2], true);
}
// (%constant-tangent? tag x): whether x is a number or an array without a bundle of
// the tag, whose tangent there is the constant 0.
Value constantTangentP(VM& vm, Value* a, int) {
  return Value::boolean(constantTangent(tagArg(vm, "%constant-tangent?", a, 0), a[1]));
}
// (%bundle-of? tag x): whether x (under reverse tags) is a bundle of the tag, or a list
// that holds one (an argument of a custom rule, such as map*'s list: its part at the tag
// is then its elements' tangents, %co-targets). Iterative.
Value bundleOfP(VM& vm, Value* a, int) {
  uint32_t tag = tagArg(vm, "%bundle-of?", a, 0);
  std::vector<Value> work{a[1]};
  while (!work.empty()) {
    Value x = untagged(work.back());
    work.pop_back();
    if (isFwd(x) && !asFwd(x)->co() && asFwd(x)->tag() == tag) return Value::boolean(true);
    if (isPair(x)) {
      work.push_back(asPair(x)->cdr);
      work.push_back(asPair(x)->car);
    }
  }
  return Value::boolean(false);
}
// (%rep-closure? f): whether f is a closure of reverse-transformed code made from a
// function's (not a backpropagator's): called, it returns (cons value backpropagator).
Value repClosureP(VM&, Value* a, int) {
  return Value::boolean(isClosure(a[0]) && asClosure(a[0])->proto->primal != nullptr);
}
// Whether the sensitivity s is a cobundle, or a bundle of a tag whose forward pass has
// ended: what %materialize projects on a value without that tag (VM::fwdProject).
bool projected(const VM& vm, Value s) {
  return isFwd(s) && (asFwd(s)->co() || asFwd(s)->tag() > vm.fwdTagInUse());
}
// (%projected? s): the same under reverse tags. A number's sensitivity that is one
// (reverse over a jvp taken inside vector-map's function) is no number to list->vector.
Value projectedP(VM& vm, Value* a, int) { return Value::boolean(projected(vm, untagged(a[0]))); }
// Reverse over reverse over forward: the sensitivity of a cobundle (P, T), which pairs
// with it as u·P + v·T, is the bundle u + vε of its tag. It is a bundle, not a
// cobundle, because the outer backward pass multiplies it the way the dual-number rule
// does: the inner pass's c = g·b (g a cobundle, b a bundle) has, for the sensitivity
// h of c, g's = h·b (the product of two bundles) and b's = g·h (the transposed product
// of a cobundle and a bundle), which the arithmetic of forward.cpp computes as it is.
// These four are the transposes of the four above (prelude.dlam, %co-transposed):
// (%dual-primal tag h) and (%dual-tangent tag h) take such a bundle apart (anything
// else is all the primal's), (%dual-bundle-primal tag h y) and (%dual-bundle-tangent
// tag h y) make one, as %cobundle-primal and %cobundle-tangent make cobundles.
Value dualPrimal(VM& vm, Value* a, int) {
  return coPart(vm, tagArg(vm, "%dual-primal", a, 0), a[1], false, false);
}
Value dualTangent(VM& vm, Value* a, int) {
  return coPart(vm, tagArg(vm, "%dual-tangent", a, 0), a[1], true, false);
}
Value dualBundlePrimal(VM& vm, Value* a, int) {
  return coBundle(vm, tagArg(vm, "%dual-bundle-primal", a, 0), a[1], a[2], false, true, false);
}
Value dualBundleTangent(VM& vm, Value* a, int) {
  return coBundle(vm, tagArg(vm, "%dual-bundle-tangent", a, 0), a[1], a[2], true, true, false);
}
// (%fwd-project-tree g v): g made the shape of v leaf by leaf along lists (a cobundle
// of a tag the leaf of v does not have gives its primal part: VM::fwdProject); where v
// is #t, g's leaves as they are.
Value fwdProjectTree(VM& vm, Value* a, int) { return coBundle(vm, 0, a[0], a[1], false, false); }
// (%fwd-project g v): g made the shape of the value v (VM::fwdProject), leaves of a
// list walked.
Value fwdProjectNative(VM& vm, Value* a, int) { return vm.fwdProject(a[0], a[1]); }

// (%fwd-strip v): v with every bundle in it (along lists) replaced by its innermost
// primal: what an error message shows of a value computed on bundles.
Value fwdStrip(VM& vm, Value* a, int) {
  Value v = a[0];
  auto strip = [](Value x) {
    while (isFwd(x)) x = asFwd(x)->primal;
    return x;
  };
  if (!isPair(v)) return strip(v);
  std::vector<Value> items;
  for (; isPair(v); v = asPair(v)->cdr) items.push_back(strip(asPair(v)->car));
  Value r = strip(v);
  for (size_t i = items.size(); i-- > 0;) r = vm.cons(items[i], r);
  return r;
}

// (attach-j* v rep): v, whose j* is rep (called in its place when given bundles).
Value attachJStar(VM& vm, Value* a, int) {
  Attached* r = vm.makeAttached(a[0], Value::boolean(false));
  r->rep = a[1];
  vm.writeBarrier(r, a[1]);
  r->flags |= kForwardRep;
  return Value::object(r);
}
// (%dual-native? v): whether v is a native that takes bundles itself (a forward rule).
Value dualNativeP(VM&, Value* a, int) {
  Value v = unwrapAttached(a[0]);
  return Value::boolean(isNative(v) && (v.asObject()->flags & kDualRule));
}
// (%forward-rep v): the rep attach-j* gave v, or #f.
Value forwardRep(VM&, Value* a, int) {
  Value v = a[0];
  if (isObj(v, ObjType::Attached) && (v.asObject()->flags & kForwardRep))
    return static_cast<Attached*>(v.asObject())->rep;
  return Value::boolean(false);
}

Value freeVariables(VM& vm, Value* a, int) {
  Value f = unwrapAttached(a[0]);
  if (isNative(f)) return Value::nil();
  if (!isClosure(f)) vm.typeError("free-variables", 0, "procedure", a[0]);
  vm.ensureBody(asClosure(f)->proto);
  const auto& names = asClosure(f)->proto->freeVars;
  std::vector<Value> syms;
  for (const auto& n : names) syms.push_back(vm.symbol(n));
  return vm.list(syms.data(), syms.size());
}

// Whether s and v agree about being vectors (s under any reverse tags): a vector's
// sensitivity is a vector of its length, and only a vector's is a vector.
bool sameVectorShape(Value s, Value v) {
  s = untagged(s);
  bool sv = isObj(s, ObjType::Vector), vv = isObj(v, ObjType::Vector);
  if (sv != vv) return false;
  return !sv || sameShape(static_cast<Vector*>(s.asObject()), static_cast<Vector*>(v.asObject()));
}

// (%co-array-leaf h g): the array a part of the cobundle g (under reverse tags, through
// cobundles of several tags) is made of, when h is a number (under reverse tags): what
// %spread-like broadcasts h to (prelude.dlam); #f otherwise.
Value coArrayLeaf(VM&, Value* a, int) {
  if (!untagged(a[0]).isNumber() || !isFwd(untagged(a[1]))) return Value::boolean(false);
  Value leaf = leafPart(a[1]);
  return isObj(leaf, ObjType::Vector) ? leaf : Value::boolean(false);
}

// s with a sparse vector sensitivity (object.h), itself or a part of a bundle or
// cobundle, made dense; s itself when it holds none. (Recursive in the nesting of tags
// only.)
Value denseSens(VM& vm, Value s) {
  if (isObj(s, ObjType::Vector)) return Value::object(vm.dense(static_cast<Vector*>(s.asObject())));
  if (!isFwd(s)) return s;
  Fwd* f = asFwd(s);
  Value p = denseSens(vm, f->primal), t = denseSens(vm, f->tangent);
  if (p == f->primal && t == f->tangent) return s;
  return Value::object(vm.makeFwd(f->tag(), p, t, f->co()));
}

// (%materialize sens value): sens with every symbolic zero replaced by the zero of the
// corresponding part of value (VM::zeroOf), and the sensitivity of a discrete value
// (its own, or any other discrete value a custom derivative gave for it) made that
// value itself, so a structure's sensitivity keeps its keys. Iterative.
Value materializeTree(VM& vm, Value s0, Value v0) {
  struct Item {
    Value s, v;
    int kind;  // 0: visit, 1: build pair, 2: build a record or dict like v
  };
  std::vector<Item> work{{s0, v0, 0}};
  std::vector<Value> results, parts, vparts;
  while (!work.empty()) {
    Item it = work.back();
    work.pop_back();
    if (it.kind == 2) {
      // An aggregate (a record, a dict) like it.v, from its parts' results.
      size_t n = partCount(it.v);
      const Value* got = results.data() + results.size() - n;
      bool same = true;
      parts.clear();
      partsOf(it.s, parts);
      for (size_t i = 0; i < n && same; ++i) same = parts[i] == got[i];
      Value r = same ? it.s : rebuild(vm, it.v, got);
      results.resize(results.size() - n);
      results.push_back(r);
      continue;
    }
    if (it.kind == 1) {
      Value cdr = results.back();
      results.pop_back();
      Value car = results.back();
      results.pop_back();
      // A part with no symbolic zero in it is kept, not copied.
      bool same = isPair(it.s) && car == asPair(it.s)->car && cdr == asPair(it.s)->cdr;
      results.push_back(same ? it.s : vm.cons(car, cdr));
      continue;
    }
    Value s = it.s;
    if (s.isZero()) {
      // A zero for a reverse-tagged number carries the same tags, so that
      // (%materialize (*j s) (*j v)) is (*j (%materialize s v)).
      results.push_back(vm.zeroOf(it.v));
      continue;
    }
    Value v = unwrapAttached(it.v);
    // A sparse vector sensitivity (object.h) leaves as its dense form, also as a part
    // of a bundle (a gradient taken under forward mode).
    s = denseSens(vm, s);
    int tags = 0;
    for (; isObj(v, ObjType::Rev); ++tags) v = static_cast<Rev*>(v.asObject())->primal;
    // The sensitivity of a bundle's perturbation that reached a value without one
    // (reverse over forward) is its primal part (VM::fwdProject); also under the tags
    // of a further reverse pass, which both carry (reverse over reverse over forward:
    // the image of the projection is the projection of the images).
    {
      Value c = s;
      int k = 0;
      for (; k < tags && isObj(c, ObjType::Rev); ++k) c = static_cast<Rev*>(c.asObject())->primal;
      if (projected(vm, c)) {
        Value p = vm.fwdProject(c, v);
        if (p != c) {
          // (The symbolic zero stays itself, the zero of the value below: wrapped in
          // the tags, it was taken for a number, no sensitivity of an array.)
          if (!p.isZero())
            for (int i = 0; i < k; ++i) p = Value::object(vm.makeRev(p));
          s = p;
        }
      }
    }
    // A sensitivity that still carries the axes its value was broadcast along
    // (ad_rules.cpp) is summed to the value's shape (an error if they do not broadcast).
    // (Of a bundle, forward over reverse: by its primal's shape; %sum-to takes the
    // bundle apart.)
    // (Of a cobundle, reverse over forward, also under a second reverse pass's tags: by
    // its innermost parts' shape, leafPart.)
    Value vp = fwdPrimal(v), sp = leafPart(s);
    if ((vp.isNumber() || isObj(vp, ObjType::Vector)) && isObj(sp, ObjType::Vector) &&
        !sameVectorShape(sp, vp)) {
      Value args[2] = {s, v};
      s = vm.callPrimitive(vm.builtin(NativeId::SumTo), args, 2);
    }
    if (s.isZero()) {
      results.push_back(vm.zeroOf(it.v));
    } else if (v.isZero()) {
      results.push_back(s);  // a zero value (a nested derivative's sensitivity) fits any shape
    } else if (isDiscrete(v) && isDiscrete(s)) {
      results.push_back(v);
    } else if (isPair(s) && isPair(v)) {
      work.push_back({s, v, 1});
      work.push_back({asPair(s)->cdr, asPair(v)->cdr, 0});
      work.push_back({asPair(s)->car, asPair(v)->car, 0});
    } else if (isAggregate(s) && isAggregate(v) && sameAggregateShape(s, v)) {
      work.push_back({s, v, 2});
      vparts.clear();
      partsOf(v, vparts);
      parts.clear();
      partsOf(s, parts);
      for (size_t i = vparts.size(); i-- > 0;) work.push_back({parts[i], vparts[i], 0});
    } else if (isPair(s) && isClosure(v)) {
      // A closure's sensitivity: one entry per captured value.
      work.push_back({s, vm.capturedValues(asClosure(v)), 0});
    } else if (isPair(s) || isAggregate(s) || isAggregate(v) ||
               (s.isNumber() && !v.isNumber() && !isObj(v, ObjType::Rev) && !isFwd(v)) ||
               !sameVectorShape(leafPart(s), leafPart(v))) {
      std::string ss = vm.show(s, true), sv = vm.show(v, true);
      if (ss.size() > 60) ss = ss.substr(0, 57) + "...";
      if (sv.size() > 60) sv = sv.substr(0, 57) + "...";
      vm.runtimeError("sensitivity " + ss + " does not have the shape of the value " + sv +
                      " (a custom derivative returned the wrong shape?)");
    } else {
      results.push_back(s);
    }
  }
  return results.back();
}

// (%observed bp w): bp flagged, its calls from code that observes their result going
// to w (vm/src/ad.cpp, VM::observedCopy).
Value observed(VM& vm, Value* a, int) { return vm.observedCopy(a[0], a[1]); }

// The common case first: a list of numbers (the gradient with respect to a list),
// walked along the spines; any other element, and the end, take the general walk.
// One pass finds what changes (an element, the end: a list's sensitivity often ends
// in a symbolic zero); only the pairs up to the last change are copied, front to
// back, and the rest is kept.
Value materialize(VM& vm, Value* a, int) {
  Value s = a[0], v = a[1];
  if (s.isNumber() && v.isNumber()) return s;  // an element's (%number-sens, prelude)
  if (!isPair(s) || !isPair(v)) return materializeTree(vm, s, v);
  std::vector<std::pair<size_t, Value>> changed;  // (index, new element)
  size_t n = 0;
  Value ps = s, pv = v;
  for (; bothPairs(ps, pv); ps = asPair(ps)->cdr, pv = asPair(pv)->cdr, ++n) {
    Value sc = asPair(ps)->car, vc = asPair(pv)->car;
    if (sc.isNumber() && vc.isNumber()) [[likely]]
      continue;
    vc = unwrapAttached(vc);
    int tags = 0;  // a number's zero carries its reverse tags (as in materializeTree)
    for (; isObj(vc, ObjType::Rev); ++tags) vc = static_cast<Rev*>(vc.asObject())->primal;
    // (Forward over reverse: a bundle of an array takes the general walk, its zero is an
    // array; so does a bundled sensitivity of an array for a number, which carries the
    // axes the number was broadcast along and is summed there.)
    bool scalar = vc.isNumber() || (isFwd(vc) && fwdPrimal(vc).isNumber());
    // (A reverse-tagged cobundle, reverse over reverse over forward, takes it too: it is
    // projected there; so does a bundle of a tag whose forward pass has ended.)
    if (scalar &&
        (sc.isNumber() ||
         (isObj(sc, ObjType::Rev) && !isObj(untagged(sc), ObjType::Vector) &&
          !isFwd(untagged(sc))) ||
         (isFwd(sc) && !projected(vm, sc) && !isObj(untagged(fwdPrimal(sc)), ObjType::Vector))))
      continue;
    Value m;
    if (scalar && sc.isZero()) {
      m = Value::number(0);
      for (int i = 0; i < tags; ++i) m = Value::object(vm.makeRev(m));
    } else {
      m = materializeTree(vm, sc, asPair(pv)->car);
      if (m == sc) continue;
    }
    changed.emplace_back(n, m);
  }
  Value end = materializeTree(vm, ps, pv);
  if (end == ps && changed.empty()) return s;
  size_t copied = end == ps ? changed.back().first + 1 : n;
  Value head, p = s;
  Value* tail = &head;  // the cdr the next pair goes into
  size_t next = 0;
  for (size_t i = 0; i < copied; ++i, p = asPair(p)->cdr) {
    Value car = asPair(p)->car;
    if (next < changed.size() && changed[next].first == i) car = changed[next++].second;
    // New pairs: filling their cdrs needs no write barrier (no collection runs here).
    Pair* cell = vm.newPair(car, Value::nil());
    *tail = Value::object(cell);
    tail = &cell->cdr;
  }
  *tail = end == ps ? p : end;
  return head;
}

// (%call-vjp h x1 .. xn ybar): the argument sensitivities of host function h.
Value callVjp(VM& vm, Value* a, int n) {
  if (!isNative(a[0]) || !(asNative(a[0])->flags & kHasVjp))
    vm.typeError("%call-vjp", 0, "host function", a[0]);
  vm.callingNative = asNative(a[0]);
  return asNative(a[0])->vjp(vm, a + 1, n - 1);
}

// Names a procedure for messages about its derivative: the value *j made it from.
std::string derivativeOf(VM& vm, Value f) {
  // *j-inverse is known for transformed closures and for reps (memoised back pointer).
  bool invertible = isClosure(f) &&
                    (asClosure(f)->proto->primal || (f.asObject()->flags & (kMemoInv | kMemoBoth)));
  return vm.show(invertible ? vm.starJInverse(f) : f, true);
}

std::string brief(VM& vm, Value v) {
  std::string s = vm.show(v, true);
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// (%rep-result r f): r, the result of calling the derivative f of a procedure,
// must be (cons value backpropagator).
Value repResult(VM& vm, Value* a, int) {
  Value r = a[0];
  if (!isPair(r) || !isProcedure(unwrapAttached(asPair(r)->cdr)))
    vm.runtimeError("the derivative (*j) of " + derivativeOf(vm, a[1]) + " returned " +
                    brief(vm, r) + ", not (cons value backpropagator)");
  return r;
}

// (%bp-result s bp): s, the result of a backpropagator, must be (cons fbar xbar).
Value bpResult(VM& vm, Value* a, int) {
  Value s = a[0];
  if (!isPair(s) && !s.isZero())
    vm.runtimeError("a backpropagator returned " + brief(vm, s) +
                    ", not (cons sensitivity-of-the-procedure sensitivity-of-the-arguments)");
  return s;
}

// Whether a sensitivity has the shape of a value (the symbolic zero fits anything).
bool conforms(Value s, Value v) {
  std::vector<std::pair<Value, Value>> work{{s, v}};
  while (!work.empty()) {
    auto [a, b] = work.back();
    work.pop_back();
    b = unwrapAttached(b);
    while (isObj(a, ObjType::Rev) && isObj(b, ObjType::Rev)) {
      a = static_cast<Rev*>(a.asObject())->primal;
      b = static_cast<Rev*>(b.asObject())->primal;
    }
    // A bundle (forward over reverse) or a cobundle has its parts' shape.
    a = fwdLeaf(a);
    b = fwdLeaf(b);
    // The symbolic zero fits any shape, as a sensitivity and as a value (a sensitivity
    // that became the value of a nested derivative).
    if (a.isZero() || b.isZero()) continue;
    if (!sameVectorShape(a, b)) return false;
    bool bNumber = b.isNumber() || isObj(b, ObjType::Rev) || isFwd(b);
    if (bNumber) {
      if (!(a.isNumber() || isObj(a, ObjType::Rev) || isFwd(a))) return false;
      continue;
    }
    if (isPair(b)) {
      if (!isPair(a)) return false;
      work.push_back({asPair(a)->car, asPair(b)->car});
      work.push_back({asPair(a)->cdr, asPair(b)->cdr});
      continue;
    }
    if (isClosure(b)) {
      if (!isPair(a) && !a.isNil()) return false;
      continue;
    }
    if (isObj(a, ObjType::Dict) && isObj(b, ObjType::Dict)) {
      auto add = [&](Value x, Value y) { work.push_back({x, y}); };
      if (!sameKeys(static_cast<Dict*>(a.asObject()), static_cast<Dict*>(b.asObject()), add))
        return false;
      continue;
    }
    if (isAggregate(a) || isAggregate(b)) {
      if (!isAggregate(a) || !isAggregate(b) || !sameAggregateShape(a, b)) return false;
      std::vector<Value> pa, pb;
      partsOf(a, pa);
      partsOf(b, pb);
      for (size_t i = 0; i < pa.size(); ++i) work.push_back({pa[i], pb[i]});
      continue;
    }
    if (a.isNumber() || isObj(a, ObjType::Rev) || isFwd(a)) return false;
  }
  return true;
}

// (%check-xbar f xbar args): the argument sensitivity returned by the pullback of a
// custom derivative of f must have the shape of the arguments (one argument: its
// shape; several: a list of one per argument). Returns xbar.
Value checkXbar(VM& vm, Value* a, int) {
  Value xbar = a[1], args = a[2];
  bool ok;
  if (isPair(args) && asPair(args)->cdr.isNil()) {
    ok = conforms(xbar, asPair(args)->car);
  } else {
    ok = conforms(xbar, args);
  }
  if (!ok)
    vm.runtimeError("the pullback of the custom derivative of " + brief(vm, unwrapAttached(a[0])) +
                    " returned " + brief(vm, xbar) +
                    ", which does not have the shape of its argument" +
                    (isPair(args) && asPair(args)->cdr.isNil() ? " " + brief(vm, asPair(args)->car)
                                                               : "s " + brief(vm, args)));
  return xbar;
}

// (%check-arity f n): the error a call of f with n arguments would get, if it would;
// else void. The reps of the prelude's attached values call it first, so that under *j
// a call with a wrong count names f (map, vector-sum, the user's function), as it does
// without, rather than the rep or its fwd function.
Value checkArityNative(VM& vm, Value* a, int) {
  Value n = untagged(a[1]);
  if (!n.isNumber() || n.asNumber() < 0 || n.asNumber() > 1e9)
    vm.typeError("%check-arity", 1, "count", a[1]);
  vm.checkArity(a[0], static_cast<int>(n.asNumber()));
  return Value::voidValue();
}

}  // namespace

void openAdPrimitives(Registrar& r) {
  VM& vm = r.vm;
  r.define(NativeId::CheckXbar, checkXbar);
  r.define(NativeId::RepResult, repResult);
  r.define(NativeId::BpResult, bpResult);
  vm.defineNative("%call-vjp", callVjp, 2, -1)->flags |= kNoDerivative;
  vm.defineNative("%check-arity", checkArityNative, 2, 2);
  r.define(NativeId::StarJ, starJ);
  r.define(NativeId::StarJInverse, starJInverse);
  r.define(NativeId::StarJConstant, starJConstant);
  r.define(NativeId::UserRep, userRep);
  vm.defineNative("%wanted?", wantedP, 1, 1);
  r.define(NativeId::Zero, zero);
  r.define(NativeId::AttachStarJ, attach);
  r.define(NativeId::AttachedImage, attachedImage);
  r.define(NativeId::BundleAt, bundleAt);
  r.define(NativeId::PrimalAt, primalAt);
  r.define(NativeId::TangentAt, tangentAt);
  vm.defineNative("%fwd-begin", fwdBegin, 0, 0);
  vm.defineNative("%fwd-end", fwdEnd, 1, 1);
  vm.defineNative("%fwd-tag", fwdTag, 0, 0);
  vm.defineNative("%top-tag", topTag, 1, 1);
  vm.defineNative("%rep-tag", repTag, 2, 2);
  vm.defineNative("%attached-primal", attachedPrimal, 1, 1);
  vm.defineNative("%co-tags", coTags, 2, 2);
  vm.defineNative("%fwd-resume", fwdResume, 1, 1);
  vm.defineNative("%fwd-restore", fwdRestore, 1, 1);
  vm.defineNative("%co-primal", coPrimal, 2, 2);
  vm.defineNative("%co-tangent", coTangent, 2, 2);
  vm.defineNative("%cobundle-primal", coBundlePrimal, 3, 3);
  vm.defineNative("%cobundle-tangent", coBundleTangent, 3, 4);
  vm.defineNative("%constant-tangent?", constantTangentP, 2, 2);
  vm.defineNative("%co-array-leaf", coArrayLeaf, 2, 2);
  vm.defineNative("%bundle-of?", bundleOfP, 2, 2);
  vm.defineNative("%projected?", projectedP, 1, 1);
  vm.defineNative("%rep-closure?", repClosureP, 1, 1);
  vm.defineNative("%dual-primal", dualPrimal, 2, 2);
  vm.defineNative("%dual-tangent", dualTangent, 2, 2);
  vm.defineNative("%dual-bundle-primal", dualBundlePrimal, 3, 3);
  vm.defineNative("%dual-bundle-tangent", dualBundleTangent, 3, 3);
  vm.defineNative("%fwd-project", fwdProjectNative, 2, 2);
  vm.defineNative("%fwd-project-tree", fwdProjectTree, 2, 2);
  r.define(NativeId::AttachJStar, attachJStar);
  vm.defineNative("%fwd-strip", fwdStrip, 1, 1);
  vm.defineNative("%forward-rep", forwardRep, 1, 1);
  vm.defineNative("%dual-native?", dualNativeP, 1, 1);
  vm.defineNative("collect-garbage", collectGarbage, 0, 0);
  vm.defineNative("%gradient-start", gradientStart, 0, 0);
  vm.defineNative("%gradient-end", gradientEnd, 0, 0);
  r.define(NativeId::Plus, plus);
  r.define(NativeId::SensAdd, sensAdd);
  r.define(NativeId::SensSub, sensSub);
  r.define(NativeId::SZeroP, szeroP);
  vm.defineNative("%symbolic-zero", symbolicZero, 0, 0);
  r.define(NativeId::SCar, scar);
  r.define(NativeId::SCdr, scdr);
  r.define(NativeId::Sign, sign);
  r.define(NativeId::Step, step);
  r.define(NativeId::ZeroIfZero, zeroIfZero);
  vm.defineNative("%strip", strip, 1, 1);
  r.define(NativeId::Materialize, materialize);
  r.define(NativeId::Observed, observed);
  vm.defineNative("free-variables", freeVariables, 1, 1);
  installTransform(vm);
}

}  // namespace dlam::prim
