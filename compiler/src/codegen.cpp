// codegen.cpp — register allocation and bytecode emission from A-normal form.
//
// Every ANF variable gets its own register (parameters first, then captured values
// loaded at entry, then bindings in order); registers of a branch are released when
// the branch ends. Calls of builtin primitives whose global still holds the builtin
// become dedicated opcodes; a comparison feeding an `if` becomes one compare-and-
// jump. A call in tail position becomes TAILCALL (always followed by RETURN, which
// the interpreter relies on for tail calls of natives). Letrec groups load
// "undefined" into their registers first and patch closures that captured a
// variable before it was initialised (SETUPVAL).
#include "codegen.h"

#include <array>
#include <cstring>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "dlam/opcodes.h"
#include "stack_guard.h"

namespace dlam {

using namespace anf;

namespace {

constexpr uint32_t kMaxRegisters = 65535;

struct Target {
  enum Kind { Tail, Reg } kind;
  uint32_t reg = 0;
};

bool isCompare(NativeId id) {
  return id == NativeId::Lt || id == NativeId::Le || id == NativeId::Gt || id == NativeId::Ge || id == NativeId::NumEq;
}

class FnCompiler {
 public:
  FnCompiler(VM& vm, const std::shared_ptr<Module>& mod, const Lambda* lam, FnCompiler* parent)
      : vm_(vm), mod_(mod), lam_(lam), stack_(parent ? StackGuard(parent->stack_.base()) : StackGuard()) {}

  Proto* compile() {
    // The proto is filled (constants, child protos) before the compiler returns, and
    // no collection runs while it compiles: it is young throughout, so these stores
    // need no write barrier.
    proto_ = vm_.makeProto();
    proto_->name = lam_->name;
    proto_->file = lam_->file;
    proto_->loc = lam_->loc;
    proto_->nparams = static_cast<uint16_t>(lam_->params.size());
    proto_->hasRest = lam_->rest != nullptr;
    proto_->ir = std::shared_ptr<const void>(mod_, lam_);
    loc_ = lam_->loc;
    if (lam_->params.size() > 60000) fail("too many parameters");
    for (Var* p : lam_->params) reg_[p] = allocReg();
    if (lam_->rest) reg_[lam_->rest] = allocReg();
    for (size_t i = 0; i < lam_->freeVars.size(); ++i) {
      Var* v = lam_->freeVars[i];
      proto_->freeVars.push_back(v->name);
      uint32_t r = allocReg();
      reg_[v] = r;
      emit(instr::make(Op::GETUPVAL, r, static_cast<uint32_t>(i)));
    }
    countUses(lam_->body);
    compileBlock(lam_->body, Target{Target::Tail});
    proto_->nregs = static_cast<uint16_t>(maxTop_ + 1);
    // The proto is complete (nothing extends it later): trim its vectors and count
    // their memory in the VM's heap, so the heap limit covers compiled code.
    proto_->code.shrink_to_fit();
    proto_->locs.shrink_to_fit();
    proto_->constants.shrink_to_fit();
    proto_->protos.shrink_to_fit();
    proto_->captures.shrink_to_fit();
    vm_.noteProtoBytes(proto_);
    return proto_;
  }

 private:
  [[noreturn]] void fail(const std::string& msg) { throw Error(ErrorKind::Syntax, msg, lam_->file, loc_); }

  uint32_t allocReg() {
    uint32_t r = top_++;
    if (top_ > kMaxRegisters - 2) fail("function too large: needs more than 65533 registers");
    if (top_ > maxTop_) maxTop_ = top_;
    return r;
  }

  size_t emit(Instr i) {
    proto_->code.push_back(i);
    proto_->locs.push_back(loc_);
    return proto_->code.size() - 1;
  }

  uint32_t constant(Value v) {
    auto it = constIndex_.find(v.bits());
    if (it != constIndex_.end()) return it->second;
    uint32_t idx = static_cast<uint32_t>(proto_->constants.size());
    proto_->constants.push_back(v);
    constIndex_.emplace(v.bits(), idx);
    return idx;
  }

  void countUses(const Block* b) {
    // Iterative over nested branch blocks; nested lambdas count as uses of what they capture.
    std::vector<const Block*> work{b};
    while (!work.empty()) {
      const Block* blk = work.back();
      work.pop_back();
      auto use = [&](const Atom& a) {
        if (a.kind == Atom::Local) ++uses_[a.var];
      };
      for (const Bind& bd : blk->binds) {
        use(bd.atom);
        for (const Atom& a : bd.args) use(a);
        if (bd.lambda)
          for (Var* v : bd.lambda->freeVars) ++uses_[v];
        if (bd.thenB) work.push_back(bd.thenB);
        if (bd.elseB) work.push_back(bd.elseB);
      }
      use(blk->result);
    }
  }

