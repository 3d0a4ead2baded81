// ad_backward.cpp — the backward sweep ρ of the reverse transform: a backpropagator
// walks the tape of a block's bindings backwards, giving each binding's inputs their
// sensitivities (Sens, ad_sensitivity.h): a copy passes its own on, a closure gives
// its free variables theirs, an `if` or a call of a procedure calls the backpropagator
// φ kept for it, and a call of a primitive applies the primitive's reverse rule
// (ad_rules.h) to primal values recovered with *j-inverse.
#include "ad_rules.h"
#include "ad_simplify.h"
#include "ad_transformer.h"

namespace dlam::ad {

using namespace anf;

Lambda* Transformer::backprop(const Block* body, const Tape& tape, SrcLoc loc,
                              const std::string& name, const FinishFn& finish) {
  Lambda* bp = M.newLambda();
  bp->derived = true;
  bp->name = name.empty() ? "backprop" : "backprop:" + name;
  bp->file = file_;
  bp->loc = loc;
  SrcLoc savedFnLoc = fnLoc_;
  fnLoc_ = loc.known() ? loc : fnLoc_;
  Var* ybar = M.newVar("ybar");
  bp->params.push_back(ybar);
  bp->body = M.newBlock();
  Sens st{this, bp->body, {}};
  primalCache_.clear();
  if (body->result.kind == Atom::Local)
    st.cur[body->result.var] = Sens::atomTerm(localAtom(ybar, loc));
  for (size_t i = tape.size(); i-- > 0;) {
    const Bind* bd = tape[i];
    loc_ = bd->loc;
    // A run of recursive closures is distributed together (see rhoRecGroup).
    if (bd->kind == Bind::MakeLambda && bd->dst->rec) {
      size_t start = i;
      while (start > 0 && tape[start - 1]->kind == Bind::MakeLambda && tape[start - 1]->dst->rec)
        --start;
      rhoRecGroup(tape, start, i, st);
      i = start;
      continue;
    }
    rhoBind(*bd, st);
  }
  bp->body->result = finish(bp->body, st);
  simplifyBackpropagator(vm_, M, bp->body);
  computeFreeVars(bp);
  fnLoc_ = savedFnLoc;
  return bp;
}

// The primal value of a variable inside the backpropagator: *j-inverse of its image.
Atom Transformer::primal(Sens& st, const Atom& a) {
  if (a.kind == Atom::Const) return a;
  if (a.kind == Atom::Global) return a;
  if (auto fw = P_.find(a.var); fw != P_.end()) return localAtom(fw->second, loc_);
  auto it = primalCache_.find(a.var);
  if (it != primalCache_.end()) return it->second;
  Atom p = call(st.out, {prim(NativeId::StarJInverse), localAtom(J_.at(a.var))});
  primalCache_[a.var] = p;
  return p;
}

void Transformer::rhoBind(const Bind& bd, Sens& st) {
  switch (bd.kind) {
    case Bind::Copy:
      if (bd.atom.kind == Atom::Local && !st.isZero(bd.dst)) st.add(bd.atom.var, st.get(bd.dst));
      return;
    case Bind::Rec:
    case Bind::DefGlobal:
      return;
    case Bind::MakeLambda: {
      if (st.isZero(bd.dst)) return;
      // A closure's sensitivity is the list of its free variables' sensitivities.
      const auto& fvs = bd.lambda->freeVars;
      spread(st, st.term(bd.dst), fvs.begin(), fvs.end());
      return;
    }
    case Bind::If: {
      auto it = branchOuter_.find(&bd);
      if (it == branchOuter_.end() || st.isZero(bd.dst)) return;
      Atom s = call(st.out, {localAtom(bp_.at(bd.dst)), st.get(bd.dst)});
      spread(st, termOf(s), it->second.begin(), it->second.end());
      return;
    }
    case Bind::Call:
      rhoCall(bd, st);
      return;
  }
}

void Transformer::rhoGenericCall(const Bind& bd, Sens& st, bool calleeSens) {
  Atom s = call(
      st.out, {prim(NativeId::BpResult), call(st.out, {localAtom(bp_.at(bd.dst)), st.get(bd.dst)}),
               localAtom(bp_.at(bd.dst))});
  // (cons fbar xbar), xbar being the argument's sensitivity or the list of them.
  if (calleeSens && takes(bd.args[0]) && !closedRec_.count(bd.args[0].var))
    addTo(st, bd.args[0], st.head(termOf(s)));
  size_t n = bd.args.size() - 1;
  if (n == 0) return;
  TermP d = st.tail(termOf(s));
  if (n == 1)
    addTo(st, bd.args[1], d);
  else
    spread(st, d, bd.args.begin() + 1, bd.args.end());
}

void Transformer::rhoCall(const Bind& bd, Sens& st) {
  // The call's result gets no sensitivity: its backpropagator would return zeros.
  if (st.isZero(bd.dst)) return;
  Native* n = calleeBuiltin(bd.args[0]);
  if (!n) {
    rhoGenericCall(bd, st, true);
    return;
  }
  if (n->flags & kHasVjp) {
    // A host function with a vector-Jacobian product: (%call-vjp h x... ybar) → list of x̄.
    std::vector<Atom> args{globalAtom(vm_.librarySymbol("%call-vjp")), constAtom(Value::object(n))};
    for (size_t i = 1; i < bd.args.size(); ++i) args.push_back(primal(st, bd.args[i]));
    args.push_back(st.get(bd.dst));
    Atom parts = call(st.out, std::move(args));
    spread(st, termOf(parts), bd.args.begin() + 1, bd.args.end());
    return;
  }
  // A primitive called with a number of arguments it does not take raises its arity
  // error in the forward pass: the backward pass never runs for it, and its reverse rule
  // (which reads the arguments it takes) must not be applied to the ones it was given.
  auto argc = static_cast<long>(bd.args.size()) - 1;
  if (argc < n->minArgs || (n->maxArgs >= 0 && argc > n->maxArgs)) return;
  reverseCall(*this, bd, st, rulesOf(static_cast<NativeId>(n->id)));
}

// Free variables of a synthesised (straight-line) backpropagator, first use first.
void Transformer::computeFreeVars(Lambda* lam) {
  std::unordered_set<const Var*> bound(lam->params.begin(), lam->params.end());
  std::unordered_set<const Var*> seen;
  auto use = [&](const Atom& a) {
    if (a.kind == Atom::Local && !bound.count(a.var) && seen.insert(a.var).second)
      lam->freeVars.push_back(a.var);
  };
  for (const Bind& bd : lam->body->binds) {
    use(bd.atom);
    for (const Atom& a : bd.args) use(a);
    if (bd.dst) bound.insert(bd.dst);
  }
  use(lam->body->result);
}

}  // namespace dlam::ad
