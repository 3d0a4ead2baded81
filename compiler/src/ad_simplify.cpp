// ad_simplify.cpp — algebra on the backpropagators the reverse transform makes.
//
// The rule of - gives the subtrahend the negated sensitivity, (- g), which the rules
// after it then multiply: (- u) of u = 1 - a reaches a as is, and (- t̄) of t = b - a²
// is multiplied by a and by 2. simplifyBackpropagator moves each such negation into an
// operation that is there anyway, at one level:
//   (- (* x c))          → (* x -c)           the product made only for the negation
//   (* (- g) c)          → (* g -c)
//   (* (* (- g) y) c)    → (* (* g y) -c)      the inner product used only there
//   (+ x (- g))          → (- x g)
// with c a number constant and every intermediate used once. Each rewrite gives the
// same number in floating point (negation is exact and commutes with rounding, and
// x - g is x + (-g)), and the same symbolic zero (arithWithZero). And (*j (*j-inverse
// x)) is x, and (plus x (*j y)) with y a number is (*j (+ (*j-inverse x) y)). The
// backpropagator is shorter, and so is everything made from it when it is transformed
// again.
#include "ad_simplify.h"

#include <unordered_map>

namespace dlam {

using namespace anf;

namespace {

bool isNumberConst(const Atom& a) { return a.kind == Atom::Const && a.value.isNumber(); }

Atom negated(Atom a) {
  a.value = Value::number(-a.value.asNumber());
  return a;
}

// The position (1 or 2) of v among a binary call's operands, 0 if it is not one.
size_t operandOf(const Bind& bd, const Var* v) {
  for (size_t i = 1; i <= 2; ++i)
    if (bd.args[i].kind == Atom::Local && bd.args[i].var == v) return i;
  return 0;
}

}  // namespace

void simplifyBackpropagator(const VM& vm, Module& module, Block* body) {
  // Uses of each variable anywhere in the body (nested blocks, captures included), and,
  // in the body's own bindings, where each variable is made and used.
  std::unordered_map<const Var*, int> uses;
  auto use = [&](const Atom& a) {
    if (a.kind == Atom::Local) ++uses[a.var];
  };
  forEachBlock(static_cast<const Block*>(body), [&](const Block* b) {
    for (const Bind& bd : b->binds) {
      use(bd.atom);
      for (const Atom& a : bd.args) use(a);
      if (bd.kind == Bind::MakeLambda)
        for (const Var* v : bd.lambda->freeVars) ++uses[v];
    }
    use(b->result);
  });
  std::vector<Bind>& binds = body->binds;
  std::unordered_map<const Var*, size_t> madeAt, usedAt;
  for (size_t i = 0; i < binds.size(); ++i) {
    if (binds[i].dst) madeAt[binds[i].dst] = i;
    for (const Atom& a : binds[i].args)
      if (a.kind == Atom::Local) usedAt[a.var] = i;
  }
  auto is = [&](const Bind& bd, NativeId id, size_t nargs, uint16_t level) {
    return bd.kind == Bind::Call && bd.level == level && bd.args.size() == nargs + 1 &&
           builtinOf(vm, bd.args[0]) == id;
  };
  auto prim = [&](NativeId id, SrcLoc loc) {
    return constAtom(Value::object(vm.builtin(id)), loc);
  };
  // The binding that is v's one use, if it is in the body's own bindings.
  auto soleUser = [&](const Var* v) -> Bind* {
    auto it = usedAt.find(v);
    return v && uses[v] == 1 && it != usedAt.end() ? &binds[it->second] : nullptr;
  };
  std::vector<bool> folded(binds.size(), false);
  for (size_t i = 0; i < binds.size(); ++i) {
    Bind& neg = binds[i];
    uint16_t k = neg.level;
    if (!neg.dst || !is(neg, NativeId::Sub, 1, k)) continue;
    Var* t = neg.dst;
    Atom g = neg.args[1];
    // (- (* x c)), the product used only here: the product makes t with -c.
    if (g.kind == Atom::Local && uses[g.var] == 1 && madeAt.count(g.var)) {
      Bind& m = binds[madeAt[g.var]];
      if (size_t c = isNumberConst(m.args.size() == 3 ? m.args[2] : Atom{}) ? 2 : 0;
          is(m, NativeId::Mul, 2, k) && c) {
        m.args[c] = negated(m.args[c]);
        m.dst = t;
        madeAt[t] = madeAt[g.var];
        folded[i] = true;
        continue;
      }
    }
    Bind* u = soleUser(t);
    if (!u || u->kind != Bind::Call || u->level != k) continue;
    size_t at = operandOf(*u, t);
    if (!at) continue;
    Bind* scaled = nullptr;  // the product whose constant takes the sign
    size_t constAt = 0;
    if (is(*u, NativeId::Mul, 2, k)) {
      if (isNumberConst(u->args[3 - at])) {
        scaled = u, constAt = 3 - at;
      } else if (Bind* v = soleUser(u->dst); v && is(*v, NativeId::Mul, 2, k)) {
        size_t w = operandOf(*v, u->dst);
        if (w && isNumberConst(v->args[3 - w])) scaled = v, constAt = 3 - w;
      }
      if (!scaled) continue;
      scaled->args[constAt] = negated(scaled->args[constAt]);
    } else if (is(*u, NativeId::Add, 2, k) || is(*u, NativeId::SensAdd, 2, k)) {
      Atom x = u->args[3 - at];
      bool sens = is(*u, NativeId::SensAdd, 2, k);
      u->args[0] = prim(sens ? NativeId::SensSub : NativeId::Sub, u->args[0].loc);
      u->args[1] = x;
      at = 2;
    } else {
      continue;
    }
    u->args[at] = g;
    if (g.kind == Atom::Local) usedAt[g.var] = static_cast<size_t>(u - binds.data());
    folded[i] = true;
  }
  // (*j (*j-inverse x)) is x: the image of the primal of a sensitivity, which ρ makes
  // where a primal was taken (the rule of *j-inverse gives *j of what reached it).
  for (size_t i = 0; i < binds.size(); ++i) {
    Bind& bd = binds[i];
    if (folded[i] || !is(bd, NativeId::StarJ, 1, 0) || bd.args[1].kind != Atom::Local) continue;
    auto it = madeAt.find(bd.args[1].var);
    if (it == madeAt.end() || folded[it->second] ||
        !is(binds[it->second], NativeId::StarJInverse, 1, 0))
      continue;
    Atom x = binds[it->second].args[1];
    bd.kind = Bind::Copy;
    bd.atom = x;
    bd.args.clear();
  }
  // (plus x (*j y)), y an arithmetic result at level k and (*j y) made for this sum
  // only: (*j (+ (*j-inverse x) y)), the sum taken at level k. x is then a sensitivity
  // at y's level plus one, a tagged number (or zero), so both give the same number, and
  // one tagged value is made instead of two (the operand's and plus's).
  std::vector<std::vector<Bind>> before(binds.size());  // bindings to insert before each
  for (size_t i = 0; i < binds.size(); ++i) {
    Bind& p = binds[i];
    if (folded[i] || !is(p, NativeId::Plus, 2, 0)) continue;
    for (size_t side = 1; side <= 2; ++side) {
      const Atom& sa = p.args[side];
      if (sa.kind != Atom::Local || uses[sa.var] != 1 || !madeAt.count(sa.var)) continue;
      size_t si = madeAt[sa.var];
      const Bind& tag = binds[si];
      if (folded[si] || !is(tag, NativeId::StarJ, 1, 0) || tag.args[1].kind != Atom::Local)
        continue;
      auto yi = madeAt.find(tag.args[1].var);
      if (yi == madeAt.end() || folded[yi->second]) continue;
      const Bind& yb = binds[yi->second];
      NativeId yid = yb.kind == Bind::Call ? builtinOf(vm, yb.args[0]) : NativeId::None;
      if (!isArithmetic(yid)) continue;
      Bind inv, add;
      inv.kind = add.kind = Bind::Call;
      inv.loc = add.loc = p.loc;
      inv.dst = module.newVar("");
      inv.args = {prim(NativeId::StarJInverse, p.loc), p.args[3 - side]};
      add.dst = module.newVar("");
      add.level = yb.level;
      add.args = {prim(NativeId::SensAdd, p.loc), localAtom(inv.dst, p.loc), tag.args[1]};
      p.args = {prim(NativeId::StarJ, p.loc), localAtom(add.dst, p.loc)};
      folded[si] = true;
      before[i].push_back(std::move(inv));
      before[i].push_back(std::move(add));
      break;
    }
  }
  std::vector<Bind> out;
  out.reserve(binds.size());
  for (size_t i = 0; i < binds.size(); ++i) {
    for (Bind& b : before[i]) out.push_back(std::move(b));
    if (!folded[i]) out.push_back(std::move(binds[i]));
  }
  binds = std::move(out);
}

}  // namespace dlam