  uint32_t regOf(const Var* v) {
    auto it = reg_.find(v);
    if (it == reg_.end()) fail("internal error: variable '" + v->name + "' has no register");
    return it->second;
  }

  void loadAtom(const Atom& a, uint32_t r) {
    switch (a.kind) {
      case Atom::Local: {
        uint32_t src = regOf(a.var);
        if (src != r) emit(instr::make(Op::MOVE, r, src));
        break;
      }
      case Atom::Global: emit(instr::makeBx(Op::GETGLOBAL, r, constant(Value::object(a.sym)))); break;
      case Atom::Const: emit(instr::makeBx(Op::LOADK, r, constant(a.value))); break;
    }
  }

  // The register holding `a`, loading it into a fresh temporary if it is not a local.
  uint32_t atomReg(const Atom& a) {
    if (a.kind == Atom::Local) return regOf(a.var);
    SrcLoc saved = loc_;
    if (a.loc.known()) loc_ = a.loc;
    uint32_t r = allocReg();
    loadAtom(a, r);
    loc_ = saved;
    return r;
  }

  void deliver(const Atom& a, const Target& t) {
    if (t.kind == Target::Reg) {
      loadAtom(a, t.reg);
    } else {
      uint32_t r = atomReg(a);
      emit(instr::make(Op::RETURN, r));
    }
  }

  NativeId primitiveOf(const Atom& callee) {
    Value g;
    if (callee.kind == Atom::Global)
      g = callee.sym->global;
    else if (callee.kind == Atom::Const)
      g = callee.value;
    else
      return NativeId::None;
    if (!isNative(g)) return NativeId::None;
    auto id = static_cast<NativeId>(asNative(g)->id);
    if (id == NativeId::None || vm_.builtin(id) != asNative(g)) return NativeId::None;
    return id;
  }

  static bool isNumberConst(const Atom& a) { return a.kind == Atom::Const && a.value.isNumber(); }

  // Whether emitPrimitive has an opcode for `id` applied to `n` arguments; any other
  // call of a primitive is a call through a window of registers.
  static bool hasOpcode(NativeId id, size_t n) {
    switch (id) {
      case NativeId::Add: case NativeId::Mul: case NativeId::Div: return n >= 2;
      case NativeId::Sub: return n >= 1;
      case NativeId::Lt: case NativeId::Le: case NativeId::Gt: case NativeId::Ge: case NativeId::NumEq:
      case NativeId::Cons: case NativeId::Plus: case NativeId::AttachStarJ: case NativeId::RepResult:
      case NativeId::BpResult: case NativeId::EqP: case NativeId::EqvP: return n == 2;
      case NativeId::Caar: case NativeId::Cadr: case NativeId::Cdar: case NativeId::Cddr: case NativeId::Caddr:
      case NativeId::Cdddr: case NativeId::Car: case NativeId::Cdr: case NativeId::Not: case NativeId::NullP:
      case NativeId::PairP: case NativeId::SCar: case NativeId::SCdr: case NativeId::StarJ:
      case NativeId::StarJInverse: return n == 1;
      default: return false;
    }
  }

