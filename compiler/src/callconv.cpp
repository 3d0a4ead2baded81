// callconv.cpp — planCalls: the uses of a function's variables, and the split calls,
// parameter split, parts calls, returned lists and untagged arguments of the calling
// convention of transformed code (callconv.h), found before its code is generated.
#include "callconv.h"

#include "dlam/opcodes.h"

#include <algorithm>

namespace dlam {

using namespace anf;

bool isCompare(NativeId id) {
  return id == NativeId::Lt || id == NativeId::Le || id == NativeId::Gt || id == NativeId::Ge ||
         id == NativeId::NumEq;
}

bool hasOpcode(NativeId id, size_t n) {
  switch (id) {
    case NativeId::Add:
    case NativeId::Mul:
    case NativeId::Div:
      return n >= 2;
    case NativeId::Sub:
      return n >= 1;
    case NativeId::SensBack:  // (SENSBK: the sensitivity, then at most five registers)
      return n >= 3 && n <= instr::kMaxSensBackArgs;
    case NativeId::Lt:
    case NativeId::Le:
    case NativeId::Gt:
    case NativeId::Ge:
    case NativeId::NumEq:
    case NativeId::Cons:
    case NativeId::Plus:
    case NativeId::SensAdd:
    case NativeId::SensSub:
    case NativeId::Unreduce:
    case NativeId::AttachStarJ:
    case NativeId::RepResult:
    case NativeId::BpResult:
    case NativeId::EqP:
    case NativeId::EqvP:
    case NativeId::VectorRef:
      return n == 2;
    case NativeId::Caar:
    case NativeId::Cadr:
    case NativeId::Cdar:
    case NativeId::Cddr:
    case NativeId::Caddr:
    case NativeId::Cdddr:
    case NativeId::Car:
    case NativeId::Cdr:
    case NativeId::Not:
    case NativeId::NullP:
    case NativeId::PairP:
    case NativeId::NumberP:
    case NativeId::SymbolP:
    case NativeId::StringP:
    case NativeId::BooleanP:
    case NativeId::ProcedureP:
    case NativeId::SCar:
    case NativeId::SCdr:
    case NativeId::StarJ:
    case NativeId::StarJInverse:
      return n == 1;
    default:
      return false;
  }
}

bool hasLiftedOpcode(const VM& vm, const Bind& bd) {
  if (bd.level == 0 || bd.level > instr::kMaxLevel || bd.args.size() != 3) return false;
  NativeId id = builtinOf(vm, bd.args[0]);
  return id == NativeId::Add || id == NativeId::SensAdd || id == NativeId::SensSub ||
         id == NativeId::Sub || id == NativeId::Mul || id == NativeId::Div || isCompare(id);
}

bool usesWindow(const VM& vm, const Bind& bd) {
  if (bd.kind != Bind::Call) return false;
  if (bd.level > 0) return !hasLiftedOpcode(vm, bd);
  NativeId id = builtinOf(vm, bd.args[0]);
  return id == NativeId::None || !hasOpcode(id, bd.args.size() - 1);
}

namespace {

class Planner {
 public:
  Planner(const VM& vm, const Lambda* lam, CallPlan& plan) : vm_(vm), lam_(lam), plan_(plan) {}

  void run() {
    analyseUses(lam_->body);
    planParamSplit();
    planSplits(lam_->body);
    // The blocks in tail position: the body, and the branches of an `if` ending a
    // block in tail position and giving its value (visited before the blocks in them).
    std::unordered_set<const Block*> tail{lam_->body};
    forEachBlock(lam_->body, [&](const Block* b) {
      bool isTail = tail.count(b) != 0;
      if (isTail) {
        if (const Bind* last = tailIf(b)) tail.insert({last->thenB, last->elseB});
        planReturnedList(b);
      }
      planPartsCalls(b, isTail);
      for (size_t i = 0; i < b->binds.size(); ++i)
        if (untaggedUse(b, i)) plan_.untagged.insert(b->binds[i].dst);
    });
    forEachBind(lam_->body, [&](const Bind& bd) {
      if (bd.kind != Bind::Call || bd.level != 0) return;
      if (std::optional<uint32_t> i = untaggedParam(bd)) plan_.untaggedParams.emplace(&bd, *i);
    });
  }

