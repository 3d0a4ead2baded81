// ad_transform.cpp — the reverse-mode transform of Lambda the Ultimate Backpropagator
// on A-normal form (Estep, appendix A): φ (the forward sweep) and ρ (the backward
// sweep), producing new ANF that goes through the ordinary code generator.
//
// A function λx. body becomes λx̀. φ(body); (cons ỳ backprop) where backprop is
// λȳ. ρ(body) in reverse; (cons fbar xbar). Primitive calls of builtins are handled
// inline: φ applies the primitive one reverse-tag level deeper (`level`), ρ emits
// its derivative formula at the primal's level on primal values recovered with
// *j-inverse. Any other call follows the rep-function convention. A conditional's
// branches each return (cons value backprop-of-the-branch), the branch backprop
// giving the sensitivities of the outer variables the branch used. Closures get
// the list of their free variables' sensitivities; recursive closure groups
// distribute theirs with the prelude's %rec-fix. Because the output is ordinary ANF
// that keeps its IR, the transform applies again to its own output: nested
// derivatives of any order take the same path. The forward sweep goes over the
// blocks of a function with a loop over pending blocks (runTasks), so a chain of
// conditionals (anf::chainBranch) costs no C++ stack, and the variables each `if`
// of a chain needs from outside are found for the whole chain in one pass (outerOf).
#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "ad_simplify.h"
#include "ad_transform.h"
#include "codegen.h"
#include "stack_guard.h"

namespace dlam {

using namespace anf;

namespace {

// Primitives that *j commutes with structurally: applied directly to transformed
// values at level 0 (a pair's image is a pair of images, () and booleans are their
// own images, a reverse-tagged number is still a number, a procedure's image a procedure).
bool isStructural(NativeId id) {
  switch (id) {
    case NativeId::Cons:
    case NativeId::Car:
    case NativeId::Cdr:
    case NativeId::Caar:
    case NativeId::Cadr:
    case NativeId::Cdar:
    case NativeId::Cddr:
    case NativeId::Caddr:
    case NativeId::Cdddr:
    case NativeId::List:
    case NativeId::NullP:
    case NativeId::PairP:
    case NativeId::NumberP:
    case NativeId::BooleanP:
    case NativeId::ProcedureP:
    case NativeId::StringP:
    case NativeId::SymbolP:
    case NativeId::Not:
    case NativeId::EqP:
    case NativeId::EqualP:
    case NativeId::EqvP:
    case NativeId::ListP:
    case NativeId::SZeroP:
    case NativeId::SCar:
    case NativeId::SCdr:
    case NativeId::ListRef:
    case NativeId::ListTail:
    case NativeId::Append:
    case NativeId::Reverse:
    case NativeId::Materialize:
    case NativeId::RepResult:
    case NativeId::BpResult:
    case NativeId::CheckXbar:
      return true;
    default:
      return false;
  }
}

// Numeric primitives: φ applies them to primal values (see Transformer::Uses).
bool isNumeric(NativeId id) {
  return isArithmetic(id) || (id >= NativeId::NumEq && id <= NativeId::NanP) ||
         id == NativeId::Sign || id == NativeId::Step || id == NativeId::ZeroIfZero ||
         id == NativeId::VectorRef || id == NativeId::VectorLength || id == NativeId::VectorOnehot;
}

class Transformer {
 public:
  Transformer(VM& vm, const std::shared_ptr<Module>& mod) : vm_(vm), mod_(mod), M(*mod) {}

  Lambda* function(const Lambda* L) {
    findClosedRecGroups(L);
    for (Var* f : L->freeVars)
      if (!J_.count(f)) J_[f] = fresh(f, "`");
    return transformLambda(L);
  }

 private:
  // ---- helpers ----------------------------------------------------------------

  [[noreturn]] void fail(SrcLoc loc, const std::string& file, const std::string& msg) {
    throw Error(ErrorKind::Runtime, msg, file, loc);
  }