  // Emits the dedicated opcode of a primitive call (one hasOpcode accepts) into register `dst`.
  void emitPrimitive(NativeId id, const std::vector<Atom>& args, uint32_t dst) {
    size_t n = args.size() - 1;
    const Atom* x = &args[1];
    const Atom* y = n >= 2 ? &args[2] : nullptr;
    // A number constant operand is a K-form's C (if its index fits in 16 bits).
    auto kIndex = [&](const Atom& a) -> std::optional<uint32_t> {
      if (!isNumberConst(a)) return std::nullopt;
      uint32_t k = constant(a.value);
      return k <= 0xffff ? std::optional<uint32_t>(k) : std::nullopt;
    };
    auto binop = [&](Op rr, Op rk, bool commutative) {
      if (auto k = kIndex(*y)) {
        emit(instr::make(rk, dst, atomReg(*x), *k));
      } else if (auto kx = commutative ? kIndex(*x) : std::nullopt) {
        emit(instr::make(rk, dst, atomReg(*y), *kx) | instr::kSwapped);
      } else {
        uint32_t a = atomReg(*x), b = atomReg(*y);
        emit(instr::make(rr, dst, a, b));
      }
    };
    auto binary = [&](Op op) {
      uint32_t a = atomReg(*x), b = atomReg(*y);
      emit(instr::make(op, dst, a, b));
    };
    if (n > 2) {
      // (+ a b c ...) → ((a + b) + c) ...: a chain of binary opcodes through dst.
      Op rr = id == NativeId::Add ? Op::ADD : id == NativeId::Mul ? Op::MUL : id == NativeId::Sub ? Op::SUB : Op::DIV;
      uint32_t a0 = atomReg(args[1]);
      uint32_t a1 = atomReg(args[2]);
      emit(instr::make(rr, dst, a0, a1));
      for (size_t i = 3; i <= n; ++i) {
        uint32_t ai = atomReg(args[i]);
        emit(instr::make(rr, dst, dst, ai));
      }
      return;
    }
    switch (id) {
      case NativeId::Caar: case NativeId::Cadr: case NativeId::Cdar: case NativeId::Cddr:
      case NativeId::Caddr: case NativeId::Cdddr: {
        // Innermost access first: cadr = (car (cdr x)).
        const char* path = cxrPath(id);
        size_t len = std::strlen(path);
        uint32_t src = atomReg(*x);
        for (size_t i = len; i-- > 0;) {
          emit(instr::make(path[i] == 'a' ? Op::CAR : Op::CDR, dst, src));
          src = dst;
        }
        return;
      }
      case NativeId::Add: return binop(Op::ADD, Op::ADDK, true);
      case NativeId::Mul: return binop(Op::MUL, Op::MULK, true);
      case NativeId::Div: return binop(Op::DIV, Op::DIVK, false);
      case NativeId::Sub:
        if (n == 1) return emit1(Op::NEG, dst, *x);
        return binop(Op::SUB, Op::SUBK, false);
      case NativeId::Lt:
      case NativeId::Le:
      case NativeId::Gt:
      case NativeId::Ge:
      case NativeId::NumEq: return binop(compareOp(id, false), compareOp(id, true), false);
      case NativeId::Cons: return binary(Op::CONS);
      case NativeId::Plus: return binary(Op::PLUS);
      case NativeId::AttachStarJ: return binary(Op::ATTACH);
      case NativeId::RepResult: return binary(Op::REPRES);
      case NativeId::BpResult: return binary(Op::BPRES);
      case NativeId::EqP:
      case NativeId::EqvP: return binary(Op::EQP);  // the same predicate (primitives_lists.cpp)
      case NativeId::SCar: return emit1(Op::SCAR, dst, *x);
      case NativeId::SCdr: return emit1(Op::SCDR, dst, *x);
      case NativeId::StarJ: return emit1(Op::STARJ, dst, *x);
      case NativeId::StarJInverse: return emit1(Op::JINV, dst, *x);
      case NativeId::Car: return emit1(Op::CAR, dst, *x);
      case NativeId::Cdr: return emit1(Op::CDR, dst, *x);
      case NativeId::Not: return emit1(Op::NOT, dst, *x);
      case NativeId::NullP: return emit1(Op::NULLP, dst, *x);
      case NativeId::PairP: return emit1(Op::PAIRP, dst, *x);
      default: fail("internal error: no opcode for this primitive");
    }
  }

  void emit1(Op op, uint32_t dst, const Atom& x) { emit(instr::make(op, dst, atomReg(x))); }

  static Op compareOp(NativeId id, bool k) {
    switch (id) {
      case NativeId::Lt: return k ? Op::LTK : Op::LT;
      case NativeId::Le: return k ? Op::LEK : Op::LE;
      case NativeId::Gt: return k ? Op::GTK : Op::GT;
      case NativeId::Ge: return k ? Op::GEK : Op::GE;
      default: return k ? Op::NUMEQK : Op::NUMEQ;
    }
  }

  static Op jumpOp(NativeId id, bool k) {
    switch (id) {
      case NativeId::Lt: return k ? Op::JNLTK : Op::JNLT;
      case NativeId::Le: return k ? Op::JNLEK : Op::JNLE;
      case NativeId::Gt: return k ? Op::JNGTK : Op::JNGT;
      case NativeId::Ge: return k ? Op::JNGEK : Op::JNGE;
      default: return k ? Op::JNNUMEQK : Op::JNNUMEQ;
    }
  }

  // ---- blocks and bindings ----------------------------------------------------

  // The opcode of a binary arithmetic primitive or comparison applied under reverse
  // tags (transformed code), with the level in its top bits (the interpreter's slow
  // path strips and re-tags); none if the call goes through the primitive's lifted form.
  std::optional<Op> liftedBinaryOp(const Bind& bd) {
    if (bd.level == 0 || bd.level > 0x7f || bd.args.size() != 3) return std::nullopt;
    switch (NativeId id = primitiveOf(bd.args[0])) {
      case NativeId::Add: return Op::ADD;
      case NativeId::Sub: return Op::SUB;
      case NativeId::Mul: return Op::MUL;
      case NativeId::Div: return Op::DIV;
      default: return isCompare(id) ? std::optional<Op>(compareOp(id, false)) : std::nullopt;
    }
  }