 private:
  int uses(const Var* v) const { return plan_.uses(v); }

  // Counts the uses of every variable (a closure uses what it captures) and finds,
  // for each variable bound in a block, the last binding of that block that uses it
  // (a use inside a branch counts at its `if`; the block's size stands for its
  // result). Iterative over nested branch blocks: a frame per block being walked.
  // (Not anf::forEachBind, whose order among blocks is unspecified: the last use is
  // the latest one met walking in order, and a use is inside the block binding the
  // variable when that block's frame is on the stack, at the variable's depth.)
  void analyseUses(const Block* body) {
    struct Frame {
      const Block* b;
      size_t i;
      bool entered;  // binding i's own uses are counted, its branches walked or pending
    };
    std::vector<Frame> stack{{body, 0, false}};
    std::unordered_set<const Var*> pendingRec;  // letrec variables without their value yet
    std::vector<const Bind*> groupClosures;     // closures that captured one of them
    // The binding of v's block being walked (else: as far as we know, the end).
    auto here = [&](const VarUse& u) {
      bool inside = u.depth < stack.size() && stack[u.depth].b == u.block;
      return inside ? stack[u.depth].i : SIZE_MAX;
    };
    auto use = [&](const Atom& a, bool arg = false) {
      if (a.kind != Atom::Local) return;
      VarUse& u = plan_.vars[a.var];
      ++u.count;
      u.argUses += arg;
      // Walked in order: the last use is the latest. A use is inside the block binding
      // the variable, whose frame is on the stack (else: used, as far as we know, to
      // the end).
      if (u.block) u.last = here(u);
    };
    auto live = [&](const Var* v) {
      VarUse& u = plan_.vars[v];
      if (u.block) u.last = std::max(u.last, here(u));
    };
    auto bind = [&](const Var* v, size_t d) {
      VarUse& u = plan_.vars[v];
      u.block = stack[d].b;
      u.depth = static_cast<uint32_t>(d);
      u.at = stack[d].i;
    };
    while (!stack.empty()) {
      size_t d = stack.size() - 1;
      Frame& f = stack[d];
      if (f.i == f.b->binds.size()) {
        use(f.b->result);
        stack.pop_back();
        continue;
      }
      if (f.entered) {
        f.entered = false;
        ++f.i;
        continue;
      }
      f.entered = true;
      const Bind& bd = f.b->binds[f.i];
      use(bd.atom);
      for (const Atom& a : bd.args) use(a, usesWindow(vm_, bd));
      if (bd.lambda)
        for (Var* v : bd.lambda->freeVars) use(localAtom(v));
      // A closure made before a letrec variable it captures has its value is patched
      // (SETUPVAL) where the variable gets it, as the code generator does (initRec):
      // the closure lives to there (not counted as a use: no analysis of its calls
      // changes), which keeps its register out of a callee's frame.
      if (bd.kind == Bind::Rec) pendingRec.insert(bd.recVars.begin(), bd.recVars.end());
      if (bd.kind == Bind::MakeLambda && bd.dst &&
          std::any_of(bd.lambda->freeVars.begin(), bd.lambda->freeVars.end(),
                      [&](const Var* v) { return pendingRec.count(v); }))
        groupClosures.push_back(&bd);
      if ((bd.kind == Bind::Copy || bd.kind == Bind::MakeLambda) && bd.dst &&
          pendingRec.erase(bd.dst))
        for (const Bind* gc : groupClosures)
          if (gc != &bd && std::find(gc->lambda->freeVars.begin(), gc->lambda->freeVars.end(),
                                     bd.dst) != gc->lambda->freeVars.end())
            live(gc->dst);
      if (bd.dst) bind(bd.dst, d);
      for (Var* v : bd.recVars) bind(v, d);
      // Both branches are walked while this frame stays at binding i.
      if (bd.elseB) stack.push_back({bd.elseB, 0, false});
      if (bd.thenB) stack.push_back({bd.thenB, 0, false});
    }
  }