  Var* fresh(const Var* v, const char* prefix) {
    Var* n = M.newVar(std::string(prefix) + (v ? v->name : std::string()));
    if (v) n->rec = v->rec;
    return n;
  }

  Native* builtin(NativeId id) {
    Native* n = vm_.builtin(id);
    if (!n) throw Error(ErrorKind::Runtime, "*j: the primitive needed by the transform is missing");
    return n;
  }

  Atom prim(NativeId id) { return constAtom(Value::object(builtin(id)), loc_); }

  // The plain native a callee atom denotes (calleeNative): a builtin still bound to its
  // name, or a native of the host's (id 0); not a lifted or rep native.
  Native* calleeBuiltin(const Atom& a) {
    Native* n = calleeNative(a);
    if (!n || n->kind != 0 || n->fn == nullptr) return nullptr;
    if (n->id != 0 && vm_.builtin(static_cast<NativeId>(n->id)) != n) return nullptr;
    return n;
  }

  Atom emitTo(Block* b, Bind bd) {
    if (!bd.dst) bd.dst = M.newVar("");
    if (!bd.loc.known()) bd.loc = loc_.known() ? loc_ : fnLoc_;
    Var* d = bd.dst;
    b->binds.push_back(std::move(bd));
    return localAtom(d, loc_);
  }