  // A call that passes its arguments in a window of consecutive registers (rather
  // than compiling to an opcode of its own).
  bool usesWindow(const Bind& bd) {
    if (bd.kind != Bind::Call) return false;
    if (bd.level > 0) return !liftedBinaryOp(bd);
    NativeId id = primitiveOf(bd.args[0]);
    return id == NativeId::None || !hasOpcode(id, bd.args.size() - 1);
  }

  bool isSingleUseTemp(const Bind& bd) {
    if (!bd.dst || bd.dst->rec || uses_[bd.dst] != 1) return false;
    if (reg_.count(bd.dst)) return false;
    return bd.kind == Bind::Call || (bd.kind == Bind::Copy && bd.atom.kind != Atom::Local);
  }

  bool usesAll(const Block* b, size_t i, size_t j) {
    const Bind& call = b->binds[j];
    for (size_t k = i; k < j; ++k) {
      bool found = false;
      for (size_t a = 1; a < call.args.size(); ++a)
        if (call.args[a].kind == Atom::Local && call.args[a].var == b->binds[k].dst) found = true;
      if (!found) return false;
    }
    return true;
  }

  // When bindings i..j-1 compute, each used once, arguments of the call at j,
  // they are given their registers in j's argument window directly, so the call
  // needs no moves: (f (- n 1)) compiles to SUBK into the window, then CALL.
  void reserveWindow(const Block* b, size_t i) {
    size_t n = b->binds.size();
    size_t j = i;
    while (j < n && isSingleUseTemp(b->binds[j])) {
      ++j;
      if (j < n && usesWindow(b->binds[j]) && usesAll(b, i, j)) break;
    }
    if (j == i || j >= n || !usesWindow(b->binds[j]) || reservedBase_.count(&b->binds[j]) || !usesAll(b, i, j)) return;
    const Bind& call = b->binds[j];
    std::unordered_map<const Var*, uint32_t> slot;
    for (size_t k = 1; k < call.args.size(); ++k)
      if (call.args[k].kind == Atom::Local) slot.emplace(call.args[k].var, static_cast<uint32_t>(k));
    if (call.args[0].kind == Atom::Local)
      for (size_t k = i; k < j; ++k)
        if (b->binds[k].dst == call.args[0].var) return;
    for (size_t k = i; k < j; ++k)
      if (!slot.count(b->binds[k].dst)) return;
    uint32_t base = top_;
    for (size_t k = 0; k < call.args.size(); ++k) allocReg();
    for (size_t k = i; k < j; ++k) reg_[b->binds[k].dst] = base + slot[b->binds[k].dst];
    reservedBase_[&call] = base;
  }

  void compileBlock(const Block* b, const Target& t) {
    if (stack_.exceeded()) fail("expression nested too deeply to compile");
    size_t n = b->binds.size();
    bool delivered = false;
    std::vector<const Bind*> returned;
    if (t.kind == Target::Tail) returned = returnedList(b);
    for (const Bind* c : returned) compiledAhead_.insert(c);
    for (size_t i = 0; i < n; ++i) {
      const Bind& bd = b->binds[i];
      loc_ = bd.loc;
      reserveWindow(b, i);
      bool last = i + 1 == n && b->result.kind == Atom::Local && b->result.var == bd.dst &&
                  (bd.kind == Bind::Call || bd.kind == Bind::If);
      if (compiledAhead_.count(&bd)) {
        if (!returned.empty() && &bd == returned[0]) {
          emitReturnList(returned);
          delivered = true;
        }
        continue;
      }
      if (size_t used = compileSplitCall(b, i)) {
        i += used - 1;
        continue;
      }
      if (i + 1 == n && t.kind == Target::Tail && bd.kind == Bind::Call && b->result.kind == Atom::Local &&
          b->result.var == bd.dst && primitiveOf(bd.args[0]) == NativeId::Cons && bd.level == 0 &&
          bd.args.size() == 3) {
        // (cons a b) returned: RETURN2 makes the pair only for a caller that takes it whole.
        uint32_t x = atomReg(bd.args[1]), y = atomReg(bd.args[2]);
        emit(instr::make(Op::RETURN2, x, y));
        delivered = true;
        continue;
      }
      if (bd.kind == Bind::Call && i + 1 < n) {
        const Bind& next = b->binds[i + 1];
        NativeId id = primitiveOf(bd.args[0]);
        if (next.kind == Bind::If && next.atom.kind == Atom::Local && next.atom.var == bd.dst && isCompare(id) && bd.level == 0 &&
            bd.args.size() == 3 && uses_[bd.dst] == 1) {
          bool nextLast = i + 2 == n && b->result.kind == Atom::Local && b->result.var == next.dst;
          compileIf(next, nextLast ? &t : nullptr, &bd, id);
          if (nextLast) delivered = true;
          ++i;
          continue;
        }
      }
      compileBind(bd, last ? &t : nullptr);
      if (last) delivered = true;
    }
    if (!delivered) {
      loc_ = b->result.loc.known() ? b->result.loc : loc_;
      deliver(b->result, t);
    }
  }

