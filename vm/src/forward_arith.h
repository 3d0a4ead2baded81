// forward_arith.h — the dual-number arithmetic of + - * / on two numbers or bundles of
// numbers (VM::fwdArith2), inline: forward.cpp's primitives and the interpreter's
// arithmetic instructions (interpreter.cpp, arith_slow) both use it, the interpreter
// without a call, as forward mode's whole cost on scalar code is this and an allocation.
#pragma once

#include "dlam/vm.h"

namespace dlam {

namespace fwd_detail {

// The parts of a number or of a bundle of numbers (a plain number: tag 0, no tangent).
// Inline, with one test of the object's header for "a bundle of numbers" (kScalarFwd,
// set where the bundle is made): this is the whole cost of forward-mode arithmetic but
// for the allocation.
inline bool numberParts(Value v, uint32_t& tag, double& p, double& t) {
  if (v.isNumber()) {
    tag = 0;
    p = v.asNumber();
    t = 0;
    return true;
  }
  if (!v.isObject()) return false;
  const Obj* o = v.asObject();
  if (o->type != ObjType::Fwd || !(o->flags & kScalarFwd)) return false;
  const auto* f = static_cast<const Fwd*>(o);
  tag = f->tag();
  p = f->primal.asNumber();
  t = f->tangent.asNumber();
  return true;
}

}  // namespace fwd_detail

// + - * / of two numbers or bundles of numbers at one tag, computed in place: the
// dual-number rules of ad_rules.cpp (the tangent rules), term for term and in the same
// order, so the bits are the same, without their generic calls. Undefined otherwise.
// (As the + primitive sums from 0, a sum is 0 + a + b: -0 + -0 is +0 there too. A
// missing tangent is the symbolic zero there: x + 0 is x, 0 - x is -x, 0 x is absent.)
// The interpreter calls it straight from its arithmetic instructions (arith_slow).
inline Value VM::fwdArith2(NativeId id, Value a, Value b) {
  uint32_t ta, tb;
  double pa, da, pb, db;
  if (!fwd_detail::numberParts(a, ta, pa, da) || !fwd_detail::numberParts(b, tb, pb, db))
    return Value::undefined();
  if (ta != tb && ta != 0 && tb != 0) return Value::undefined();
  uint32_t e = ta > tb ? ta : tb;
  bool ha = ta == e, hb = tb == e;  // which operands carry a tangent
  double y, yd;
  switch (id) {
    case NativeId::Add:
      y = (0.0 + pa) + pb;
      yd = ha && hb ? (0.0 + da) + db : ha ? da : db;
      break;
    case NativeId::SensAdd:  // (as the %sens+ native adds two numbers: VM::plus)
      y = pa + pb;
      yd = ha && hb ? da + db : ha ? da : db;
      break;
    case NativeId::Sub:
      y = pa - pb;
      yd = ha && hb ? da - db : ha ? da : -db;
      break;
    case NativeId::Mul:
      y = pa * pb;
      yd = ha && hb ? (0.0 + da * pb) + pa * db : ha ? da * pb : pa * db;
      break;
    case NativeId::Div:
      y = pa / pb;
      yd = ha && hb ? (da - y * db) / pb : ha ? da / pb : -(y * db) / pb;
      break;
    default:
      return Value::undefined();
  }
  // makeFwd, inline.
  auto* f = static_cast<Fwd*>(allocate(ObjType::Fwd, sizeof(Fwd)));
  f->flags = kScalarFwd;
  f->aux = e;
  f->primal = Value::numberChecked(y);
  f->tangent = Value::numberChecked(yd);
  return Value::object(f);
}

}  // namespace dlam
