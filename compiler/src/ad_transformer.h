// ad_transformer.h — the state of one run of the reverse transform, shared by its parts.
//
// The reverse-mode transform of Lambda the Ultimate Backpropagator on A-normal form
// (Estep, appendix A) turns a function λx. body into λx̀. φ(body); (cons ỳ backprop),
// backprop being λȳ. ρ(body) in reverse; (cons fbar xbar). One Transformer does one
// *j of one function (with the lambdas inside it); its work is split by what it owns:
//   ad_transform.cpp    the entry points, the shared helpers, one lambda's transform and
//                       the loop over the blocks still to do (runTasks)
//   ad_forward.cpp      the forward sweep φ, and the primal values it keeps
//   ad_backward.cpp     the backward sweep ρ: backpropagators, bindings, calls
//   ad_recursive.cpp    recursive closure groups (closed groups, flat self-recursion,
//                       %rec-fix)
//   ad_sensitivity.cpp  the algebra of sensitivity terms (ad_sensitivity.h)
//   ad_rules.cpp        one row per primitive: how φ applies it, its reverse rule
//   ad_simplify.cpp     algebra on the finished backpropagators
// Because the output is ordinary ANF that keeps its IR, the transform applies again to
// its own output: nested derivatives of any order take the same path.
#pragma once
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ad_sensitivity.h"
#include "anf.h"
#include "stack_guard.h"

namespace dlam::ad {

using anf::Atom;
using anf::Bind;
using anf::Block;
using anf::Lambda;
using anf::Module;
using anf::Var;

class Transformer {
 public:
  Transformer(VM& vm, const std::shared_ptr<Module>& mod) : vm_(vm), mod_(mod), M(*mod) {}

  // The transform of L, the function *j is applied to.
  Lambda* function(const Lambda* L);

  // ---- helpers (ad_transform.cpp) ------------------------------------------------

  [[noreturn]] void fail(SrcLoc loc, const std::string& file, const std::string& msg);
  Var* fresh(const Var* v, const char* prefix);
  Native* builtin(NativeId id);
  Atom prim(NativeId id) { return anf::constAtom(Value::object(builtin(id)), loc_); }
  Native* calleeBuiltin(const Atom& a);
  Atom emitTo(Block* b, Bind bd);
  Atom call(Block* b, std::vector<Atom> args, uint16_t level = 0, Var* dst = nullptr);
  Atom constJ(Value c, int times);
  Atom jAtom(Block* b, const Atom& a);
  Atom jArg(Block* b, const Atom& a);
  Atom listOf(Block* out, const std::vector<Atom>& items);

  // ---- lambdas and the blocks to do (ad_transform.cpp) -----------------------------

  // The primal bindings of a block as processed (n-ary arithmetic expanded into
  // binary chains), in order; ρ walks it backwards.
  using Tape = std::vector<const Bind*>;
  using FinishFn = std::function<Atom(Block*, Sens&)>;
  using VarSet = std::unordered_set<const Var*>;

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

  Lambda* transformLambda(const Lambda* L);
  void runTasks(Task first);

  // ---- primal values in the forward sweep (ad_forward.cpp) -------------------------

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
  Uses classify(const Block* body);
  void notePrimal(Block* out, const Var* v);
  Atom primalFwd(Block* out, const Atom& a);
  Atom testAtom(Block* out, const Atom& a);

  // ---- the forward sweep φ (ad_forward.cpp) ---------------------------------------

  // The variables a part of a function uses (by it or by lambdas inside it), in order
  // of id, and those it binds.
  struct VarsSeen {
    std::set<Var*, bool (*)(Var*, Var*)> used{[](Var* a, Var* b) { return a->id < b->id; }};
    std::unordered_set<const Var*> bound;
  };
  static constexpr size_t kMaxPrefix = 256;

  Atom phiBlock(const Block* b, Block* out, Tape& tape);
  std::vector<const Bind*> expand(const Bind& bd);
  void phiBind(const Bind& bd, Block* out);
  Var* jDst(const Var* v);
  void phiCall(const Bind& bd, Block* out);
  static void varsOf(const Block* top, bool butLast, VarsSeen& seen);
  const std::vector<Var*>& outerOf(const Bind& ifb);
  void phiIf(const Bind& bd, Block* out);
  void phiTail(Task& task);

  // ---- the backward sweep ρ (ad_backward.cpp) -------------------------------------

  Lambda* backprop(const Block* body, const Tape& tape, SrcLoc loc, const std::string& name,
                   const FinishFn& finish);
  Atom primal(Sens& st, const Atom& a);
  void rhoBind(const Bind& bd, Sens& st);
  void rhoGenericCall(const Bind& bd, Sens& st, bool calleeSens);
  void rhoCall(const Bind& bd, Sens& st);
  void computeFreeVars(Lambda* lam);

  // ---- sensitivity terms (ad_sensitivity.cpp) -------------------------------------

  Var* wholeOf(const Atom& a, const Atom& d) const;
  bool numericPair(const TermP& a, const TermP& b, uint16_t& level) const;

  // ---- recursive closure groups (ad_recursive.cpp) --------------------------------

  void findClosedRecGroups(const Lambda* L);
  void rhoRecGroup(const Tape& tape, size_t start, size_t end, Sens& st);

  // ---- state ----------------------------------------------------------------------

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
  std::vector<Task>* tasks_ =
      nullptr;  // the blocks still to transform, of the function being transformed

  // The variables the transform bound to the result of an arithmetic primitive, with
  // its level: numbers (or the symbolic zero) at that level. ρ sums a sensitivity with
  // such a one with + rather than plus (numericPair), so that a further transform
  // computes the sum on primal values (no tagged operands, no tagged sum).
  std::unordered_map<const Var*, uint16_t> arith_;

  // The primal binding that made each variable of the code being transformed (φ
  // notes them): where ρ looks for what a value was computed from (shapeAtoms).
  std::unordered_map<const Var*, const Bind*> def_;

  Uses uses_;
  std::unordered_map<const Var*, Var*> P_;  // primal variable → variable holding its primal value

  // The variables bound outside each non-tail `if` that its branches use (outerOf).
  std::unordered_map<const Bind*, std::vector<Var*>> outer_;

  // The sensitivities that ρ took apart: the variable bound to (%scar s) or (%scdr s),
  // with s and which part.
  std::unordered_map<const Var*, std::pair<Var*, bool>> partOf_;

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
};

}  // namespace dlam::ad