  // A call whose result is checked as a rep result or a backpropagator's result
  // (%rep-result, %bp-result: transformed code) and then only taken apart with car
  // and cdr: CALL with C = 1 or 2 + k puts the parts in the window's registers (a
  // callee ending in RETURN2 or RETURNN makes no pair at all). For a backpropagator's
  // (cons fbar (x1 ... xk . tail)) the sensitivities taken with %scar and %scdr along
  // the list are k of the parts (CallFrame::split). Returns how many bindings it
  // compiled, 0 if the pattern does not apply.
  size_t compileSplitCall(const Block* b, size_t i) {
    const Bind& call = b->binds[i];
    if (call.kind != Bind::Call || call.level != 0 || !call.dst || call.dst->rec || uses_[call.dst] != 1 ||
        primitiveOf(call.args[0]) != NativeId::None || i + 1 >= b->binds.size())
      return 0;
    const Bind& check = b->binds[i + 1];
    NativeId cid = check.kind == Bind::Call ? primitiveOf(check.args[0]) : NativeId::None;
    if ((cid != NativeId::RepResult && cid != NativeId::BpResult) || check.args.size() != 3 ||
        check.args[1].kind != Atom::Local || check.args[1].var != call.dst || !check.dst || check.dst->rec)
      return 0;
    bool bp = cid == NativeId::BpResult;
    // Every use of `v`: a car or a cdr taken later in this block (sensitivity parts
    // only, after the first pair of a backpropagator's result); nullptr if not.
    using Takes = std::array<std::vector<const Bind*>, 2>;
    auto takesOf = [&](const Var* v, bool sensOnly) -> std::optional<Takes> {
      Takes takes;
      size_t taken = 0;
      for (size_t j = i + 2; j < b->binds.size(); ++j) {
        const Bind& take = b->binds[j];
        if (take.kind != Bind::Call) continue;
        NativeId tid = primitiveOf(take.args[0]);
        int part = tid == NativeId::SCar || (!sensOnly && tid == NativeId::Car)   ? 0
                   : tid == NativeId::SCdr || (!sensOnly && tid == NativeId::Cdr) ? 1
                                                                                  : -1;
        if (part < 0 || take.level != 0 || take.args.size() != 2 || take.args[1].kind != Atom::Local ||
            take.args[1].var != v || !take.dst || take.dst->rec || reg_.count(take.dst))
          continue;
        takes[part].push_back(&take);
        ++taken;
      }
      if (taken == 0 || static_cast<size_t>(uses_[v]) != taken) return std::nullopt;
      return takes;
    };
    auto first = takesOf(check.dst, false);
    if (!first) return 0;
    // parts[0]: fbar (or the value); parts[1 .. k]: the list's elements; parts[k + 1]: its tail.
    std::vector<std::vector<const Bind*>> parts{(*first)[0], (*first)[1]};
    std::vector<const Bind*> spine;  // the cdrs taken on the way, which need no register
    if (bp) {
      // Follow the list while its pairs are only taken apart.
      while (parts.size() - 2 < kMaxSplitElements && parts.back().size() == 1) {
        auto next = takesOf(parts.back()[0]->dst, true);
        if (!next) break;
        spine.push_back(parts.back()[0]);
        parts.back() = (*next)[0];
        parts.push_back((*next)[1]);
      }
    }
    uint32_t k = static_cast<uint32_t>(parts.size() - 2);
    loc_ = call.loc;
    uint32_t nargs = static_cast<uint32_t>(call.args.size() - 1);
    uint32_t base = top_;
    auto reserved = reservedBase_.find(&call);
    if (reserved != reservedBase_.end()) base = reserved->second;
    else
      for (size_t j = 0; j < call.args.size(); ++j) allocReg();
    // (Registers of the window above the arguments held temporaries of them.)
    while (top_ < base + k + 2) allocReg();
    for (size_t j = 0; j < call.args.size(); ++j) loadAtom(call.args[j], base + static_cast<uint32_t>(j));
    loc_ = call.loc;
    emit(instr::make(Op::CALL, base, nargs, bp ? 2 + k : 1));
    top_ = base + k + 2;
    // The takes become names of the registers (registers are written once) and
    // compile to nothing where they stand.
    for (size_t j = 0; j < parts.size(); ++j)
      for (const Bind* take : parts[j]) {
        reg_[take->dst] = base + static_cast<uint32_t>(j);
        compiledAhead_.insert(take);
      }
    for (const Bind* take : spine) compiledAhead_.insert(take);
    return 2;
  }

