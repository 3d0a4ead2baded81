// ad_transform.cpp — the reverse-mode transform's entry points (transformProto,
// etaProto), the helpers its parts share (emitting calls, images of atoms), and the
// transform of one lambda: its parameters' and free variables' images, the closure's
// sensitivity (cons fbar xbar) its backpropagator returns, and the loop over the
// blocks still to transform (runTasks), which the forward sweep (ad_forward.cpp)
// feeds. Primitive calls are handled inline: φ applies the primitive as its row in
// ad_rules.h says, ρ emits its reverse rule at the primal's level on primal values.
// Any other call follows the rep-function convention. See ad_transformer.h for the
// parts and what each owns.
#include "ad_transform.h"

#include <algorithm>
#include <memory>
#include <unordered_map>
#include <utility>

#include "ad_rules.h"
#include "ad_transformer.h"
#include "codegen.h"
#include "dlam/image.h"

namespace dlam::ad {

using namespace anf;

Lambda* Transformer::function(const Lambda* L) {
  findClosedRecGroups(L);
  for (Var* f : L->freeVars)
    if (!J_.count(f)) J_[f] = fresh(f, "`");
  return transformLambda(L);
}

[[noreturn]] void Transformer::fail(SrcLoc loc, const std::string& file, const std::string& msg) {
  throw Error(ErrorKind::Runtime, msg, file, loc);
}

Var* Transformer::fresh(const Var* v, const char* prefix) {
  Var* n = M.newVar(std::string(prefix) + (v ? v->name : std::string()));
  if (v) n->rec = v->rec;
  return n;
}

Native* Transformer::builtin(NativeId id) {
  Native* n = vm_.builtin(id);
  if (!n) throw Error(ErrorKind::Runtime, "*j: the primitive needed by the transform is missing");
  return n;
}

// The plain native a callee atom denotes (calleeNative): a builtin still bound to its
// name, or a native of the host's (id 0); not a lifted or rep native.
Native* Transformer::calleeBuiltin(const Atom& a) {
  Native* n = calleeNative(a);
  if (!n || n->kind != 0 || n->fn == nullptr) return nullptr;
  if (n->id != 0 && vm_.builtin(static_cast<NativeId>(n->id)) != n) return nullptr;
  return n;
}

Atom Transformer::emitTo(Block* b, Bind bd) {
  if (!bd.dst) bd.dst = M.newVar("");
  if (!bd.loc.known()) bd.loc = loc_.known() ? loc_ : fnLoc_;
  Var* d = bd.dst;
  b->binds.push_back(std::move(bd));
  return localAtom(d, loc_);
}

Atom Transformer::call(Block* b, std::vector<Atom> args, uint16_t level, Var* dst) {
  Bind bd;
  bd.kind = Bind::Call;
  bd.args = std::move(args);
  bd.level = level;
  bd.dst = dst;
  bool arith = isArithmetic(builtinOf(vm_, bd.args[0]));
  Atom r = emitTo(b, std::move(bd));
  if (arith) arith_[r.var] = level;
  return r;
}

Atom Transformer::constJ(Value c, int times) {
  for (int i = 0; i < times; ++i) c = vm_.starJ(c);
  return constAtom(c, loc_);
}

// φ of an atom: its transformed counterpart.
Atom Transformer::jAtom(Block* b, const Atom& a) {
  switch (a.kind) {
    case Atom::Local: {
      auto it = J_.find(a.var);
      if (it == J_.end())
        throw Error(ErrorKind::Runtime,
                    "*j: internal error: untransformed variable " + a.var->name);
      return localAtom(it->second, a.loc);
    }
    case Atom::Const:
      return constJ(a.value, 1);
    case Atom::Global:
      return call(b, {prim(NativeId::StarJ), a});
  }
  return a;
}

// (list a ...) as a chain of conses.
// (A list of constants, e.g. of zeros, is itself a constant: made once, here.)
Atom Transformer::listOf(Block* out, const std::vector<Atom>& items) {
  if (std::all_of(items.begin(), items.end(),
                  [](const Atom& a) { return a.kind == Atom::Const; })) {
    Value l = Value::nil();
    for (size_t i = items.size(); i-- > 0;) l = vm_.cons(items[i].value, l);
    return constAtom(l, loc_);
  }
  Atom l = constAtom(Value::nil(), loc_);
  for (size_t i = items.size(); i-- > 0;) l = call(out, {prim(NativeId::Cons), items[i], l});
  return l;
}

Lambda* Transformer::transformLambda(const Lambda* L) {
  if (stack_.exceeded()) fail(L->loc, L->file, "*j: function nested too deeply to transform");
  Lambda* T = M.newLambda();
  T->derived = true;
  T->name = L->name;
  T->file = L->file;
  T->loc = L->loc;
  T->primalOf = L;
  for (Var* p : L->params) T->params.push_back(J_[p] = fresh(p, "`"));
  if (L->rest) T->rest = J_[L->rest] = fresh(L->rest, "`");
  for (Var* f : L->freeVars) T->freeVars.push_back(J_.at(f));
  T->body = M.newBlock();
  std::string savedFile = std::move(file_);
  file_ = L->file;
  SrcLoc savedLoc = loc_, savedFnLoc = fnLoc_;
  loc_ = fnLoc_ = L->loc;
  // The primal values and uses are the function's own: a nested lambda recovers
  // the primals of its free variables itself (its closure captures their images).
  auto savedPrimals = std::move(P_);
  Uses savedUses = std::move(uses_);
  auto savedDefs = std::move(def_);
  P_.clear();
  def_.clear();
  uses_ = classify(L->body);
  for (Var* p : L->params) notePrimal(T->body, p);
  for (Var* f : L->freeVars) notePrimal(T->body, f);

  // The backpropagator of the whole body returns (cons fbar xbar).
  FinishFn finish = [this, L](Block* out, Sens& st) {
    Atom fbar;
    if (L->freeVars.empty()) {
      fbar = constAtom(Value::nil(), loc_);
    } else {
      std::vector<Atom> items;
      for (Var* f : L->freeVars)
        items.push_back(closedRec_.count(f) || f == flatSelf_ ? st.zero() : st.get(f));
      fbar = listOf(out, items);
    }
    Atom xbar;
    if (L->rest) {
      std::vector<Atom> fixed;
      for (Var* p : L->params) fixed.push_back(st.get(p));
      Atom fl = listOf(out, fixed);
      xbar = call(out, {globalAtom(vm_.librarySymbol("%xbar-rest")), fl, st.get(L->rest),
                        localAtom(J_[L->rest])});
    } else if (L->params.empty()) {
      xbar = constAtom(Value::nil(), loc_);
    } else if (L->params.size() == 1) {
      xbar = st.get(L->params[0]);
    } else {
      std::vector<Atom> items;
      for (Var* p : L->params) items.push_back(st.get(p));
      xbar = listOf(out, items);
    }
    return call(out, {prim(NativeId::Cons), fbar, xbar});
  };
  VarSet inputs(L->params.begin(), L->params.end());
  inputs.insert(L->freeVars.begin(), L->freeVars.end());
  if (L->rest) inputs.insert(L->rest);
  runTasks({L->body,
            T->body,
            true,
            std::make_shared<const FinishFn>(std::move(finish)),
            std::make_shared<const VarSet>(std::move(inputs)),
            L->loc,
            L->name,
            {},
            flatSelf_});
  P_ = std::move(savedPrimals);
  uses_ = std::move(savedUses);
  def_ = std::move(savedDefs);
  file_ = std::move(savedFile);
  loc_ = savedLoc;
  fnLoc_ = savedFnLoc;
  return T;
}

// Transforms `first` and the blocks its transformation leaves to do (branches of
// conditionals), last left first: a branch is done before the blocks after it.
void Transformer::runTasks(Task first) {
  std::vector<Task> tasks;
  tasks.push_back(std::move(first));
  std::vector<Task>* savedTasks = tasks_;
  const Var* savedSelf = flatSelf_;
  tasks_ = &tasks;
  while (!tasks.empty()) {
    Task task = std::move(tasks.back());
    tasks.pop_back();
    flatSelf_ = task.flatSelf;
    loc_ = task.loc;
    if (task.tail) {
      phiTail(task);
    } else {
      Tape tape;
      task.out->result = phiBlock(task.b, task.out, tape);
    }
  }
  tasks_ = savedTasks;
  flatSelf_ = savedSelf;
}

}  // namespace dlam::ad