  // ---- split calls ------------------------------------------------------------
  //
  // A call whose result is checked as a rep result or a backpropagator's result
  // (%rep-result, %bp-result: transformed code) and then only taken apart with car
  // and cdr: CALL with C = the split mode (CallFrame::split) puts the parts in the
  // window's registers (a callee ending in RETURN2, RETURNN or RETURNR makes no pair
  // at all). For a backpropagator's (cons fbar (x1 ... xk . tail)) the sensitivities
  // taken with %scar and %scdr along the list are k of the parts. A rep result whose
  // value is checked in turn (the same callee named) and only taken apart, as code
  // transformed twice does with what a transformed backpropagator or a function
  // transformed twice returns, is split through: the value's parts, then the
  // backpropagator (mode kSplitRepOf + the value's mode). The interpreter checks the
  // result against the callee of the CALL: the checks read no register.

  // A check (%rep-result v callee, or %bp-result) of the call result or part v.
  NativeId checkOf(const Bind& bd, const Var* v) const {
    NativeId cid = bd.kind == Bind::Call ? builtinOf(vm_, bd.args[0]) : NativeId::None;
    if ((cid != NativeId::RepResult && cid != NativeId::BpResult) || bd.args.size() != 3 ||
        bd.args[1].kind != Atom::Local || bd.args[1].var != v || !bd.dst || bd.dst->rec ||
        bd.level != 0)
      return NativeId::None;
    return cid;
  }

  // Every use of `v` from binding `first` on: a car or a cdr taken in this block
  // (sensitivity parts only if sensOnly); nullopt if not.
  using Takes = std::array<std::vector<const Bind*>, 2>;
  std::optional<Takes> takesOf(const Block* b, size_t first, const Var* v, bool sensOnly) const {
    Takes takes;
    size_t taken = 0;
    for (size_t j = first; j < b->binds.size(); ++j) {
      const Bind& take = b->binds[j];
      if (take.kind != Bind::Call) continue;
      NativeId tid = builtinOf(vm_, take.args[0]);
      int part = tid == NativeId::SCar || (!sensOnly && tid == NativeId::Car)   ? 0
                 : tid == NativeId::SCdr || (!sensOnly && tid == NativeId::Cdr) ? 1
                                                                                : -1;
      if (part < 0 || take.level != 0 || take.args.size() != 2 ||
          take.args[1].kind != Atom::Local || take.args[1].var != v || !take.dst || take.dst->rec)
        continue;
      takes[part].push_back(&take);
      ++taken;
    }
    if (taken == 0 || static_cast<size_t>(uses(v)) != taken) return std::nullopt;
    return takes;
  }

  // The parts of the value checked at binding `at` (a %rep-result or %bp-result).
  std::optional<SplitPlan> checkedParts(const Block* b, size_t at, bool bp) const {
    auto first = takesOf(b, at + 1, b->binds[at].dst, false);
    if (!first) return std::nullopt;
    SplitPlan plan{static_cast<uint8_t>(bp ? 2 : 1), {(*first)[0], (*first)[1]}, {}};
    if (bp) {
      followList(b, at + 1, plan);
      plan.mode = static_cast<uint8_t>(plan.parts.size());
    }
    return plan;
  }

  // Follows a list taken apart (plan.parts: the takes of its first element, then of
  // its rest) while its pairs are only taken apart with %scar and %scdr.
  void followList(const Block* b, size_t first, SplitPlan& plan) const {
    while (plan.parts.size() - 2 < kMaxSplitElements && plan.parts.back().size() == 1) {
      auto next = takesOf(b, first, plan.parts.back()[0]->dst, true);
      if (!next) break;
      plan.spine.push_back(plan.parts.back()[0]);
      plan.parts.back() = (*next)[0];
      plan.parts.push_back((*next)[1]);
    }
  }

  // A function of one parameter whose every use is a %scar or %scdr in its body
  // block, along a list (a backpropagator taking a list of sensitivities): it takes
  // the parameter as parts (Proto::paramSplit), in registers 0 .. n - 1, and the takes
  // compile to nothing. (Its body block runs whole, so taking the list apart at the
  // entry raises no error the takes would not.)
  void planParamSplit() {
    if (lam_->params.size() != 1 || lam_->rest) return;
    auto first = takesOf(lam_->body, 0, lam_->params[0], true);
    if (!first) return;
    SplitPlan plan{0, {(*first)[0], (*first)[1]}, {}};
    followList(lam_->body, 0, plan);
    for (const auto& part : plan.parts) plan_.ahead.insert(part.begin(), part.end());
    plan_.ahead.insert(plan.spine.begin(), plan.spine.end());
    plan_.paramSplit = std::move(plan);
  }