  // A backpropagator's result in tail position, (cons fbar (cons x1 ... (cons xk
  // tail))), each inner pair made in this block and used only there: RETURNN returns
  // the parts, and makes the pairs only for a caller that does not split them. The
  // inner conses are compiled to nothing where they stand (they only allocate, so
  // making them at the return changes nothing). Returns the conses, outermost first
  // (empty if the pattern does not apply).
  std::vector<const Bind*> returnedList(const Block* b) {
    std::vector<const Bind*> chain;
    size_t n = b->binds.size();
    if (n == 0) return chain;
    auto isCons = [&](const Bind& bd) {
      return bd.kind == Bind::Call && bd.level == 0 && bd.args.size() == 3 && primitiveOf(bd.args[0]) == NativeId::Cons &&
             bd.dst && !bd.dst->rec;
    };
    const Bind& last = b->binds[n - 1];
    if (!isCons(last) || b->result.kind != Atom::Local || b->result.var != last.dst) return chain;
    std::unordered_map<const Var*, const Bind*> def;
    for (size_t j = 0; j + 1 < n; ++j)
      if (b->binds[j].dst) def[b->binds[j].dst] = &b->binds[j];
    chain.push_back(&last);
    for (;;) {
      const Atom& tail = chain.back()->args[2];
      if (tail.kind != Atom::Local || uses_[tail.var] != 1 || chain.size() > kMaxSplitElements) break;
      auto it = def.find(tail.var);
      if (it == def.end() || !isCons(*it->second)) break;
      chain.push_back(it->second);
    }
    if (chain.size() < 2) chain.clear();
    return chain;
  }

  void emitReturnList(const std::vector<const Bind*>& chain) {
    loc_ = chain[0]->loc;
    uint32_t fbar = atomReg(chain[0]->args[1]);
    std::vector<uint32_t> xs;
    for (size_t j = 1; j < chain.size(); ++j) xs.push_back(atomReg(chain[j]->args[1]));
    uint32_t tail = atomReg(chain.back()->args[2]);
    loc_ = chain[0]->loc;
    emit(instr::make(Op::RETURNN, fbar, static_cast<uint32_t>(xs.size()), tail));
    for (size_t j = 0; j < xs.size(); j += 4) {
      Instr w = 0;
      for (size_t m = 0; m < 4 && j + m < xs.size(); ++m) w |= static_cast<Instr>(xs[j + m]) << (16 * m);
      emit(w);
    }
  }

  std::unordered_set<const Bind*> compiledAhead_;  // car/cdr binds done by compileSplitCall

  void initRec(const Var* v) {
    if (!pendingRec_.erase(v)) return;
    uint32_t r = regOf(v);
    for (const auto& gc : groupClosures_)
      for (size_t j = 0; j < gc.lam->freeVars.size(); ++j)
        if (gc.lam->freeVars[j] == v) emit(instr::make(Op::SETUPVAL, gc.reg, static_cast<uint32_t>(j), r));
  }

  uint32_t dstReg(const Bind& bd) {
    auto it = reg_.find(bd.dst);
    if (it != reg_.end()) return it->second;  // letrec variable: preallocated
    uint32_t r = allocReg();
    reg_[bd.dst] = r;
    return r;
  }

