// ad_sensitivity.h — the algebra of sensitivity terms in the backward sweep ρ.
//
// Inside one backpropagator body, each primal variable has a current sensitivity
// (Sens). A sensitivity built by the rules of car, cdr and their compositions stays a
// term (a pair of terms) until a value is needed: contributions to the same variable
// merge part by part at transform time, and a pair's term that meets the rule of cons
// (or list) is split without running anything. So the sensitivity of x in (car x),
// (cadr x), (cdr x) costs two conses, not a cons per use and a plus per merge. The
// helpers below give the parts of a list- or environment-shaped sensitivity to the
// variables they belong to.
#pragma once
#include <algorithm>
#include <iterator>
#include <memory>
#include <unordered_map>
#include <vector>

#include "anf.h"

namespace dlam::ad {

class Transformer;

struct Term {
  anf::Atom atom;                  // a sensitivity value (when !pair)
  std::shared_ptr<Term> car, cdr;  // the parts of a pair (null: zero)
  bool pair = false;
  int depth = 0;
};
using TermP = std::shared_ptr<Term>;
inline constexpr int kMaxTermDepth = 8;  // deeper pairs are built right away

struct Sens {
  Transformer* t;
  anf::Block* out;
  std::unordered_map<const anf::Var*, TermP> cur;

  anf::Atom zero() const;
  // The sensitivity of v as a value (made from its term if it is one).
  anf::Atom get(const anf::Var* v);
  TermP term(const anf::Var* v) const {
    auto it = cur.find(v);
    return it == cur.end() ? nullptr : it->second;
  }
  bool isZero(const anf::Var* v) const { return !cur.count(v); }
  static TermP atomTerm(const anf::Atom& a) {
    auto tm = std::make_shared<Term>();
    tm->atom = a;
    return tm;
  }
  TermP pairTerm(TermP a, TermP d);
  anf::Atom materialize(const TermP& tm);
  TermP merge(const TermP& a, const TermP& b);
  // Makes e the whole sensitivity of v, in place of what it had (e takes that in).
  void replace(const anf::Var* v, const anf::Atom& e) { cur[v] = atomTerm(e); }
  void add(const anf::Var* v, const anf::Atom& e) {
    if (e.kind == anf::Atom::Const && e.value.isZero()) return;
    addTerm(v, atomTerm(e));
  }
  void addTerm(const anf::Var* v, TermP e);
  // The parts of a pair's sensitivity: taken at transform time when it is a term.
  TermP head(const TermP& tm) { return part(tm, true); }
  TermP tail(const TermP& tm) { return part(tm, false); }
  TermP part(const TermP& tm, bool car);
};

inline TermP termOf(const anf::Atom& a) { return Sens::atomTerm(a); }

// Whether a target takes a sensitivity: a variable, or an atom that is a local variable.
inline bool takes(const anf::Var*) { return true; }
inline bool takes(const anf::Atom& a) { return a.kind == anf::Atom::Local; }
inline void addTo(Sens& st, const anf::Var* v, TermP e) { st.addTerm(v, std::move(e)); }
inline void addTo(Sens& st, const anf::Atom& a, TermP e) {
  if (a.kind == anf::Atom::Local) st.addTerm(a.var, std::move(e));
}
inline void addTo(Sens& st, const anf::Atom& a, const anf::Atom& e) {
  if (a.kind == anf::Atom::Local) st.add(a.var, e);
}

// Gives the parts of the environment-shaped sensitivity s of a closure to its free
// variables `vars`, except `skip` (whose part is zero or handed on already).
void spreadExcept(Sens& st, TermP s, const std::vector<anf::Var*>& vars, const anf::Var* skip);

// Gives the elements of the list-shaped sensitivity s to the targets, in order
// (variables, or atoms of which only local variables take a sensitivity).
template <class It>
void spread(Sens& st, TermP s, It first, It last) {
  for (It i = first; i != last; ++i) {
    if (takes(*i)) addTo(st, *i, st.head(s));
    if (std::none_of(std::next(i), last, [](const auto& t) { return takes(t); })) return;
    s = st.tail(s);
  }
}

}  // namespace dlam::ad