  // The split of the call at binding i, if the pattern applies.
  std::optional<SplitPlan> splitPlan(const Block* b, size_t i) const {
    const Bind& call = b->binds[i];
    if (call.kind != Bind::Call || call.level != 0 || !call.dst || call.dst->rec ||
        i + 1 >= b->binds.size())
      return std::nullopt;
    const Bind& check = b->binds[i + 1];
    NativeId cid = checkOf(check, call.dst);
    if (cid == NativeId::None || builtinOf(vm_, call.args[0]) != NativeId::None ||
        uses(call.dst) != 1)
      return std::nullopt;
    auto plan = checkedParts(b, i + 1, cid == NativeId::BpResult);
    if (!plan || cid != NativeId::RepResult || plan->parts[0].size() != 1) return plan;
    // A rep result whose value is checked right after it is taken apart: split through.
    const Bind* value = plan->parts[0][0];
    if (uses(value->dst) != 1) return plan;
    auto isTake = [&](const Bind* bd) {
      return std::find(plan->parts[0].begin(), plan->parts[0].end(), bd) != plan->parts[0].end() ||
             std::find(plan->parts[1].begin(), plan->parts[1].end(), bd) != plan->parts[1].end();
    };
    for (size_t j = i + 2; j < b->binds.size(); ++j) {
      const Bind& inner = b->binds[j];
      if (isTake(&inner)) continue;
      NativeId iid = checkOf(inner, value->dst);
      if (iid == NativeId::None || !sameAtom(inner.args[2], check.args[2])) return plan;
      auto parts = checkedParts(b, j, iid == NativeId::BpResult);
      if (!parts) return plan;
      parts->mode = static_cast<uint8_t>(parts->mode + kSplitRepOf);
      parts->parts.push_back(plan->parts[1]);
      parts->spine.push_back(value);
      parts->spine.push_back(&inner);
      return parts;
    }
    return plan;
  }

  static bool sameAtom(const Atom& x, const Atom& y) {
    if (x.kind != y.kind) return false;
    if (x.kind == Atom::Local) return x.var == y.var;
    if (x.kind == Atom::Global) return x.sym == y.sym;
    return false;
  }

  // Finds the split calls of the function. The callee a split call's check names is
  // not a use of it then: a callee computed in the block for the call only goes into
  // the call's window (codegen's reserveSlot).
  void planSplits(const Block* body) {
    forEachBlock(body, [&](const Block* b) {
      for (size_t i = 0; i < b->binds.size(); ++i) {
        const Bind& bd = b->binds[i];
        auto plan = splitPlan(b, i);
        if (!plan) continue;
        const Atom& callee = bd.args[0];
        const Atom& named = b->binds[i + 1].args[2];
        if (callee.kind == Atom::Local && named.kind == Atom::Local && named.var == callee.var) {
          // The checks (the call's, and an inner one of a split through) use it no more.
          std::vector<size_t> checks{i + 1};
          if (plan->mode > kSplitRepOf)
            checks.push_back(static_cast<size_t>(plan->spine.back() - b->binds.data()));
          VarUse& u = plan_.vars[callee.var];
          for (size_t c = checks.size(); c-- > 0;) {
            if (u.block == b && u.last == checks[c]) {
              --u.count;
              u.last = c ? checks[c - 1] : i;
            } else if (!u.block && std::find(lam_->freeVars.begin(), lam_->freeVars.end(),
                                             callee.var) != lam_->freeVars.end()) {
              // (a captured callee: loaded where it is used, see codegen's lazyUpval_)
              --u.count;
              u.argUses -= usesWindow(vm_, b->binds[checks[c]]);
            }
          }
        }
        plan_.splitParts.insert(&b->binds[i + 1]);
        for (const auto& part : plan->parts) {
          plan_.splitParts.insert(part.begin(), part.end());
          plan_.ahead.insert(part.begin(), part.end());
        }
        plan_.splitParts.insert(plan->spine.begin(), plan->spine.end());
        plan_.ahead.insert(plan->spine.begin(), plan->spine.end());
        plan_.splits.emplace(&bd, std::move(*plan));
      }
    });
  }

