// ad_backward.cpp — the backward sweep ρ of the reverse transform: a backpropagator
// walks the tape of a block's bindings backwards, giving each binding's inputs their
// sensitivities (Sens, ad_sensitivity.h): a copy passes its own on, a closure gives
// its free variables theirs, an `if` or a call of a procedure calls the backpropagator
// φ kept for it, and a call of a primitive applies the primitive's reverse rule
// (ad_rules.h) to primal values recovered with *j-inverse.
#include "ad_simplify.h"
#include "ad_transformer.h"

namespace dlam::ad {

using namespace anf;

Lambda* Transformer::backprop(const Block* body, const Tape& tape, SrcLoc loc,
                               const std::string& name, const FinishFn& finish) {
  Lambda* bp = M.newLambda();
  bp->derived = true;
  bp->backprop = true;
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
      // Those of the values it keeps as primal values are their images'.
      const auto& fvs = bd.lambda->freeVars;
      spread(st, st.term(bd.dst), fvs.begin(), fvs.end(), bd.lambda->primalFree);
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
  Atom s = call(st.out, {prim(NativeId::BpResult),
                         call(st.out, {localAtom(bp_.at(bd.dst)), st.get(bd.dst)}),
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
  Native* n = calleeBuiltin(bd.args[0]);
  if (!n) {
    if (st.isZero(bd.dst)) {
      // The call's result gets no sensitivity: its backpropagator would return zeros.
      return;
    }
    rhoGenericCall(bd, st, true);
    return;
  }
  auto id = static_cast<NativeId>(n->id);
  if (n->flags & kHasVjp) {
    // A host function with a vector-Jacobian product: (%call-vjp h x... ybar) → list of x̄.
    if (st.isZero(bd.dst)) return;
    std::vector<Atom> args{globalAtom(vm_.intern("%call-vjp")), constAtom(Value::object(n))};
    for (size_t i = 1; i < bd.args.size(); ++i) args.push_back(primal(st, bd.args[i]));
    args.push_back(st.get(bd.dst));
    Atom parts = call(st.out, std::move(args));
    spread(st, termOf(parts), bd.args.begin() + 1, bd.args.end());
    return;
  }
  if (id == NativeId::Apply) {
    if (st.isZero(bd.dst)) return;
    Atom s = call(st.out, {localAtom(bp_.at(bd.dst)), st.get(bd.dst)});
    if (takes(bd.args[1])) addTo(st, bd.args[1], st.head(termOf(s)));
    size_t nfixed = bd.args.size() - 3;
    Atom parts =
        call(st.out, {globalAtom(vm_.intern("%apply-split")), st.materialize(st.tail(termOf(s))),
                      constAtom(Value::number(double(nfixed))), jAtom(st.out, bd.args.back())});
    spread(st, termOf(parts), bd.args.begin() + 2, bd.args.end());
    return;
  }
  if (st.isZero(bd.dst)) return;
  switch (static_cast<NativeId>(n->id)) {
    // ---- structural: on terms, see Sens ----
    case NativeId::Cons: {
      TermP s = st.term(bd.dst);
      if (takes(bd.args[1])) addTo(st, bd.args[1], st.head(s));
      if (takes(bd.args[2])) addTo(st, bd.args[2], st.tail(s));
      return;
    }
    case NativeId::List:
      spread(st, st.term(bd.dst), bd.args.begin() + 1, bd.args.end());
      return;
    case NativeId::Car:
    case NativeId::SCar:
      addTo(st, bd.args[1], st.pairTerm(st.term(bd.dst), nullptr));
      return;
    case NativeId::Cdr:
    case NativeId::SCdr:
      addTo(st, bd.args[1], st.pairTerm(nullptr, st.term(bd.dst)));
      return;
    case NativeId::Caar:
    case NativeId::Cadr:
    case NativeId::Cdar:
    case NativeId::Cddr:
    case NativeId::Caddr:
    case NativeId::Cdddr: {
      // Innermost access last: cadr = car of cdr, so the sensitivity wraps car then cdr.
      const char* path = cxrPath(id);
      TermP s = st.term(bd.dst);
      for (const char* p = path; *p; ++p)
        s = *p == 'a' ? st.pairTerm(s, nullptr) : st.pairTerm(nullptr, s);
      addTo(st, bd.args[1], s);
      return;
    }
    default:
      break;
  }
  Atom g = st.get(bd.dst);
  size_t argc = bd.args.size() - 1;
  const Atom* a = argc >= 1 ? &bd.args[1] : nullptr;
  const Atom* b = argc >= 2 ? &bd.args[2] : nullptr;
  uint16_t k = bd.level;
  auto op = [&](NativeId o, std::vector<Atom> xs) {
    xs.insert(xs.begin(), prim(o));
    return call(st.out, std::move(xs), k);
  };
  auto K = [&](double c) { return constJ(Value::number(c), k); };
  auto y = [&]() { return primal(st, localAtom(bd.dst)); };
  auto P = [&](const Atom& x) { return primal(st, x); };
  switch (id) {
    case NativeId::ListRef:
      addTo(st, *a, call(st.out, {globalAtom(vm_.intern("%sens-at")), g, P(*b)}));
      return;
    case NativeId::ListTail:
      addTo(st, *a, call(st.out, {globalAtom(vm_.intern("%sens-after")), g, P(*b)}));
      return;
    case NativeId::Reverse:
      addTo(st, *a,
            call(st.out, {globalAtom(vm_.intern("%sens-reverse")), g, jAtom(st.out, *a)}));
      return;
    case NativeId::Append: {
      std::vector<Atom> lists;
      for (size_t i = 1; i <= argc; ++i) lists.push_back(jAtom(st.out, bd.args[i]));
      Atom parts =
          call(st.out, {globalAtom(vm_.intern("%sens-append-split")), g, listOf(st.out, lists)});
      spread(st, termOf(parts), bd.args.begin() + 1, bd.args.end());
      return;
    }
    case NativeId::CheckXbar:
      addTo(st, bd.args[2], g);
      return;
    case NativeId::Materialize:
    case NativeId::RepResult:
    case NativeId::BpResult:
      addTo(st, *a, g);
      return;
    // ---- the AD operators ----
    case NativeId::StarJ:
      addTo(st, *a, call(st.out, {prim(NativeId::StarJInverse), g}));
      return;
    case NativeId::StarJInverse:
      addTo(st, *a, call(st.out, {prim(NativeId::StarJ), g}));
      return;
    case NativeId::AttachStarJ:
      // An attached value computes like its primal: its sensitivity is the
      // primal's, once. (The rep's own sensitivity, which matters only for
      // nested derivatives, flows through the *j-inverse that φ emitted.)
      addTo(st, *a, g);
      return;
    case NativeId::Plus:
      addTo(st, *a, g);
      addTo(st, *b, g);
      return;
    // ---- arithmetic (binary chains after expand) ----
    case NativeId::Add:
      addTo(st, *a, g);
      if (argc == 2) addTo(st, *b, g);
      return;
    case NativeId::Sub:
      if (argc == 1) {
        addTo(st, *a, op(NativeId::Sub, {g}));
      } else if (argc == 2) {
        addTo(st, *a, g);
        if (b->kind == Atom::Local) addTo(st, *b, op(NativeId::Sub, {g}));
      }
      return;
    case NativeId::Mul:
      if (argc == 1) addTo(st, *a, g);
      if (argc == 2 && a->kind == Atom::Local && b->kind == Atom::Local && a->var == b->var) {
        // d(a a) = 2 a da: one product, not two summed
        addTo(st, *a, op(NativeId::Mul, {op(NativeId::Mul, {g, P(*a)}), K(2)}));
        return;
      }
      if (argc == 2) {
        if (a->kind == Atom::Local) addTo(st, *a, op(NativeId::Mul, {g, P(*b)}));
        if (b->kind == Atom::Local) addTo(st, *b, op(NativeId::Mul, {g, P(*a)}));
      }
      return;
    case NativeId::Div:
      if (argc == 1) {
        // d(1/a) = -1/a² = -y²
        Atom yy = y();
        addTo(st, *a, op(NativeId::Sub, {op(NativeId::Mul, {g, op(NativeId::Mul, {yy, yy})})}));
      } else if (argc == 2) {
        Atom bb = P(*b);
        if (a->kind == Atom::Local) addTo(st, *a, op(NativeId::Div, {g, bb}));
        if (b->kind == Atom::Local)
          addTo(st, *b,
                op(NativeId::Sub, {op(NativeId::Div, {op(NativeId::Mul, {g, y()}), bb})}));
      }
      return;
    case NativeId::Expt: {
      Atom aa = P(*a), bb = P(*b);
      // A constant exponent's b - 1 is a constant too: computed here, it stays one
      // when this code is transformed again, and the rule for a variable exponent
      // (a^b log a, NaN for a < 0) never applies to it at the next level.
      // Likewise a^0 has derivative 0 and a^1 derivative 1, with no power left to
      // differentiate again (0 a^-1 would be NaN at a = 0).
      Value bv = b->kind == Atom::Const ? b->value : Value::undefined();
      int tags = 0;
      for (; isObj(bv, ObjType::Rev); ++tags) bv = static_cast<Rev*>(bv.asObject())->primal;
      if (bv.isNumber()) {
        double e = bv.asNumber();
        if (a->kind == Atom::Local && e != 0) {
          Atom da = e == 1 ? g
                           : op(NativeId::Mul,
                                {g, op(NativeId::Mul,
                                       {bb, op(NativeId::Expt,
                                               {aa, constJ(Value::number(e - 1), tags)})})});
          addTo(st, *a, da);
        }
        return;
      }
      // A variable exponent: d/da = b a^(b-1) and d/db = a^b log a. Factors that are 0
      // where the product must be are made the symbolic zero there (%zero-if-zero), so
      // the product is exactly 0: d/da at b = 0 is 0 also at a = 0 (not 0 * 0^-1); d/db
      // is 0 at a = 0 for every b (sign(a); not a^b * log 0), as in JAX (PyTorch: for
      // b >= 0), and where a^b underflows to 0 (not -0). The factors keep their
      // derivatives, so mixed second derivatives are right (1/a at b = 0). d/db is NaN
      // for a < 0, where the power is not differentiable in b.
      if (a->kind == Atom::Local)
        addTo(st, *a,
              op(NativeId::Mul,
                 {g,
                  op(NativeId::Mul, {op(NativeId::ZeroIfZero, {bb}),
                                     op(NativeId::Expt, {aa, op(NativeId::Sub, {bb, K(1)})})})}));
      if (b->kind == Atom::Local) {
        Atom mask = op(NativeId::Mul, {op(NativeId::ZeroIfZero, {op(NativeId::Sign, {aa})}),
                                       op(NativeId::ZeroIfZero, {y()})});
        addTo(st, *b, op(NativeId::Mul, {g, op(NativeId::Mul, {mask, op(NativeId::Log, {aa})})}));
      }
      return;
    }
    case NativeId::Sqrt:
      addTo(st, *a, op(NativeId::Div, {g, op(NativeId::Mul, {K(2), y()})}));
      return;
    case NativeId::Exp:
      addTo(st, *a, op(NativeId::Mul, {g, y()}));
      return;
    case NativeId::Log:
      if (argc == 1) {
        addTo(st, *a, op(NativeId::Div, {g, P(*a)}));
      } else {
        Atom aa = P(*a), bb = P(*b);
        Atom lb = op(NativeId::Log, {bb});
        if (a->kind == Atom::Local)
          addTo(st, *a, op(NativeId::Div, {g, op(NativeId::Mul, {aa, lb})}));
        if (b->kind == Atom::Local)
          addTo(st, *b,
                op(NativeId::Sub, {op(NativeId::Div, {op(NativeId::Mul, {g, y()}),
                                                      op(NativeId::Mul, {bb, lb})})}));
      }
      return;
    case NativeId::Log1p:
      addTo(st, *a, op(NativeId::Div, {g, op(NativeId::Add, {K(1), P(*a)})}));
      return;
    case NativeId::Expm1:
      addTo(st, *a, op(NativeId::Mul, {g, op(NativeId::Add, {y(), K(1)})}));
      return;
    case NativeId::Sin:
      addTo(st, *a, op(NativeId::Mul, {g, op(NativeId::Cos, {P(*a)})}));
      return;
    case NativeId::Cos:
      addTo(st, *a, op(NativeId::Sub, {op(NativeId::Mul, {g, op(NativeId::Sin, {P(*a)})})}));
      return;
    case NativeId::Tan: {
      Atom yy = y();
      addTo(st, *a,
            op(NativeId::Mul, {g, op(NativeId::Add, {K(1), op(NativeId::Mul, {yy, yy})})}));
      return;
    }
    case NativeId::Asin:
    case NativeId::Acos: {
      Atom aa = P(*a);
      Atom d =
          op(NativeId::Div,
             {g, op(NativeId::Sqrt, {op(NativeId::Sub, {K(1), op(NativeId::Mul, {aa, aa})})})});
      addTo(st, *a, id == NativeId::Asin ? d : op(NativeId::Sub, {d}));
      return;
    }
    case NativeId::Atan:
      if (argc == 1) {
        Atom aa = P(*a);
        addTo(st, *a,
              op(NativeId::Div, {g, op(NativeId::Add, {K(1), op(NativeId::Mul, {aa, aa})})}));
      } else {
        // atan2(a, b): d/da = b/(a²+b²), d/db = -a/(a²+b²)
        Atom aa = P(*a), bb = P(*b);
        Atom r2 = op(NativeId::Add, {op(NativeId::Mul, {aa, aa}), op(NativeId::Mul, {bb, bb})});
        if (a->kind == Atom::Local)
          addTo(st, *a, op(NativeId::Div, {op(NativeId::Mul, {g, bb}), r2}));
        if (b->kind == Atom::Local)
          addTo(st, *b, op(NativeId::Sub, {op(NativeId::Div, {op(NativeId::Mul, {g, aa}), r2})}));
      }
      return;
    case NativeId::Sinh:
      addTo(st, *a, op(NativeId::Mul, {g, op(NativeId::Cosh, {P(*a)})}));
      return;
    case NativeId::Cosh:
      addTo(st, *a, op(NativeId::Mul, {g, op(NativeId::Sinh, {P(*a)})}));
      return;
    case NativeId::Tanh: {
      Atom yy = y();
      addTo(st, *a,
            op(NativeId::Mul, {g, op(NativeId::Sub, {K(1), op(NativeId::Mul, {yy, yy})})}));
      return;
    }
    case NativeId::Abs:
      addTo(st, *a, op(NativeId::Mul, {g, op(NativeId::Sign, {P(*a)})}));
      return;
    case NativeId::ZeroIfZero:
      addTo(st, *a, g);
      return;  // the identity, as a function
    // ---- vectors: element i, and the sensitivity of a vector from that of element i
    // (sparse: object.h), whose own sensitivity is element i of its sensitivity ----
    case NativeId::VectorRef: {
      if (a->kind != Atom::Local) return;
      // The node goes in front of the sensitivity v has so far (%vector-onehot's
      // fourth argument), rather than being made and then copied by plus.
      TermP so = st.term(a->var);
      if (!so || so->pair || a->var == flatSelf_) {
        addTo(st, *a, op(NativeId::VectorOnehot, {P(*a), P(*b), g}));
        return;
      }
      st.replace(a->var, op(NativeId::VectorOnehot, {P(*a), P(*b), g, so->atom}));
      return;
    }
    case NativeId::VectorOnehot:
      if (argc >= 3 && bd.args[3].kind == Atom::Local)
        addTo(st, bd.args[3], op(NativeId::VectorRef, {g, P(*b)}));
      if (argc == 4) addTo(st, bd.args[4], g);  // the sensitivity the node went in front of
      return;
    case NativeId::Max:
    case NativeId::Min: {
      if (argc == 1) addTo(st, *a, g);
      if (argc != 2) return;
      // The sensitivity goes to the argument that was selected (the first on ties).
      Atom sel = id == NativeId::Max ? op(NativeId::Step, {P(*a), P(*b)})
                                     : op(NativeId::Step, {P(*b), P(*a)});
      addTo(st, *a, op(NativeId::Mul, {g, sel}));
      addTo(st, *b, op(NativeId::Mul, {g, op(NativeId::Sub, {K(1), sel})}));
      return;
    }
    default:
      // Comparisons, predicates, rounding and the rest: no sensitivity flows.
      return;
  }
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
