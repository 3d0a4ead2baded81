// ad_sensitivity.cpp — the algebra of sensitivity terms in the backward sweep ρ: how
// a variable's sensitivity is kept (a value, or a pair of terms), merged with another,
// taken apart and made a value; and how a list- or environment-shaped sensitivity is
// given to the variables it belongs to. See ad_sensitivity.h.
#include "ad_sensitivity.h"

#include "ad_transformer.h"

namespace dlam::ad {

using namespace anf;

Atom Sens::zero() const { return constAtom(Value::zero(), t->loc_); }

Atom Sens::get(const Var* v) {
  auto it = cur.find(v);
  if (it == cur.end()) return zero();
  Atom a = materialize(it->second);
  if (it->second->pair) it->second = atomTerm(a);
  return a;
}

TermP Sens::pairTerm(TermP a, TermP d) {
  if (!a && !d) return nullptr;
  auto tm = std::make_shared<Term>();
  tm->pair = true;
  tm->depth = 1 + std::max(a ? a->depth : 0, d ? d->depth : 0);
  tm->car = std::move(a);
  tm->cdr = std::move(d);
  if (tm->depth > kMaxTermDepth) return atomTerm(materialize(tm));
  return tm;
}

Atom Sens::materialize(const TermP& tm) {
  if (!tm) return zero();
  if (!tm->pair) return tm->atom;
  Atom a = materialize(tm->car), d = materialize(tm->cdr);
  // (cons (%scar s) (%scdr s)) is s (a zero s stands for a pair of zeros).
  if (Var* s = t->wholeOf(a, d)) return localAtom(s, t->loc_);
  return t->call(out, {t->prim(NativeId::Cons), a, d});
}

TermP Sens::merge(const TermP& a, const TermP& b) {
  if (!a) return b;
  if (!b) return a;
  if (a->pair && b->pair) return pairTerm(merge(a->car, b->car), merge(a->cdr, b->cdr));
  if (a->pair != b->pair) {
    // A value and a pair still being built (a list walked by car and cdr, whose
    // rest also went on): the value is taken apart (%scar, %scdr) and the sum
    // stays a term, instead of the pair being made only for plus to add it.
    const TermP& p = a->pair ? a : b;
    const TermP& v = a->pair ? b : a;
    return pairTerm(merge(head(v), p->car), merge(tail(v), p->cdr));
  }
  if (uint16_t level; t->numericPair(a, b, level))
    return atomTerm(t->call(out, {t->prim(NativeId::SensAdd), a->atom, b->atom}, level));
  return atomTerm(t->call(out, {t->prim(NativeId::Plus), materialize(a), materialize(b)}));
}

void Sens::addTerm(const Var* v, TermP e) {
  if (!e) return;
  if (v == t->flatSelf_) {
    // The self-recursive closure whose backpropagator this is: its sensitivity
    // is handed on to its other free variables at once (see flatSelf_).
    spreadExcept(*this, e, *t->flatFree_, v);
    return;
  }
  auto it = cur.find(v);
  if (it == cur.end()) {
    cur[v] = std::move(e);
    return;
  }
  it->second = merge(it->second, e);
}

TermP Sens::part(const TermP& tm, bool car) {
  if (!tm) return nullptr;
  if (tm->pair) return car ? tm->car : tm->cdr;
  Atom p = t->call(out, {t->prim(car ? NativeId::SCar : NativeId::SCdr), tm->atom});
  if (tm->atom.kind == Atom::Local) t->partOf_[p.var] = {tm->atom.var, car};
  return atomTerm(p);
}

// s if a and d are (%scar s) and (%scdr s), else null.
Var* Transformer::wholeOf(const Atom& a, const Atom& d) const {
  if (a.kind != Atom::Local || d.kind != Atom::Local) return nullptr;
  auto x = partOf_.find(a.var), y = partOf_.find(d.var);
  if (x == partOf_.end() || y == partOf_.end()) return nullptr;
  return x->second.first == y->second.first && x->second.second && !y->second.second
             ? x->second.first
             : nullptr;
}

// Whether two sensitivity terms of one variable are numbers to add at `level`: one
// of them (at least) is an arithmetic result (arith_), so the variable is a number,
// its sensitivities are numbers (or zero) at that level, and plus of them is their
// sum (or fails, as + does).
bool Transformer::numericPair(const TermP& a, const TermP& b, uint16_t& level) const {
  if (a->pair || b->pair) return false;
  auto levelOf = [&](const Atom& x) -> int {
    auto it = x.kind == Atom::Local ? arith_.find(x.var) : arith_.end();
    return it == arith_.end() ? -1 : it->second;
  };
  int x = levelOf(a->atom), y = levelOf(b->atom);
  if ((x < 0 && y < 0) || (x >= 0 && y >= 0 && x != y)) return false;
  level = static_cast<uint16_t>(std::max(x, y));
  return true;
}

void spreadExcept(Sens& st, TermP s, const std::vector<Var*>& vars, const Var* skip) {
  for (size_t i = 0; i < vars.size(); ++i) {
    if (vars[i] != skip) st.addTerm(vars[i], st.head(s));
    if (std::none_of(vars.begin() + static_cast<std::ptrdiff_t>(i) + 1, vars.end(),
                     [skip](const Var* v) { return v != skip; }))
      return;
    s = st.tail(s);
  }
}

}  // namespace dlam::ad
