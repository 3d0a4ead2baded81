// ad_forward.cpp — the forward sweep φ of the reverse transform: each binding of the
// primal becomes its image's (phiBind), primitives applied as their row in ad_rules.h
// says, other calls by the rep-function convention; conditionals in tail position pass
// their backpropagators through (phiTail), others return (cons value backprop) from
// their branches (phiIf). Numeric primitives run on primal values, recovered once per
// variable (Uses). The blocks a sweep leaves to do go to runTasks, so a
// chain of conditionals (anf::chainBranch) costs no C++ stack, and the variables each
// `if` of a chain needs from outside are found for the whole chain in one pass (outerOf).
#include <algorithm>

#include "ad_rules.h"
#include "ad_transformer.h"

namespace dlam::ad {

using namespace anf;

namespace {

// Whether φ applies the native n (calleeBuiltin, null for a procedure) to primal values.
bool onPrimals(const Native* n) {
  return n && rulesOf(static_cast<NativeId>(n->id)).forward == Forward::OnPrimals;
}

}  // namespace

Transformer::Uses Transformer::classify(const Block* body) {
  Uses u;
  std::vector<std::pair<const Var*, const Var*>> copies;
  auto tag = [&](const Atom& a) {
    if (a.kind == Atom::Local) u.tagged.insert(a.var);
  };
  forEachBlock(body, [&](const Block* b) {
    for (const Bind& bd : b->binds) {
      switch (bd.kind) {
        case Bind::Call: {
          Native* n = calleeBuiltin(bd.args[0]);
          bool numeric = onPrimals(n);
          for (const Atom& a : bd.args)
            if (numeric && a.kind == Atom::Local)
              u.arith.insert(a.var);
            else
              tag(a);
          break;
        }
        case Bind::If:  // its test is used as a test; its branches are blocks of their own
          break;
        case Bind::MakeLambda:  // a closure captures the tagged values
          for (Var* f : bd.lambda->freeVars) u.tagged.insert(f);
          break;
        case Bind::Copy:
          if (bd.atom.kind == Atom::Local) copies.emplace_back(bd.dst, bd.atom.var);
          break;
        default:
          tag(bd.atom);
          break;
      }
    }
    tag(b->result);
  });
  // A copy's source is used as the copy is (copies come before their uses).
  for (bool changed = true; changed;) {
    changed = false;
    for (auto [dst, src] : copies) {
      if (u.tagged.count(dst) && u.tagged.insert(src).second) changed = true;
      if (u.arith.count(dst) && u.arith.insert(src).second) changed = true;
    }
  }
  return u;
}

// After v is bound in φ: recover its primal if a numeric primitive will use it.
void Transformer::notePrimal(Block* out, const Var* v) {
  if (!uses_.arith.count(v) || P_.count(v)) return;
  Var* p = fresh(v, "'");
  call(out, {prim(NativeId::StarJInverse), localAtom(J_.at(v), loc_)}, 0, p);
  P_[v] = p;
}

// The primal of an atom in φ (a constant or a global is its own primal).
Atom Transformer::primalFwd(Block* out, const Atom& a) {
  if (a.kind != Atom::Local) return a;
  auto it = P_.find(a.var);
  if (it != P_.end()) return localAtom(it->second, a.loc);
  return call(out, {prim(NativeId::StarJInverse), jAtom(out, a)});
}

// The test of a conditional: its primal when there is one (truthiness is the same).
Atom Transformer::testAtom(Block* out, const Atom& a) {
  if (a.kind == Atom::Local) {
    auto it = P_.find(a.var);
    if (it != P_.end()) return localAtom(it->second, a.loc);
  }
  return jAtom(out, a);
}

Atom Transformer::phiBlock(const Block* b, Block* out, Tape& tape) {
  if (stack_.exceeded()) fail(loc_, file_, "*j: expression nested too deeply to transform");
  for (const Bind& bd : b->binds) {
    loc_ = bd.loc;
    for (const Bind* e : expand(bd)) {
      loc_ = e->loc;
      phiBind(*e, out);
      if (e->dst) {
        notePrimal(out, e->dst);
        def_[e->dst] = e;
      }
      tape.push_back(e);
    }
  }
  loc_ = b->result.loc.known() ? b->result.loc : loc_;
  return jAtom(out, b->result);
}

// n-ary arithmetic becomes a chain of binary calls (new primal bindings).
std::vector<const Bind*> Transformer::expand(const Bind& bd) {
  if (bd.kind != Bind::Call) return {&bd};
  Native* n = calleeBuiltin(bd.args[0]);
  if (!n) return {&bd};
  auto id = static_cast<NativeId>(n->id);
  size_t argc = bd.args.size() - 1;
  bool chain = id == NativeId::Add || id == NativeId::Mul || id == NativeId::Min ||
               id == NativeId::Max || ((id == NativeId::Sub || id == NativeId::Div) && argc >= 2);
  if (!chain) return {&bd};
  if (argc == 2) return {&bd};
  std::vector<const Bind*> out;
  if (argc == 0) {
    // (+) = 0, (*) = 1
    Bind& c = synth_.emplace_back();
    c.kind = Bind::Copy;
    c.dst = bd.dst;
    c.loc = bd.loc;
    c.atom = constJ(Value::number(id == NativeId::Add ? 0 : 1), bd.level);
    out.push_back(&c);
    return out;
  }
  if (argc == 1) return {&bd};  // (+ x), (* x), (max x): checked, identity derivative
  Atom acc = bd.args[1];
  for (size_t i = 2; i <= argc; ++i) {
    Bind& c = synth_.emplace_back();
    c.kind = Bind::Call;
    c.loc = bd.loc;
    c.level = bd.level;
    c.args = {bd.args[0], acc, bd.args[i]};
    c.dst = i == argc ? bd.dst : M.newVar("");
    acc = localAtom(c.dst, bd.loc);
    out.push_back(&c);
  }
  return out;
}

void Transformer::phiBind(const Bind& bd, Block* out) {
  switch (bd.kind) {
    case Bind::Copy: {
      // A copy shares its source's primal; its image is made only if used.
      if (bd.atom.kind == Atom::Local)
        if (auto p = P_.find(bd.atom.var); p != P_.end()) {
          P_[bd.dst] = p->second;
          if (!uses_.tagged.count(bd.dst)) return;
        }
      Atom a = jAtom(out, bd.atom);
      Bind c;
      c.kind = Bind::Copy;
      c.dst = jDst(bd.dst);
      c.atom = a;
      emitTo(out, std::move(c));
      return;
    }
    case Bind::Rec: {
      Bind r;
      r.kind = Bind::Rec;
      r.loc = bd.loc.known() ? bd.loc : fnLoc_;
      for (Var* v : bd.recVars) r.recVars.push_back(J_[v] = fresh(v, "`"));
      out->binds.push_back(std::move(r));
      return;
    }
    case Bind::DefGlobal:
      fail(bd.loc, file_, "*j: cannot transform a top-level definition");
    case Bind::MakeLambda: {
      const Var* savedSelf = flatSelf_;
      const std::vector<Var*>* savedFree = flatFree_;
      bool flat = selfRec_.count(bd.dst) &&
                  std::count(bd.lambda->freeVars.begin(), bd.lambda->freeVars.end(), bd.dst);
      flatSelf_ = flat ? bd.dst : nullptr;
      flatFree_ = flat ? &bd.lambda->freeVars : nullptr;
      Lambda* t = transformLambda(bd.lambda);
      flatSelf_ = savedSelf;
      flatFree_ = savedFree;
      Bind m;
      m.kind = Bind::MakeLambda;
      m.loc = bd.loc;
      m.lambda = t;
      m.dst = J_.count(bd.dst) ? J_[bd.dst] : (J_[bd.dst] = fresh(bd.dst, "`"));
      emitTo(out, std::move(m));
      return;
    }
    case Bind::If:
      phiIf(bd, out);
      return;
    case Bind::Call:
      phiCall(bd, out);
      return;
  }
}

// φ of an argument of a call: jAtom's, but a global or a constant, whose sensitivity
// the backward sweep drops (takes), is tagged as a constant (VM::starJConstant), so that
// the callee may leave its sensitivity uncomputed: the library's array procedures skip
// the product that would give it (%vjp-rep-dual, prelude.dlam).
Atom Transformer::jArg(Block* b, const Atom& a) {
  switch (a.kind) {
    case Atom::Local:
      return jAtom(b, a);
    case Atom::Const:
      return constAtom(vm_.starJConstant(a.value), a.loc);
    case Atom::Global:
      return call(b, {prim(NativeId::StarJConstant), a});
  }
  return a;
}

Var* Transformer::jDst(const Var* v) {
  auto it = J_.find(v);
  if (it != J_.end()) return it->second;
  return J_[v] = fresh(v, "`");
}

void Transformer::phiCall(const Bind& bd, Block* out) {
  Native* n = calleeBuiltin(bd.args[0]);
  if (onPrimals(n)) {
    std::vector<Atom> args{constAtom(Value::object(n), loc_)};
    for (size_t i = 1; i < bd.args.size(); ++i) args.push_back(primalFwd(out, bd.args[i]));
    Var* p = fresh(bd.dst, "'");
    call(out, std::move(args), bd.level, p);
    P_[bd.dst] = p;
    if (uses_.tagged.count(bd.dst))
      call(out, {prim(NativeId::StarJ), localAtom(p, loc_)}, 0, jDst(bd.dst));
    return;
  }
  std::vector<Atom> jargs;
  for (size_t i = 1; i < bd.args.size(); ++i) jargs.push_back(jArg(out, bd.args[i]));
  Var* dst = jDst(bd.dst);
  if (n) {
    std::vector<Atom> args{constAtom(Value::object(n), loc_)};
    args.insert(args.end(), jargs.begin(), jargs.end());
    switch (rulesOf(static_cast<NativeId>(n->id)).forward) {
      case Forward::OnImages:
        call(out, std::move(args), 0, dst);
        return;
      case Forward::Own:
        if (n->id == static_cast<uint16_t>(NativeId::AttachStarJ)) {
          // *j of (attach-*j v rep) is rep, and rep = (*j-inverse (*j rep)); rep
          // remembers (attach-*j v rep) as its *j-inverse (%attached-image). With
          // another number of arguments, attach-*j itself reports them when it runs.
          if (jargs.size() == 2)
            call(out, {prim(NativeId::AttachedImage), jargs[0], jargs[1]}, 0, dst);
          else
            call(out, std::move(args), 0, dst);
        } else {  // apply
          Atom t = call(out, std::move(args));
          call(out, {prim(NativeId::Car), t}, 0, dst);
          bp_[bd.dst] = call(out, {prim(NativeId::Cdr), t}).var;
        }
        return;
      case Forward::Lifted:
      case Forward::OnPrimals:  // done above
        call(out, std::move(args), static_cast<uint16_t>(bd.level + 1), dst);
        return;
    }
  }
  // A procedure following the rep-function convention.
  Atom f = jAtom(out, bd.args[0]);
  std::vector<Atom> args{f};
  args.insert(args.end(), jargs.begin(), jargs.end());
  Atom t = call(out, {prim(NativeId::RepResult), call(out, std::move(args)), f});
  call(out, {prim(NativeId::Car), t}, 0, dst);
  bp_[bd.dst] = call(out, {prim(NativeId::Cdr), t}).var;
}

// Adds block b to `seen`, with everything nested in it; without its last binding
// when `butLast`. Its own walk rather than anf::forEachBind: leaving out the last
// binding leaves out the blocks nested in it too (the rest of a chain of
// conditionals, whose variables outerOf has already), which keeps outerOf linear in
// the length of the chain.
void Transformer::varsOf(const Block* top, bool butLast, VarsSeen& seen) {
  std::vector<const Block*> work{top};
  auto use = [&](const Atom& a) {
    if (a.kind == Atom::Local) seen.used.insert(a.var);
  };
  while (!work.empty()) {
    const Block* b = work.back();
    work.pop_back();
    size_t n = b->binds.size() - (b == top && butLast ? 1 : 0);
    for (size_t i = 0; i < n; ++i) {
      const Bind& bd = b->binds[i];
      if (bd.dst) seen.bound.insert(bd.dst);
      for (Var* v : bd.recVars) seen.bound.insert(v);
      use(bd.atom);
      for (const Atom& a : bd.args) use(a);
      if (bd.lambda)
        for (Var* v : bd.lambda->freeVars) seen.used.insert(v);
      if (bd.thenB) work.push_back(bd.thenB);
      if (bd.elseB) work.push_back(bd.elseB);
    }
    use(b->result);
  }
}

// The variables bound outside the `if` ifb that its branches use, in order of id.
// Found for the rest of its chain of conditionals at once, innermost link first:
// a link's are those of the next link and of its own parts (the branch where the
// chain stops, the bindings before the next link), less those its parts bind.
const std::vector<Var*>& Transformer::outerOf(const Bind& ifb) {
  if (auto it = outer_.find(&ifb); it != outer_.end()) return it->second;
  std::vector<const Bind*> links{&ifb};
  while (const Block* on = chainBranch(*links.back())) {
    const Bind* next = tailIf(on);
    if (outer_.count(next)) break;
    links.push_back(next);
  }
  for (size_t k = links.size(); k-- > 0;) {
    const Bind& bd = *links[k];
    const Block* on = chainBranch(bd);
    VarsSeen seen;
    if (!on) {
      varsOf(bd.thenB, false, seen);
      varsOf(bd.elseB, false, seen);
    } else {
      varsOf(on == bd.thenB ? bd.elseB : bd.thenB, false, seen);
      varsOf(on, true, seen);
      const Bind* next = tailIf(on);
      if (next->atom.kind == Atom::Local) seen.used.insert(next->atom.var);
      seen.bound.insert(next->dst);
      for (Var* v : outer_.at(next)) seen.used.insert(v);
    }
    std::vector<Var*>& out = outer_[&bd];
    for (Var* v : seen.used)
      if (!seen.bound.count(v)) out.push_back(v);
  }
  return outer_.at(&ifb);
}

// An `if` that is not in tail position: its branches are transformed later, by the
// loop running this block (runTasks), each returning (cons value backprop) where
// the branches use variables from outside, their value where they use none.
void Transformer::phiIf(const Bind& bd, Block* out) {
  Atom c = testAtom(out, bd.atom);
  const std::vector<Var*>& outer = outerOf(bd);
  bool needBp = !outer.empty();
  Bind ifb;
  ifb.kind = Bind::If;
  ifb.atom = c;
  ifb.loc = bd.loc;
  ifb.thenB = M.newBlock();
  ifb.elseB = M.newBlock();
  std::shared_ptr<const FinishFn> finish;
  std::shared_ptr<const VarSet> inputs;
  if (needBp) {
    finish = std::make_shared<const FinishFn>([this, outer](Block* o, Sens& st) {
      std::vector<Atom> items;
      for (Var* u : outer) items.push_back(st.get(u));
      return listOf(o, items);
    });
    inputs = std::make_shared<const VarSet>(outer.begin(), outer.end());
  }
  // A branch's backpropagator reports only the sensitivities of the variables the
  // branch uses: one of a self-recursive closure is handed on where the function's
  // own backpropagator receives it (flatSelf_), not inside the branch.
  tasks_->push_back({bd.elseB, ifb.elseB, needBp, finish, inputs, bd.loc, "", {}, nullptr});
  tasks_->push_back({bd.thenB, ifb.thenB, needBp, finish, inputs, bd.loc, "", {}, nullptr});
  loc_ = bd.loc;
  Var* dst = jDst(bd.dst);
  if (!needBp) {
    ifb.dst = dst;
    emitTo(out, std::move(ifb));
    return;
  }
  Atom p = emitTo(out, std::move(ifb));
  call(out, {prim(NativeId::Car), p}, 0, dst);
  bp_[bd.dst] = call(out, {prim(NativeId::Cdr), p}).var;
  branchOuter_[&bd] = outer;
}

// φ of a block whose value is returned with its backpropagator, as
// (cons value backprop), backprop ending with `finish` (which reads the
// sensitivities of the variables in `inputs`). A conditional that ends the block
// is passed through: each branch returns its own pair, its backpropagator
// finishing the same way, so a function whose body is an if (a loop, a recursion)
// makes no closure, cons or call for the join in either sweep. The bindings before
// such an if run once, before it; if the branches use what they compute, their
// reverse steps (`prefix`, the tape so far) are repeated in each branch's
// backpropagator, up to kMaxPrefix of them (beyond, the if joins as any other).
// If the bindings feed only the test, no sensitivity reaches them. The branches
// of the if are left to runTasks.
void Transformer::phiTail(Task& task) {
  const Block* b = task.b;
  Block* out = task.out;
  if (const Bind* last = tailIf(b)) {
    const std::vector<Var*>& outer = outerOf(*last);
    bool testOnly =
        std::all_of(outer.begin(), outer.end(), [&](Var* v) { return task.inputs->count(v) > 0; });
    if (testOnly || task.prefix.size() + b->binds.size() <= kMaxPrefix) {
      Tape tape = std::move(task.prefix);
      for (size_t i = 0; i + 1 < b->binds.size(); ++i) {
        loc_ = b->binds[i].loc;
        for (const Bind* e : expand(b->binds[i])) {
          loc_ = e->loc;
          phiBind(*e, out);
          if (e->dst) notePrimal(out, e->dst);
          if (!testOnly) tape.push_back(e);
        }
      }
      loc_ = last->loc;
      Bind ifb;
      ifb.kind = Bind::If;
      ifb.atom = testAtom(out, last->atom);
      ifb.loc = last->loc;
      ifb.thenB = M.newBlock();
      ifb.elseB = M.newBlock();
      tasks_->push_back({last->elseB, ifb.elseB, true, task.finish, task.inputs, last->loc,
                         task.name, tape, task.flatSelf});
      tasks_->push_back({last->thenB, ifb.thenB, true, task.finish, task.inputs, last->loc,
                         task.name, std::move(tape), task.flatSelf});
      out->result = emitTo(out, std::move(ifb));
      return;
    }
  }
  Tape tape = std::move(task.prefix);
  Atom r = phiBlock(b, out, tape);
  Lambda* bp = backprop(b, tape, task.loc, task.name, *task.finish);
  Bind mk;
  mk.kind = Bind::MakeLambda;
  mk.lambda = bp;
  Atom bpAtom = emitTo(out, std::move(mk));
  out->result = call(out, {prim(NativeId::Cons), r, bpAtom});
}

}  // namespace dlam::ad