  void compileBind(const Bind& bd, const Target* t) {
    switch (bd.kind) {
      case Bind::Rec:
        for (Var* v : bd.recVars) {
          uint32_t r = allocReg();
          reg_[v] = r;
          emit(instr::makeBx(Op::LOADK, r, constant(Value::undefined())));
          pendingRec_.insert(v);
        }
        return;
      case Bind::DefGlobal: {
        uint32_t saved = top_;
        uint32_t r = atomReg(bd.atom);
        emit(instr::makeBx(Op::SETGLOBAL, r, constant(Value::object(bd.sym))));
        top_ = saved;
        return;
      }
      case Bind::Copy: {
        if (!bd.dst->rec && bd.atom.kind == Atom::Local) {
          reg_[bd.dst] = regOf(bd.atom.var);  // registers are written once: alias
          return;
        }
        uint32_t r = dstReg(bd);
        loadAtom(bd.atom, r);
        initRec(bd.dst);
        return;
      }
      case Bind::MakeLambda: {
        uint32_t r = dstReg(bd);
        FnCompiler child(vm_, mod_, bd.lambda, this);
        Proto* p = child.compile();
        uint32_t idx = static_cast<uint32_t>(proto_->protos.size());
        proto_->protos.push_back(p);
        std::vector<uint16_t> caps;
        bool capturesPending = false;
        for (Var* v : bd.lambda->freeVars) {
          caps.push_back(static_cast<uint16_t>(regOf(v)));
          if (pendingRec_.count(v)) capturesPending = true;
        }
        proto_->captures.push_back(std::move(caps));
        emit(instr::makeBx(Op::CLOSURE, r, idx));
        if (capturesPending) groupClosures_.push_back({r, bd.lambda});
        initRec(bd.dst);
        return;
      }
      case Bind::Call: compileCall(bd, t); return;
      case Bind::If: compileIf(bd, t, nullptr, NativeId::None); return;
    }
  }

  void compileCall(const Bind& bd, const Target* t) {
    if (!usesWindow(bd)) {
      if (bd.level > 0) {
        Op op = *liftedBinaryOp(bd);
        emitInto(bd, t, [&](uint32_t dst) {
          uint32_t a = atomReg(bd.args[1]), b = atomReg(bd.args[2]);
          emit(instr::withLevel(instr::make(op, dst, a, b), bd.level));
        });
      } else {
        emitInto(bd, t, [&](uint32_t dst) { emitPrimitive(primitiveOf(bd.args[0]), bd.args, dst); });
      }
      return;
    }
    if (bd.level > 0) {
      // A primitive applied under reverse tags (transformed code): call its lifted form.
      Value prim = bd.args[0].kind == Atom::Const ? bd.args[0].value : bd.args[0].sym->global;
      Atom lifted = constAtom(Value::object(vm_.liftedNative(asNative(prim), bd.level)), bd.loc);
      compileGenericCall(bd, t, &lifted);
      return;
    }
    compileGenericCall(bd, t);
  }

  // Compiles the value of `bd` with `emitTo(dst)` (temporaries above dst are released
  // after it) into its target: its register, the branch's register, or returned.
  template <class EmitTo>
  void emitInto(const Bind& bd, const Target* t, EmitTo emitTo) {
    uint32_t saved = top_;
    bool tail = t && t->kind == Target::Tail;
    uint32_t dst = t ? (tail ? allocReg() : t->reg) : dstReg(bd);
    uint32_t tempBase = top_;
    emitTo(dst);
    top_ = tempBase;
    if (tail) {
      emit(instr::make(Op::RETURN, dst));
      top_ = saved;
    }
  }

  // A call through a window: R[base] = R[base](R[base + 1] ...). `callee` replaces
  // args[0] (a primitive's lifted form).
  void compileGenericCall(const Bind& bd, const Target* t, const Atom* callee = nullptr) {
    uint32_t base = top_;
    uint32_t nargs = static_cast<uint32_t>(bd.args.size() - 1);
    auto reserved = reservedBase_.find(&bd);
    if (reserved != reservedBase_.end())
      base = reserved->second;
    else
      for (size_t i = 0; i < bd.args.size(); ++i) allocReg();
    for (size_t i = 0; i < bd.args.size(); ++i)
      loadAtom(i == 0 && callee ? *callee : bd.args[i], base + static_cast<uint32_t>(i));
    loc_ = bd.loc;
    if (t && t->kind == Target::Tail) {
      emit(instr::make(Op::TAILCALL, base, nargs));
      emit(instr::make(Op::RETURN, base));
      top_ = base;
      return;
    }
    emit(instr::make(Op::CALL, base, nargs));
    if (t) {
      if (t->reg != base) emit(instr::make(Op::MOVE, t->reg, base));
      top_ = base;
    } else if (auto pre = reg_.find(bd.dst); pre != reg_.end()) {
      // The result was given a register in an enclosing call's window.
      if (pre->second != base) emit(instr::make(Op::MOVE, pre->second, base));
      top_ = std::max(base, pre->second + 1);
    } else {
      reg_[bd.dst] = base;
      top_ = base + 1;
    }
  }

  struct Checkpoint {
    size_t code, protos, closures;
    uint32_t top;
  };