  // ---- conses: parts calls and returned lists -------------------------------------

  using Defs = std::unordered_map<const Var*, const Bind*>;
  static Defs definitions(const Block* b) {
    Defs defs;
    for (const Bind& bd : b->binds)
      if (bd.dst) defs[bd.dst] = &bd;
    return defs;
  }

  bool isCons(const Bind& bd) const {
    return bd.kind == Bind::Call && bd.level == 0 && bd.args.size() == 3 &&
           builtinOf(vm_, bd.args[0]) == NativeId::Cons && bd.dst && !bd.dst->rec;
  }

  // The cons made in the block (defs), not taken by a parts call or a returned list
  // yet, that `a`, a local used only there, names; else null.
  const Bind* consNamed(const Defs& defs, const Atom& a) const {
    if (a.kind != Atom::Local || uses(a.var) != 1) return nullptr;
    auto it = defs.find(a.var);
    return it != defs.end() && isCons(*it->second) && !plan_.ahead.count(it->second) ? it->second
                                                                                     : nullptr;
  }

  // Extends a chain of conses, (cons x0 (cons x1 ... rest)), along the cdrs while each
  // names a cons made in the block used only there, up to `limit` conses.
  void followConses(const Defs& defs, std::vector<const Bind*>& chain, size_t limit) const {
    while (chain.size() < limit)
      if (const Bind* next = consNamed(defs, chain.back()->args[2]))
        chain.push_back(next);
      else
        break;
  }

  // A backpropagator's result in tail position, (cons fbar (cons x1 ... (cons xk
  // tail))), each inner pair made in this block and used only there: RETURNN returns
  // the parts, and makes the pairs only for a caller that does not split them. The
  // inner conses are compiled to nothing where they stand (they only allocate, so
  // making them at the return changes nothing). The conses, outermost first (none if
  // the pattern does not apply). With `rep`: a rep result whose value is such a list
  // made here, (cons (cons v (cons x1 ... tail)) bp) with bp a closure made here (what
  // a transformed backpropagator or a function transformed twice returns), for
  // RETURNR; the outer cons first, then the list's.
  void planReturnedList(const Block* b) {
    size_t n = b->binds.size();
    if (n == 0) return;
    const Bind& last = b->binds[n - 1];
    if (!isCons(last) || b->result.kind != Atom::Local || b->result.var != last.dst) return;
    Defs defs = definitions(b);
    ReturnedList r{{&last}, false};
    const Atom& bp = last.args[2];
    if (const Bind* value = consNamed(defs, last.args[1]); value && bp.kind == Atom::Local) {
      auto it = defs.find(bp.var);
      if (it != defs.end() && it->second->kind == Bind::MakeLambda) {
        r.rep = true;
        r.chain.push_back(value);
      }
    }
    followConses(defs, r.chain, kMaxSplitElements + (r.rep ? 2 : 1));
    if (!r.rep && r.chain.size() < 2) return;
    plan_.ahead.insert(r.chain.begin(), r.chain.end());
    plan_.returned.emplace(b, std::move(r));
  }

  // Calls of this block, not in tail position, whose one argument is a list made here
  // with conses used nowhere else, (cons x0 (cons x1 ... rest)): the call passes the
  // parts in its window (CALLP) and the conses compile to nothing. A
  // function that takes its argument in parts gets them as they are; any other gets
  // the list, made by the VM. The parts are read at the call: their last use is there.
  void planPartsCalls(const Block* b, bool tail) {
    // (Only in code the reverse transform made, where most such calls go to
    // backpropagators taking their argument in parts: in other code a call's consed
    // argument is made as it stands, which costs less than the VM making it.)
    if (!lam_->derived) return;
    Defs defs = definitions(b);
    for (size_t i = 0; i < b->binds.size(); ++i) {
      const Bind& call = b->binds[i];
      if (call.kind != Bind::Call || call.level != 0 || call.args.size() != 2 ||
          builtinOf(vm_, call.args[0]) != NativeId::None || (call.dst && call.dst->rec))
        continue;
      if (i + 1 == b->binds.size() && tail && b->result.kind == Atom::Local &&
          b->result.var == call.dst)
        continue;
      const Bind* head = consNamed(defs, call.args[1]);
      if (!head) continue;
      std::vector<const Bind*> chain{head};
      followConses(defs, chain, kMaxSplitElements + 1);
      std::vector<Atom> parts;
      for (const Bind* c : chain) parts.push_back(c->args[1]);
      parts.push_back(chain.back()->args[2]);
      plan_.ahead.insert(chain.begin(), chain.end());
      for (const Atom& a : parts)
        if (a.kind == Atom::Local)
          if (auto u = plan_.vars.find(a.var); u != plan_.vars.end() && u->second.block == b)
            u->second.last = std::max(u->second.last, i);
      plan_.partsCalls[&call] = std::move(parts);
    }
  }