namespace dlam {

using namespace anf;
using ad::Transformer;

namespace {

// Maps each Lambda of a proto tree to its proto.
void indexProtos(Proto* root, std::unordered_map<const Lambda*, Proto*>& out) {
  std::vector<Proto*> work{root};
  while (!work.empty()) {
    Proto* p = work.back();
    work.pop_back();
    if (p->ir) out[static_cast<const Lambda*>(p->ir.get())] = p;
    for (Proto* c : p->protos) work.push_back(c);
  }
}

}  // namespace

Proto* transformProto(VM& vm, Proto* primal) {
  // A proto tree loaded from the start-up image gets its IR now (indexProtos, below,
  // reads it and must not allocate).
  if (vm.imageState) {
    std::vector<Proto*> work{primal};
    while (!work.empty()) {
      Proto* p = work.back();
      work.pop_back();
      ensureIr(vm, p);
      for (Proto* c : p->protos) work.push_back(c);
    }
  }
  auto* L = static_cast<const Lambda*>(primal->ir.get());
  if (!L)
    throw Error(ErrorKind::Runtime, "*j: this procedure has no intermediate code to transform");
  auto mod = std::make_shared<Module>();
  Transformer t(vm, mod);
  Lambda* T = t.function(L);
  Proto* result = compileLambda(vm, mod, T);
  // Link every transformed proto to its primal, so *j-inverse of closures made by
  // transformed code finds their primal code, and *j of primal closures reuses it.
  // The links are found first and made after, without allocating: a failure (out of
  // memory) leaves no primal proto linked to part of an unlinked transform.
  std::unordered_map<const Lambda*, Proto*> primals;
  indexProtos(primal, primals);
  std::vector<std::pair<Proto*, Proto*>> links;  // (transformed, its primal or nullptr)
  std::vector<Proto*> work{result};
  while (!work.empty()) {
    Proto* p = work.back();
    work.pop_back();
    auto* lam = static_cast<const Lambda*>(p->ir.get());
    Proto* of = nullptr;
    if (lam && lam->primalOf) {
      auto it = primals.find(lam->primalOf);
      if (it != primals.end()) of = it->second;
    }
    links.emplace_back(p, of);
    for (Proto* c : p->protos) work.push_back(c);
  }
  for (auto [p, of] : links) {
    p->adLevel = static_cast<uint16_t>(primal->adLevel + 1);
    p->adInternal = primal->adInternal;  // the AD machinery's code, transformed, is still its
    if (!of) continue;
    // `of` may be old (a primal proto made long ago), `p` is new.
    p->primal = of;
    vm.writeBarrier(p, Value::object(of));
    if (!of->transformed) {
      of->transformed = p;
      vm.writeBarrier(of, Value::object(p));
    }
  }
  return result;
}

Proto* etaProto(VM& vm, Native* base, int nargs) {
  auto mod = std::make_shared<Module>();
  Lambda* L = mod->newLambda();
  L->name = base->name;
  L->file = "<primitive>";
  L->body = mod->newBlock();
  Bind c;
  c.kind = Bind::Call;
  c.args.push_back(constAtom(Value::object(base)));
  for (int i = 0; i < nargs; ++i) {
    Var* v = mod->newVar("x" + std::to_string(i + 1));
    L->params.push_back(v);
    c.args.push_back(localAtom(v));
  }
  c.dst = mod->newVar("y");
  L->body->result = localAtom(c.dst);
  L->body->binds.push_back(std::move(c));
  return compileLambda(vm, mod, L);
}

void installTransform(VM& vm) {
  vm.transformProto = transformProto;
  vm.etaProto = etaProto;
  vm.tangentRule = ad::tangentOf;
}

}  // namespace dlam