  Atom call(Block* b, std::vector<Atom> args, uint16_t level = 0, Var* dst = nullptr) {
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

  // The variables the transform bound to the result of an arithmetic primitive, with
  // its level: numbers (or the symbolic zero) at that level. ρ sums a sensitivity with
  // such a one with + rather than plus (numericPair), so that a further transform
  // computes the sum on primal values (no tagged operands, no tagged sum).
  std::unordered_map<const Var*, uint16_t> arith_;

  Atom constJ(Value c, int times) {
    for (int i = 0; i < times; ++i) c = vm_.starJ(c);
    return constAtom(c, loc_);
  }

  // φ of an atom: its transformed counterpart.
  Atom jAtom(Block* b, const Atom& a) {
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

  // ---- lambdas ------------------------------------------------------------------

  // `primals`: for the free variables that the transform keeps as primal values
  // (primalFree), the variables of the enclosing transformed function that hold them;
  // null for the function *j transforms (the VM makes its closure).
  Lambda* transformLambda(const Lambda* L, const std::vector<Var*>* primals = nullptr) {
    if (stack_.exceeded()) fail(L->loc, L->file, "*j: function nested too deeply to transform");
    Lambda* T = M.newLambda();
    T->derived = true;
    T->name = L->name;
    T->file = L->file;
    T->loc = L->loc;
    T->primalOf = L;
    for (Var* p : L->params) T->params.push_back(J_[p] = fresh(p, "`"));
    if (L->rest) T->rest = J_[L->rest] = fresh(L->rest, "`");
    uint64_t plain = primalFree(L);
    for (size_t i = 0; i < L->freeVars.size(); ++i) {
      Var* f = L->freeVars[i];
      T->freeVars.push_back(!keepsPrimal(plain, i) ? J_.at(f)
                            : primals              ? primals->at(i)
                                                   : fresh(f, "'"));
    }
    T->primalFree = plain;
    T->body = M.newBlock();
    std::string savedFile = std::move(file_);
    file_ = L->file;
    SrcLoc savedLoc = loc_, savedFnLoc = fnLoc_;
    loc_ = fnLoc_ = L->loc;
    // The primal values and uses are the function's own: a nested lambda recovers
    // the primals of its free variables itself (its closure captures their images).
    auto savedPrimals = std::move(P_);
    Uses savedUses = std::move(uses_);
    P_.clear();
    uses_ = classify(L->body);
    for (size_t i = 0; i < L->freeVars.size(); ++i)
      if (keepsPrimal(plain, i)) P_[L->freeVars[i]] = T->freeVars[i];
    for (Var* p : L->params) notePrimal(T->body, p);
    for (Var* f : L->freeVars) notePrimal(T->body, f);

    // The backpropagator of the whole body returns (cons fbar xbar).
    FinishFn finish = [this, L](Block* out, Sens& st) {
      Atom fbar;
      if (L->freeVars.empty()) {
        fbar = constAtom(Value::nil(), loc_);
      } else {
        std::vector<Atom> items;
        for (size_t i = 0; i < L->freeVars.size(); ++i) {
          Var* f = L->freeVars[i];
          Atom s = closedRec_.count(f) || f == flatSelf_ ? st.zero() : st.get(f);
          // A value L's closures keep as a primal value stands for its image: *j of
          // the primal's sensitivity is the image's.
          if (keepsPrimal(L->primalFree, i) && !(s.kind == Atom::Const && s.value.isZero()))
            s = call(out, {prim(NativeId::StarJ), s});
          items.push_back(s);
        }
        fbar = listOf(out, items);
      }
      Atom xbar;
      if (L->rest) {
        std::vector<Atom> fixed;
        for (Var* p : L->params) fixed.push_back(st.get(p));
        Atom fl = listOf(out, fixed);
        xbar = call(out, {globalAtom(vm_.intern("%xbar-rest")), fl, st.get(L->rest),
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
    file_ = std::move(savedFile);
    loc_ = savedLoc;
    fnLoc_ = savedFnLoc;
    return T;
  }

  // ---- primal values in the forward sweep ----------------------------------------

  // Numeric primitives run in φ on primal values: an argument's primal is recovered
  // once, with *j-inverse where the variable is bound, the primitive is applied at
  // the primal's level, and its result is tagged (*j) only when something other than
  // a numeric primitive or a test uses it. ρ reads the same primal variables, so a
  // backpropagator captures plain numbers and recovers nothing. (This is the lifted
  // application, *j of p applied to *j-inverse of the arguments, split at variables.)
  struct Uses {
    std::unordered_set<const Var*> arith;   // an argument of a numeric primitive
    std::unordered_set<const Var*> tagged;  // used any other way (except as a test)
  };
  Uses uses_;
  std::unordered_map<const Var*, Var*> P_;  // primal variable → variable holding its primal value

  // The free variables of L that its transform captures as primal values rather than
  // as their images (bit i for freeVars[i], i < 64): for a backpropagator, those its
  // body uses only as arguments of numeric primitives (directly, or through closures
  // that keep them so). The transformed body would only take their primal
  // (*j-inverse) at its entry; the closure holds that instead, so the code that makes
  // it tags nothing for it, and *j and *j-inverse of closures leave those values as
  // they are (VM::forceClosure). The sensitivity of such a closure is still that of
  // the values it stands for (the images): ρ takes *j-inverse of a part before giving
  // it to the primal variable (rhoBind), and the transform of a function that keeps
  // values so gives *j of their sensitivities (transformLambda's fbar). Only
  // backpropagators, which no recursive group or self-recursive closure contains. A
  // function of L alone (cached), so every transform of L agrees.
  uint64_t primalFree(const Lambda* L) {
    if (!L->backprop) return 0;
    if (auto it = primalFree_.find(L); it != primalFree_.end()) return it->second;
    if (stack_.exceeded()) fail(L->loc, L->file, "*j: function nested too deeply to transform");
    Uses u = classify(L->body);
    uint64_t plain = 0;
    for (size_t i = 0; i < L->freeVars.size() && i < 64; ++i)
      if (u.arith.count(L->freeVars[i]) && !u.tagged.count(L->freeVars[i]))
        plain |= uint64_t(1) << i;
    primalFree_[L] = plain;
    return plain;
  }
  std::unordered_map<const Lambda*, uint64_t> primalFree_;

  Uses classify(const Block* body) {
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
            bool numeric = n && isNumeric(static_cast<NativeId>(n->id));
            for (const Atom& a : bd.args)
              if (numeric && a.kind == Atom::Local)
                u.arith.insert(a.var);
              else
                tag(a);
            break;
          }
          case Bind::If:  // its test is used as a test; its branches are blocks of their own
            break;
          case Bind::MakeLambda: {
            // A value the transformed closure keeps as a primal value is used as by
            // arithmetic; any other capture needs the tagged value.
            uint64_t plain = primalFree(bd.lambda);
            for (size_t i = 0; i < bd.lambda->freeVars.size(); ++i)
              (keepsPrimal(plain, i) ? u.arith : u.tagged).insert(bd.lambda->freeVars[i]);
            break;
          }
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
  void notePrimal(Block* out, const Var* v) {
    if (!uses_.arith.count(v) || P_.count(v)) return;
    Var* p = fresh(v, "'");
    call(out, {prim(NativeId::StarJInverse), localAtom(J_.at(v), loc_)}, 0, p);
    P_[v] = p;
  }

  // The primal of an atom in φ (a constant or a global is its own primal).
  Atom primalFwd(Block* out, const Atom& a) {
    if (a.kind != Atom::Local) return a;
    auto it = P_.find(a.var);
    if (it != P_.end()) return localAtom(it->second, a.loc);
    return call(out, {prim(NativeId::StarJInverse), jAtom(out, a)});
  }

  // The test of a conditional: its primal when there is one (truthiness is the same).
  Atom testAtom(Block* out, const Atom& a) {
    if (a.kind == Atom::Local) {
      auto it = P_.find(a.var);
      if (it != P_.end()) return localAtom(it->second, a.loc);
    }
    return jAtom(out, a);
  }

  // ---- the forward sweep φ ------------------------------------------------------

  // The primal bindings of a block as processed (n-ary arithmetic expanded into
  // binary chains), in order; ρ walks it backwards.
  using Tape = std::vector<const Bind*>;

  Atom phiBlock(const Block* b, Block* out, Tape& tape) {
    if (stack_.exceeded()) fail(loc_, file_, "*j: expression nested too deeply to transform");
    for (const Bind& bd : b->binds) {
      loc_ = bd.loc;
      for (const Bind* e : expand(bd)) {
        loc_ = e->loc;
        phiBind(*e, out);
        if (e->dst) notePrimal(out, e->dst);
        tape.push_back(e);
      }
    }
    loc_ = b->result.loc.known() ? b->result.loc : loc_;
    return jAtom(out, b->result);
  }

  // n-ary arithmetic becomes a chain of binary calls (new primal bindings).
  std::vector<const Bind*> expand(const Bind& bd) {
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

  void phiBind(const Bind& bd, Block* out) {
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
        // The captured values that the transformed closure keeps as primal values
        // (primalFree) are this function's primal variables.
        uint64_t plain = primalFree(bd.lambda);
        std::vector<Var*> primals(bd.lambda->freeVars.size(), nullptr);
        for (size_t i = 0; i < primals.size(); ++i)
          if (keepsPrimal(plain, i))
            primals[i] = primalFwd(out, localAtom(bd.lambda->freeVars[i], loc_)).var;
        Lambda* t = transformLambda(bd.lambda, &primals);
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

  Var* jDst(const Var* v) {
    auto it = J_.find(v);
    if (it != J_.end()) return it->second;
    return J_[v] = fresh(v, "`");
  }

  void phiCall(const Bind& bd, Block* out) {
    Native* n = calleeBuiltin(bd.args[0]);
    if (n && isNumeric(static_cast<NativeId>(n->id))) {
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
    for (size_t i = 1; i < bd.args.size(); ++i) jargs.push_back(jAtom(out, bd.args[i]));
    Var* dst = jDst(bd.dst);
    if (n) {
      auto id = static_cast<NativeId>(n->id);
      std::vector<Atom> args{constAtom(Value::object(n), loc_)};
      args.insert(args.end(), jargs.begin(), jargs.end());
      switch (id) {
        case NativeId::StarJ:
        case NativeId::StarJInverse:
        case NativeId::Zero:
        case NativeId::Plus:
          call(out, std::move(args), 0, dst);
          return;
        case NativeId::AttachStarJ:
          // *j of (attach-*j v rep) is rep, and rep = (*j-inverse (*j rep)).
          call(out, {prim(NativeId::StarJInverse), jargs.at(1)}, 0, dst);
          return;
        case NativeId::Apply: {
          Atom t = call(out, std::move(args));
          call(out, {prim(NativeId::Car), t}, 0, dst);
          bp_[bd.dst] = call(out, {prim(NativeId::Cdr), t}).var;
          return;
        }
        default:
          break;
      }
      if (isStructural(id)) {
        call(out, std::move(args), 0, dst);
        return;
      }
      // Arithmetic and every other primitive: applied one reverse level deeper.
      call(out, std::move(args), static_cast<uint16_t>(bd.level + 1), dst);
      return;
    }
    // A procedure following the rep-function convention.
    Atom f = jAtom(out, bd.args[0]);
    std::vector<Atom> args{f};
    args.insert(args.end(), jargs.begin(), jargs.end());
    Atom t = call(out, {prim(NativeId::RepResult), call(out, std::move(args)), f});
    call(out, {prim(NativeId::Car), t}, 0, dst);
    bp_[bd.dst] = call(out, {prim(NativeId::Cdr), t}).var;
  }

  // The variables a part of a function uses (by it or by lambdas inside it), in order
  // of id, and those it binds.
  struct VarsSeen {
    std::set<Var*, bool (*)(Var*, Var*)> used{[](Var* a, Var* b) { return a->id < b->id; }};
    std::unordered_set<const Var*> bound;
  };

  // Adds block b to `seen`, with everything nested in it; without its last binding
  // when `butLast`. Its own walk rather than anf::forEachBind: leaving out the last
  // binding leaves out the blocks nested in it too (the rest of a chain of
  // conditionals, whose variables outerOf has already), which keeps outerOf linear in
  // the length of the chain.
  static void varsOf(const Block* top, bool butLast, VarsSeen& seen) {
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
  std::unordered_map<const Bind*, std::vector<Var*>> outer_;
  const std::vector<Var*>& outerOf(const Bind& ifb) {
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
  void phiIf(const Bind& bd, Block* out) {
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

  // ---- the backward sweep ρ -----------------------------------------------------

  // Current sensitivity of each primal variable inside one backpropagator body.
  // A sensitivity built by the rules of car, cdr and their compositions stays a
  // term (a pair of terms) until a value is needed: contributions to the same
  // variable merge part by part at transform time, and a pair's term that meets
  // the rule of cons (or list) is split without running anything. So the
  // sensitivity of x in (car x), (cadr x), (cdr x) costs two conses, not a
  // cons per use and a plus per merge.
  struct Term {
    Atom atom;                       // a sensitivity value (when !pair)
    std::shared_ptr<Term> car, cdr;  // the parts of a pair (null: zero)
    bool pair = false;
    int depth = 0;
  };
  using TermP = std::shared_ptr<Term>;
  static constexpr int kMaxTermDepth = 8;  // deeper pairs are built right away

  struct Sens {
    Transformer* t;
    Block* out;
    std::unordered_map<const Var*, TermP> cur;
    Atom zero() const { return constAtom(Value::zero(), t->loc_); }
    Atom get(const Var* v) {
      auto it = cur.find(v);
      if (it == cur.end()) return zero();
      Atom a = materialize(it->second);
      if (it->second->pair) it->second = atomTerm(a);
      return a;
    }
    TermP term(const Var* v) const {
      auto it = cur.find(v);
      return it == cur.end() ? nullptr : it->second;
    }
    bool isZero(const Var* v) const { return !cur.count(v); }
    static TermP atomTerm(const Atom& a) {
      auto tm = std::make_shared<Term>();
      tm->atom = a;
      return tm;
    }
    TermP pairTerm(TermP a, TermP d) {
      if (!a && !d) return nullptr;
      auto tm = std::make_shared<Term>();
      tm->pair = true;
      tm->depth = 1 + std::max(a ? a->depth : 0, d ? d->depth : 0);
      tm->car = std::move(a);
      tm->cdr = std::move(d);
      if (tm->depth > kMaxTermDepth) return atomTerm(materialize(tm));
      return tm;
    }
    Atom materialize(const TermP& tm) {
      if (!tm) return zero();
      if (!tm->pair) return tm->atom;
      Atom a = materialize(tm->car), d = materialize(tm->cdr);
      // (cons (%scar s) (%scdr s)) is s (a zero s stands for a pair of zeros).
      if (Var* s = t->wholeOf(a, d)) return localAtom(s, t->loc_);
      return t->call(out, {t->prim(NativeId::Cons), a, d});
    }
    TermP merge(const TermP& a, const TermP& b) {
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
        return atomTerm(t->call(out, {t->prim(NativeId::Add), a->atom, b->atom}, level));
      return atomTerm(t->call(out, {t->prim(NativeId::Plus), materialize(a), materialize(b)}));
    }
    // Makes e the whole sensitivity of v, in place of what it had (e takes that in).
    void replace(const Var* v, const Atom& e) { cur[v] = atomTerm(e); }
    void add(const Var* v, const Atom& e) {
      if (e.kind == Atom::Const && e.value.isZero()) return;
      addTerm(v, atomTerm(e));
    }
    void addTerm(const Var* v, TermP e) {
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
    // The parts of a pair's sensitivity: taken at transform time when it is a term.
    TermP head(const TermP& tm) { return part(tm, true); }
    TermP tail(const TermP& tm) { return part(tm, false); }
    TermP part(const TermP& tm, bool car) {
      if (!tm) return nullptr;
      if (tm->pair) return car ? tm->car : tm->cdr;
      Atom p = t->call(out, {t->prim(car ? NativeId::SCar : NativeId::SCdr), tm->atom});
      if (tm->atom.kind == Atom::Local) t->partOf_[p.var] = {tm->atom.var, car};
      return atomTerm(p);
    }
  };

  // The sensitivities that ρ took apart: the variable bound to (%scar s) or (%scdr s),
  // with s and which part.
  std::unordered_map<const Var*, std::pair<Var*, bool>> partOf_;
  // s if a and d are (%scar s) and (%scdr s), else null.
  Var* wholeOf(const Atom& a, const Atom& d) const {
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
  bool numericPair(const TermP& a, const TermP& b, uint16_t& level) const {
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

  // Whether a target takes a sensitivity: a variable, or an atom that is a local variable.
  static bool takes(const Var*) { return true; }
  static bool takes(const Atom& a) { return a.kind == Atom::Local; }
  static void addTo(Sens& st, const Var* v, TermP e) { st.addTerm(v, std::move(e)); }
  static void addTo(Sens& st, const Atom& a, TermP e) {
    if (a.kind == Atom::Local) st.addTerm(a.var, std::move(e));
  }
  static void addTo(Sens& st, const Atom& a, const Atom& e) {
    if (a.kind == Atom::Local) st.add(a.var, e);
  }

  // Gives the parts of the environment-shaped sensitivity s of a closure to its free
  // variables `vars`, except `skip` (whose part is zero or handed on already).
  static void spreadExcept(Sens& st, TermP s, const std::vector<Var*>& vars, const Var* skip) {
    for (size_t i = 0; i < vars.size(); ++i) {
      if (vars[i] != skip) st.addTerm(vars[i], st.head(s));
      if (std::none_of(vars.begin() + static_cast<std::ptrdiff_t>(i) + 1, vars.end(),
                       [skip](const Var* v) { return v != skip; }))
        return;
      s = st.tail(s);
    }
  }

  // Gives the elements of the list-shaped sensitivity s to the targets, in order
  // (variables, or atoms of which only local variables take a sensitivity). Element i
  // with keepsPrimal(kept, i) is the sensitivity of the image of target i: its primal
  // gets *j-inverse of it (a closure that keeps captured values as primal values).
  template <class It>
  static void spread(Sens& st, TermP s, It first, It last, uint64_t kept = 0) {
    for (It i = first; i != last; ++i) {
      if (takes(*i)) {
        TermP part = st.head(s);
        if (part && keepsPrimal(kept, static_cast<size_t>(std::distance(first, i))))
          part = Sens::atomTerm(
              st.t->call(st.out, {st.t->prim(NativeId::StarJInverse), st.materialize(part)}));
        addTo(st, *i, part);
      }
      if (std::none_of(std::next(i), last, [](const auto& t) { return takes(t); })) return;
      s = st.tail(s);
    }
  }
  static TermP termOf(const Atom& a) { return Sens::atomTerm(a); }

  // (list a ...) as a chain of conses.
  // (A list of constants, e.g. of zeros, is itself a constant: made once, here.)
  Atom listOf(Block* out, const std::vector<Atom>& items) {
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

  // Closures of a letrec group whose free variables are members of the group (a
  // loop, a recursion that captures nothing else): their sensitivity, the list of
  // their free variables' sensitivities, can only hold zeros. Their backpropagators
  // give them constant lists of zeros, their callers take no sensitivity for them,
  // and the group is not distributed (%rec-fix) at all.
  std::unordered_set<const Var*> closedRec_;

  // A closure that is alone in its letrec group and captures itself (a named let
  // capturing outer variables). Its sensitivity is kept flat: the part for itself is
  // always zero, because inside its own backpropagator whatever reaches it (its
  // recursive call's closure sensitivity) is handed on to its other free variables at
  // once. So a recursion builds no chain of nested closure sensitivities, and where
  // the closure is made its sensitivity is spread directly, without %rec-fix.
  std::unordered_set<const Var*> selfRec_;
  const Var* flatSelf_ = nullptr;                // the one whose backpropagator is being built
  const std::vector<Var*>* flatFree_ = nullptr;  // its free variables

  void findClosedRecGroups(const Lambda* L) {
    auto group = [&](const Bind& bd, const Block* b, size_t i) {
      if (bd.kind != Bind::Rec) return;
      std::unordered_set<const Var*> group(bd.recVars.begin(), bd.recVars.end());
      bool closed = true;
      for (size_t j = i + 1; j < b->binds.size(); ++j) {
        const Bind& m = b->binds[j];
        if (m.kind != Bind::MakeLambda || !group.count(m.dst)) continue;
        for (Var* f : m.lambda->freeVars)
          if (!group.count(f)) closed = false;
      }
      if (closed)
        closedRec_.insert(group.begin(), group.end());
      else if (bd.recVars.size() == 1)
        selfRec_.insert(bd.recVars[0]);
    };
    forEachBind(static_cast<const Block*>(L->body), group, true);
  }

  // ---- blocks in tail position ---------------------------------------------------

  using FinishFn = std::function<Atom(Block*, Sens&)>;
  using VarSet = std::unordered_set<const Var*>;

  static constexpr size_t kMaxPrefix = 256;

  // A block for the forward sweep to transform into `out`: in tail position (phiTail,
  // the block's value returned with its backpropagator, finishing with `finish`) or
  // not (phiBlock, the image of its value).
  struct Task {
    const Block* b;
    Block* out;
    bool tail;
    std::shared_ptr<const FinishFn> finish;
    std::shared_ptr<const VarSet> inputs;
    SrcLoc loc;
    std::string name;
    Tape prefix;
    const Var* flatSelf;  // flatSelf_ there
  };
  std::vector<Task>* tasks_ =
      nullptr;  // the blocks still to transform, of the function being transformed

  // Transforms `first` and the blocks its transformation leaves to do (branches of
  // conditionals), last left first: a branch is done before the blocks after it.
  void runTasks(Task first) {
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
  void phiTail(Task& task) {
    const Block* b = task.b;
    Block* out = task.out;
    if (const Bind* last = tailIf(b)) {
      const std::vector<Var*>& outer = outerOf(*last);
      bool testOnly = std::all_of(outer.begin(), outer.end(),
                                  [&](Var* v) { return task.inputs->count(v) > 0; });
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

  template <class Finish>
  Lambda* backprop(const Block* body, const Tape& tape, SrcLoc loc, const std::string& name,
                   Finish finish) {
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
  Atom primal(Sens& st, const Atom& a) {
    if (a.kind == Atom::Const) return a;
    if (a.kind == Atom::Global) return a;
    if (auto fw = P_.find(a.var); fw != P_.end()) return localAtom(fw->second, loc_);
    auto it = primalCache_.find(a.var);
    if (it != primalCache_.end()) return it->second;
    Atom p = call(st.out, {prim(NativeId::StarJInverse), localAtom(J_.at(a.var))});
    primalCache_[a.var] = p;
    return p;
  }

  void rhoBind(const Bind& bd, Sens& st) {
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

  void rhoGenericCall(const Bind& bd, Sens& st, bool calleeSens) {
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

  void rhoCall(const Bind& bd, Sens& st) {
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

  // A run of recursive closure bindings tape[start..end]: their sensitivities refer
  // to each other (a closure's free variables include itself or its partners), so
  // they are distributed together until nothing is left (prelude %rec-fix).
  void rhoRecGroup(const Tape& tape, size_t start, size_t end, Sens& st) {
    std::vector<const Bind*> members(tape.begin() + static_cast<std::ptrdiff_t>(start),
                                     tape.begin() + static_cast<std::ptrdiff_t>(end) + 1);
    bool any = false;
    for (const Bind* m : members)
      if (!st.isZero(m->dst) && !closedRec_.count(m->dst)) any = true;
    if (!any) return;
    if (members.size() == 1 && selfRec_.count(members[0]->dst)) {
      spreadExcept(st, st.term(members[0]->dst), members[0]->lambda->freeVars, members[0]->dst);
      return;
    }
    std::unordered_map<const Var*, int> memberIndex;
    for (size_t i = 0; i < members.size(); ++i) memberIndex[members[i]->dst] = static_cast<int>(i);
    std::vector<Var*> ext;
    std::unordered_map<const Var*, int> extIndex;
    Value spec = Value::nil();
    std::vector<Value> rows;
    for (const Bind* m : members) {
      std::vector<Value> targets;
      for (Var* fv : m->lambda->freeVars) {
        int t;
        auto mi = memberIndex.find(fv);
        if (mi != memberIndex.end()) {
          t = mi->second;
        } else {
          auto ei = extIndex.find(fv);
          if (ei == extIndex.end()) {
            ei = extIndex.emplace(fv, static_cast<int>(ext.size())).first;
            ext.push_back(fv);
          }
          t = static_cast<int>(members.size()) + ei->second;
        }
        targets.push_back(Value::number(t));
      }
      rows.push_back(vm_.list(targets.data(), targets.size()));
    }
    spec = vm_.list(rows.data(), rows.size());
    std::vector<Atom> sens;
    for (const Bind* m : members) sens.push_back(st.get(m->dst));
    Atom out = call(st.out, {globalAtom(vm_.intern("%rec-fix")), listOf(st.out, sens),
                             constAtom(spec), constAtom(Value::number(double(members.size()))),
                             constAtom(Value::number(double(ext.size())))});
    spread(st, termOf(out), ext.begin(), ext.end());
  }

  // Free variables of a synthesised (straight-line) backpropagator, first use first.
  void computeFreeVars(Lambda* lam) {
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

  VM& vm_;
  std::shared_ptr<Module> mod_;
  Module& M;
  std::unordered_map<const Var*, Var*> J_;   // primal variable → its image
  std::unordered_map<const Var*, Var*> bp_;  // primal call/if result → its backpropagator
  std::unordered_map<const Bind*, std::vector<Var*>> branchOuter_;
  std::unordered_map<const Var*, Atom> primalCache_;
  std::deque<Bind> synth_;
  std::string file_;
  SrcLoc loc_;
  // The function being transformed, or the backpropagator being made: where what the
  // transform adds without a binding of the user's to stand for is placed.
  SrcLoc fnLoc_;
  StackGuard stack_;
};

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
}

}  // namespace dlam