  // ---- untagged arguments and parameters ----------------------------------------
  //
  // In transformed code a loop passes its numbers to the next iteration as (*j v), v
  // just computed, to a parameter the callee only takes *j-inverse of: a tagged number
  // made to be taken apart at once. Such a parameter is read by ARGJINV
  // (Proto::rawParams), and a call whose argument is such a *j, used only there,
  // passes v itself, flagged in its top bits (instr::rawArgs): the *j is made by the
  // call only for a callee that does not take it so (VM::execute). The *j compiles to
  // nothing, its variable naming v's register (v is computed straight into the
  // window: codegen's slotOf). Only *j of the result of an arithmetic primitive
  // (builtins.h, isArithmetic) is left to the call: a number's, which cannot fail, so
  // no error moves from the *j to the call.

  // Whether binding i of b, (*j v), is used only as one of the first 8 arguments of a
  // later call of its block that passes its arguments as they are (CALL, TAILCALL),
  // with v bound by an arithmetic primitive in the same block.
  bool untaggedUse(const Block* b, size_t i) const {
    const Bind& bd = b->binds[i];
    if (bd.kind != Bind::Call || bd.level != 0 || !bd.dst || bd.dst->rec || bd.args.size() != 2 ||
        builtinOf(vm_, bd.args[0]) != NativeId::StarJ || bd.args[1].kind != Atom::Local)
      return false;
    auto v = plan_.vars.find(bd.args[1].var);
    if (v == plan_.vars.end() || v->second.block != b || v->second.at >= i) return false;
    const Bind& def = b->binds[v->second.at];
    if (def.kind != Bind::Call || !isArithmetic(builtinOf(vm_, def.args[0]))) return false;
    auto u = plan_.vars.find(bd.dst);
    if (u == plan_.vars.end() || u->second.count != 1 || u->second.last <= i ||
        u->second.last >= b->binds.size())
      return false;
    const Bind& call = b->binds[u->second.last];
    if (!usesWindow(vm_, call) || call.level != 0 || plan_.partsCalls.count(&call)) return false;
    for (size_t j = 1; j < call.args.size() && j <= 8; ++j)
      if (call.args[j].kind == Atom::Local && call.args[j].var == bd.dst) return true;
    return false;
  }

  // The index of the parameter bd takes *j-inverse of, if that is its only use, it
  // is one of the first 8 and the function takes its arguments as they are passed.
  std::optional<uint32_t> untaggedParam(const Bind& bd) const {
    if (builtinOf(vm_, bd.args[0]) != NativeId::StarJInverse || bd.args.size() != 2)
      return std::nullopt;
    const Atom& v = bd.args[1];
    if (v.kind != Atom::Local || uses(v.var) != 1 || lam_->rest || plan_.paramSplit)
      return std::nullopt;
    for (uint32_t i = 0; i < lam_->params.size() && i < 8; ++i)
      if (lam_->params[i] == v.var) return i;
    return std::nullopt;
  }

  const VM& vm_;
  const Lambda* lam_;
  CallPlan& plan_;
};

}  // namespace

std::unique_ptr<const CallPlan> planCalls(const VM& vm, const Lambda* lam) {
  auto plan = std::make_unique<CallPlan>();
  Planner(vm, lam, *plan).run();
  return plan;
}

}  // namespace dlam