  // Compiles an `if` binding. With `cmp`, the condition is that comparison call,
  // fused into one compare-and-jump (falling back to a plain test if the jump
  // offset does not fit in 16 bits).
  void compileIf(const Bind& bd, const Target* t, const Bind* cmp, NativeId cmpId) {
    Target target = t ? *t : Target{Target::Reg, dstReg(bd)};
    Checkpoint cp{proto_->code.size(), proto_->protos.size(), groupClosures_.size(), top_};
    size_t jumpElse;
    bool fused = false;
    if (cmp) {
      loc_ = cmp->loc;
      const Atom& x = cmp->args[1];
      const Atom& y = cmp->args[2];
      uint32_t saved = top_;
      if (isNumberConst(y) && constant(y.value) <= 0xffff) {
        jumpElse = emit(instr::make(jumpOp(cmpId, true), atomReg(x), constant(y.value)));
      } else {
        uint32_t a = atomReg(x), b = atomReg(y);
        jumpElse = emit(instr::make(jumpOp(cmpId, false), a, b));
      }
      top_ = saved;
      fused = true;
    } else {
      uint32_t saved = top_;
      jumpElse = emit(instr::makeBx(Op::JMPIFNOT, atomReg(bd.atom), 0));
      top_ = saved;
    }
    loc_ = bd.loc;
    uint32_t branchTop = top_;
    compileBlock(bd.thenB, target);
    top_ = branchTop;
    size_t jumpEnd = 0;
    bool needEnd = target.kind != Target::Tail;
    if (needEnd) jumpEnd = emit(instr::makeBx(Op::JMP, 0, 0));
    int64_t elseOff = static_cast<int64_t>(proto_->code.size()) - static_cast<int64_t>(jumpElse) - 1;
    if (fused) {
      if (elseOff > 32767) {
        // Too far for a 16-bit offset: redo this `if` without fusion.
        proto_->code.resize(cp.code);
        proto_->locs.resize(cp.code);
        proto_->protos.resize(cp.protos);
        proto_->captures.resize(cp.protos);
        groupClosures_.resize(cp.closures);
        top_ = cp.top;
        forgetBlock(bd.thenB);
        compileBind(*cmp, nullptr);
        compileIf(bd, t, nullptr, NativeId::None);
        return;
      }
      proto_->code[jumpElse] = instr::withSC(proto_->code[jumpElse], static_cast<int32_t>(elseOff));
    } else {
      proto_->code[jumpElse] = instr::withSBx(proto_->code[jumpElse], static_cast<int32_t>(elseOff));
    }
    compileBlock(bd.elseB, target);
    top_ = branchTop;
    if (needEnd) {
      int64_t endOff = static_cast<int64_t>(proto_->code.size()) - static_cast<int64_t>(jumpEnd) - 1;
      proto_->code[jumpEnd] = instr::withSBx(proto_->code[jumpEnd], static_cast<int32_t>(endOff));
    }
  }

  // Undoes what compiling `b` decided about its variables (their registers, the
  // bindings done ahead), so that it can be compiled again from a checkpoint.
  void forgetBlock(const Block* b) {
    std::vector<const Block*> work{b};
    while (!work.empty()) {
      const Block* blk = work.back();
      work.pop_back();
      for (const Bind& bd : blk->binds) {
        if (bd.dst) reg_.erase(bd.dst);
        for (Var* v : bd.recVars) reg_.erase(v);
        compiledAhead_.erase(&bd);
        reservedBase_.erase(&bd);
        if (bd.thenB) work.push_back(bd.thenB);
        if (bd.elseB) work.push_back(bd.elseB);
      }
    }
  }

  struct GroupClosure {
    uint32_t reg;
    const Lambda* lam;
  };

  VM& vm_;
  std::shared_ptr<Module> mod_;
  const Lambda* lam_;
  Proto* proto_ = nullptr;
  std::unordered_map<const Var*, uint32_t> reg_;
  std::unordered_map<const Var*, int> uses_;
  std::unordered_map<uint64_t, uint32_t> constIndex_;
  std::unordered_set<const Var*> pendingRec_;
  std::vector<GroupClosure> groupClosures_;
  std::unordered_map<const Bind*, uint32_t> reservedBase_;
  uint32_t top_ = 0;
  uint32_t maxTop_ = 0;
  SrcLoc loc_;
  StackGuard stack_;
};

}  // namespace

Proto* compileLambda(VM& vm, const std::shared_ptr<Module>& mod, const Lambda* lam) {
  FnCompiler c(vm, mod, lam, nullptr);
  return c.compile();
}

}  // namespace dlam
