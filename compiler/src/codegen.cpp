// codegen.cpp — register allocation and bytecode emission from A-normal form.
//
// Every ANF variable gets its own register (parameters first, then captured values
// loaded at entry, then bindings in order); registers of a branch are released when
// the branch ends. Calls of builtin primitives whose global still holds the builtin
// become dedicated opcodes; a comparison feeding an `if` becomes one compare-and-
// jump. Other calls pass the callee and the arguments in a window of consecutive
// registers above every register still needed (the callee's frame starts right
// above it); a value used only there is computed straight into its register of the
// window, which is reserved when the first of them is computed (reserveSlot). A
// call in tail position becomes TAILCALL (always followed by RETURN, which the
// interpreter relies on for tail calls of natives). Letrec groups load "undefined"
// into their registers first and patch closures that captured a variable before it
// was initialised (SETUPVAL). For transformed code: a call whose result is checked
// (%rep-result, %bp-result) and only taken apart receives the parts in registers
// (CALL with a split mode, compileSplitCall), through a second check of the value
// (code transformed twice), and a function ending in (cons a b), in a chain of
// conses, or in (cons chain closure) returns with RETURN2, RETURNN or RETURNR, which
// make the pairs only for a caller that takes the value whole. A function that only
// takes its one parameter apart along a list takes it in parts (Proto::paramSplit),
// and a call whose argument is a list made for it passes the parts (CALLP): a
// backpropagator's sensitivity list is made only for a callee that takes it whole.
// Where these apply is found before the code is generated, by callconv.h's
// planCalls, with the uses of the variables; this file reads its plan and allocates
// the registers it calls for.
#include "codegen.h"

#include "callconv.h"

#include <algorithm>
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
// placeBelow looks at most this many bindings between an argument and its call.
constexpr size_t kMaxPlacedScan = 256;

struct Target {
  enum Kind { Tail, Reg } kind;
  uint32_t reg = 0;
  bool fresh =
      false;  // reg names no variable the code computing it can read (not a letrec variable's)
};

class FnCompiler {
 public:
  FnCompiler(VM& vm, const std::shared_ptr<Module>& mod, const Lambda* lam, FnCompiler* parent)
      : vm_(vm),
        mod_(mod),
        lam_(lam),
        stack_(parent ? StackGuard(parent->stack_.base()) : StackGuard()) {}

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
    proto_->callKey = lam_->rest ? 0xffffffffu : proto_->nparams;
    plan_ = planCalls(vm_, lam_);
    if (plan_->paramSplit) {
      // The parameter taken in parts: the takes name registers 0 .. n - 1 (register 0
      // is the parameter's).
      auto n = static_cast<uint32_t>(plan_->paramSplit->parts.size());
      for (uint32_t j = 1; j < n; ++j) allocReg();
      for (uint32_t j = 0; j < n; ++j)
        for (const Bind* take : plan_->paramSplit->parts[j]) reg_[take->dst] = j;
      proto_->paramSplit = static_cast<uint8_t>(n);
      proto_->callKey = kCallParts | n;
    }
    // Captured values are loaded at entry, each run of them (consecutive captured
    // values, into the consecutive registers allocated here) by one GETUPVAL, except
    // one used once, as an argument (or the callee) of a call through a window: it is
    // loaded where it is used, straight into the call's window (lazyUpval_), which
    // saves a MOVE, and ends the run.
    // A reverse-transformed function (the image of a lambda, not a backpropagator)
    // first looks at who called it: code that observes its result gets it through
    // %j-boundary, its backpropagator materializing (vm/src/ad.cpp, observedCallee).
    if (lam_->primalOf) emit(instr::make(Op::ADENTRY, 0));
    uint32_t runStart = 0, runReg = 0, runLength = 0;  // the run being gathered
    auto loadRun = [&] {
      if (runLength) emit(instr::make(Op::GETUPVAL, runReg, runStart, runLength - 1));
      runLength = 0;
    };
    for (size_t i = 0; i < lam_->freeVars.size(); ++i) {
      Var* v = lam_->freeVars[i];
      proto_->freeVars.push_back(v->name);
      if (auto it = plan_->vars.find(v);
          it != plan_->vars.end() && it->second.count == 1 && it->second.argUses == 1) {
        lazyUpval_[v] = static_cast<uint32_t>(i);
        loadRun();
        continue;
      }
      uint32_t r = allocReg();
      reg_[v] = r;
      if (!runLength) {
        runStart = static_cast<uint32_t>(i);
        runReg = r;
      }
      ++runLength;
    }
    loadRun();
    compileBlock(lam_->body, Target{Target::Tail});
    proto_->nregs = static_cast<uint16_t>(maxTop_ + 1);
    // The proto is complete (nothing extends it later): trim its vectors and count
    // their memory in the VM's heap, with the IR it keeps, so the heap limit covers
    // compiled code.
    proto_->code.shrink_to_fit();
    proto_->locs.shrink_to_fit();
    proto_->constants.shrink_to_fit();
    proto_->protos.shrink_to_fit();
    proto_->captures.shrink_to_fit();
    proto_->irBytes = ownBytes(lam_);
    vm_.noteProtoBytes(proto_);
    return proto_;
  }

 private:
  [[noreturn]] void fail(const std::string& msg) {
    throw Error(ErrorKind::Syntax, msg, lam_->file, loc_);
  }

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

  uint32_t regOf(const Var* v) {
    auto it = reg_.find(v);
    if (it == reg_.end()) fail("internal error: variable '" + v->name + "' has no register");
    return it->second;
  }

  void loadAtom(const Atom& a, uint32_t r) {
    switch (a.kind) {
      case Atom::Local: {
        if (auto lazy = lazyUpval_.find(a.var); lazy != lazyUpval_.end()) {
          emit(instr::make(Op::GETUPVAL, r, lazy->second));
          break;
        }
        uint32_t src = regOf(a.var);
        if (src != r) emit(instr::make(Op::MOVE, r, src));
        break;
      }
      case Atom::Global:
        emit(instr::makeBx(Op::GETGLOBAL, r, constant(Value::object(a.sym))));
        break;
      case Atom::Const:
        emit(instr::makeBx(Op::LOADK, r, constant(a.value)));
        break;
    }
  }

  // The register holding `a`, loading it into a fresh temporary if it is not a local.
  uint32_t atomReg(const Atom& a) {
    if (a.kind == Atom::Local && !lazyUpval_.count(a.var)) return regOf(a.var);
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

  static bool isNumberConst(const Atom& a) { return a.kind == Atom::Const && a.value.isNumber(); }

  // Emits the dedicated opcode of a primitive call (one callconv.h's hasOpcode accepts) into
  // register `dst`.
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
    // lk: the K-form for a constant on the left (none for comparisons), marked
    // kSwapped if it takes the operands in the other order.
    auto binop = [&](Op rr, Op rk, std::optional<Op> lk, bool swapped) {
      if (auto k = kIndex(*y)) {
        emit(instr::make(rk, dst, atomReg(*x), *k));
      } else if (auto kx = lk ? kIndex(*x) : std::nullopt) {
        emit(instr::make(*lk, dst, atomReg(*y), *kx) | (swapped ? instr::kSwapped : 0));
      } else {
        uint32_t a = atomReg(*x), b = atomReg(*y);
        emit(instr::make(rr, dst, a, b));
      }
    };
    auto binary = [&](Op op) {
      uint32_t a = atomReg(*x), b = atomReg(*y);
      emit(instr::make(op, dst, a, b));
    };
    if (n > 2 && id != NativeId::SensBack) {
      // (+ a b c ...) → ((a + b) + c) ...: a chain of binary opcodes through dst.
      Op rr = id == NativeId::Add   ? Op::ADD
              : id == NativeId::Mul ? Op::MUL
              : id == NativeId::Sub ? Op::SUB
                                    : Op::DIV;
      // A number constant after the first two is the K-form's C: (+ a b 0.01).
      Op rk = id == NativeId::Add   ? Op::ADDK
              : id == NativeId::Mul ? Op::MULK
              : id == NativeId::Sub ? Op::SUBK
                                    : Op::DIVK;
      uint32_t a0 = atomReg(args[1]);
      uint32_t a1 = atomReg(args[2]);
      emit(instr::make(rr, dst, a0, a1));
      for (size_t i = 3; i <= n; ++i) {
        if (auto k = kIndex(args[i])) {
          emit(instr::make(rk, dst, dst, *k));
          continue;
        }
        uint32_t ai = atomReg(args[i]);
        emit(instr::make(rr, dst, dst, ai));
      }
      return;
    }
    switch (id) {
      case NativeId::Caar:
      case NativeId::Cadr:
      case NativeId::Cdar:
      case NativeId::Cddr:
      case NativeId::Caddr:
      case NativeId::Cdddr: {
        // Innermost access first: cadr = (car (cdr x)). Each step's C says which
        // accessor and which step it is (cxrStep), so an error names the accessor and
        // shows its argument: the steps before the last go through a temporary, and the
        // argument's register keeps it until then.
        const char* path = cxrPath(id);
        size_t len = std::strlen(path);
        uint32_t src = atomReg(*x);
        uint32_t tmp = allocReg();
        for (size_t i = len, step = 0; i-- > 0; ++step) {
          uint32_t to = i == 0 ? dst : tmp;
          emit(instr::make(path[i] == 'a' ? Op::CAR : Op::CDR, to, src,
                           instr::cxrStep(static_cast<uint32_t>(id), step)));
          src = to;
        }
        return;
      }
      case NativeId::Add:
        return binop(Op::ADD, Op::ADDK, Op::ADDK, true);
      case NativeId::Mul:
        return binop(Op::MUL, Op::MULK, Op::MULK, true);
      case NativeId::Div:
        return binop(Op::DIV, Op::DIVK, Op::RDIVK, false);
      case NativeId::Sub:
        if (n == 1) return emit1(Op::NEG, dst, *x);
        return binop(Op::SUB, Op::SUBK, Op::RSUBK, false);
      case NativeId::Lt:
      case NativeId::Le:
      case NativeId::Gt:
      case NativeId::Ge:
      case NativeId::NumEq:
        return binop(compareOp(id, false), compareOp(id, true), std::nullopt, false);
      case NativeId::Cons:
        return binary(Op::CONS);
      case NativeId::Plus:
        return binary(Op::PLUS);
      case NativeId::SensAdd:
        return binary(Op::ADDS);
      case NativeId::SensSub:
        return binary(Op::SUBS);
      case NativeId::Unreduce:
        return binary(Op::UNRED);
      case NativeId::SumTo:
        return binary(Op::SUMTO);
      case NativeId::SensBack: {
        // (%sens-back g x like...): x #t (the likes' product) is the flag p, not a register
        bool product = args[2].kind == Atom::Const && args[2].value.isBool();
        std::vector<uint32_t> regs;
        for (size_t j = product ? 3 : 2; j < args.size(); ++j) regs.push_back(atomReg(args[j]));
        uint32_t g = atomReg(*x);
        emit(instr::make(Op::SENSBK, dst, static_cast<uint32_t>(regs.size()), g) |
             (product ? instr::kProduct : 0));
        emitListWords(regs);
        return;
      }
      case NativeId::AttachStarJ:
        return binary(Op::ATTACH);
      case NativeId::RepResult:
        return binary(Op::REPRES);
      case NativeId::BpResult:
        return binary(Op::BPRES);
      case NativeId::EqP:
      case NativeId::EqvP:
        return binary(Op::EQP);  // the same predicate (primitives_lists.cpp)
      case NativeId::VectorRef:
        return binary(Op::VREF);
      case NativeId::SCar:
        return emit1(Op::SCAR, dst, *x);
      case NativeId::SCdr:
        return emit1(Op::SCDR, dst, *x);
      case NativeId::StarJ:
        return emit1(Op::STARJ, dst, *x);
      case NativeId::StarJInverse:
        return emit1(Op::JINV, dst, *x);
      case NativeId::Car:
        return emit1(Op::CAR, dst, *x);
      case NativeId::Cdr:
        return emit1(Op::CDR, dst, *x);
      case NativeId::Not:
        return emit1(Op::NOT, dst, *x);
      case NativeId::NullP:
        return emit1(Op::NULLP, dst, *x);
      case NativeId::PairP:
        return emit1(Op::PAIRP, dst, *x);
      case NativeId::NumberP:
      case NativeId::SymbolP:
      case NativeId::StringP:
      case NativeId::BooleanP:
      case NativeId::ProcedureP:
        emit(instr::make(Op::TYPEP, dst, atomReg(*x), static_cast<uint32_t>(id)));
        return;
      default:
        fail("internal error: no opcode for this primitive");
    }
  }

  void emit1(Op op, uint32_t dst, const Atom& x) { emit(instr::make(op, dst, atomReg(x))); }

  static Op compareOp(NativeId id, bool k) {
    switch (id) {
      case NativeId::Lt:
        return k ? Op::LTK : Op::LT;
      case NativeId::Le:
        return k ? Op::LEK : Op::LE;
      case NativeId::Gt:
        return k ? Op::GTK : Op::GT;
      case NativeId::Ge:
        return k ? Op::GEK : Op::GE;
      default:
        return k ? Op::NUMEQK : Op::NUMEQ;
    }
  }

  static Op jumpOp(NativeId id, bool k) {
    switch (id) {
      case NativeId::Lt:
        return k ? Op::JNLTK : Op::JNLT;
      case NativeId::Le:
        return k ? Op::JNLEK : Op::JNLE;
      case NativeId::Gt:
        return k ? Op::JNGTK : Op::JNGT;
      case NativeId::Ge:
        return k ? Op::JNGEK : Op::JNGE;
      default:
        return k ? Op::JNNUMEQK : Op::JNNUMEQ;
    }
  }

  // ---- blocks and bindings ----------------------------------------------------

  // The opcode of a binary arithmetic primitive or comparison applied under reverse
  // tags (transformed code), which takes the level in its top bits (the interpreter's
  // slow path strips and re-tags): for a call callconv.h's hasLiftedOpcode accepts.
  Op liftedBinaryOp(const Bind& bd) {
    switch (NativeId id = builtinOf(vm_, bd.args[0])) {
      case NativeId::Add:
        return Op::ADD;
      case NativeId::SensAdd:
        return Op::ADDS;
      case NativeId::SensSub:
        return Op::SUBS;
      case NativeId::Sub:
        return Op::SUB;
      case NativeId::Mul:
        return Op::MUL;
      case NativeId::Div:
        return Op::DIV;
      default:
        return compareOp(id, false);
    }
  }

  // A window reserved for a call before the call is compiled: registers base .. end - 1.
  struct Window {
    const Bind* call;
    uint32_t base, end;
  };

  // The base of the window reserved for `call`, which the call now uses up.
  std::optional<uint32_t> takeWindow(const Bind* call) {
    for (size_t k = windows_.size(); k-- > 0;)
      if (windows_[k].call == call) {
        uint32_t base = windows_[k].base;
        windows_.erase(windows_.begin() + static_cast<std::ptrdiff_t>(k));
        return base;
      }
    return std::nullopt;
  }

  // The registers below this stay allocated: windows reserved for calls still to come
  // (each is reserved at the top, so the latest is the highest).
  uint32_t windowsTop() const { return windows_.empty() ? 0 : windows_.back().end; }

  // For each binding j of a block: the last binding before j whose variable is used
  // after j (0 if none); see reserveSlot.
  std::vector<size_t> liveAcross(const Block* b) {
    size_t n = b->binds.size();
    std::vector<size_t> last(n, 0), across(n, 0), open;
    for (size_t k = 0; k < n; ++k) {
      const Bind& bd = b->binds[k];
      if (bd.dst) last[k] = plan_->lastUse(bd.dst);
      for (Var* v : bd.recVars) last[k] = std::max(last[k], plan_->lastUse(v));
    }
    // `open`: bindings whose variables are still to be used, latest on top (one that
    // is used up is dropped when it comes to the top).
    for (size_t j = 0; j < n; ++j) {
      while (!open.empty() && last[open.back()] <= j) open.pop_back();
      across[j] = open.empty() ? 0 : open.back();
      if (last[j] > j) open.push_back(j);
    }
    return across;
  }

  // Gives the variables bound between bindings i and j that are used after j their
  // registers now, below the window about to be reserved for the call at j (out of
  // reach of the callee's frame). False if one of them cannot have its register chosen
  // ahead (a call's result, a split call's part, a letrec group), or if there are too
  // many bindings in between to look at.
  bool placeBelow(const Block* b, size_t i, size_t j) {
    if (j - i > kMaxPlacedScan) return false;
    auto outlives = [&](const Var* v) { return plan_->lastUse(v) > j; };
    std::unordered_map<const Var*, size_t> between;  // the bindings seen, by variable
    std::vector<Var*> below;
    for (size_t k = i + 1; k < j; ++k) {
      const Bind* m = &b->binds[k];
      if (m->kind == Bind::Rec) {
        for (const Var* v : m->recVars)
          if (outlives(v) && !reg_.count(v)) return false;
        continue;
      }
      if (!m->dst) continue;
      between.emplace(m->dst, k);
      if (!outlives(m->dst)) continue;
      // An alias (let) outlives the call through the variable it names.
      size_t at = k;
      while (m->kind == Bind::Copy && m->atom.kind == Atom::Local && !m->dst->rec) {
        auto named = between.find(m->atom.var);
        if (named == between.end()) break;  // bound before: its register is below
        at = named->second;
        m = &b->binds[at];
      }
      if (reg_.count(m->dst) ||
          (m->kind == Bind::Copy && m->atom.kind == Atom::Local && !m->dst->rec))
        continue;
      // (A value with a slot in a later window would lose it: a move for a move.)
      if (plan_->splitParts.count(m) || (m->kind == Bind::Call && usesWindow(vm_, *m)) ||
          slotOf(b, at))
        return false;
      if (std::find(below.begin(), below.end(), m->dst) == below.end()) below.push_back(m->dst);
    }
    for (Var* v : below) reg_[v] = allocReg();
    return true;
  }

  // Where the value of binding i can be computed in a window: a variable whose only
  // use is as an argument (or the callee) of a later call of the block through a
  // window, possibly named by copies (let) used once, which share its register. The
  // call's index and the position in its window; nullopt for variables with registers
  // of their own (parameters, captured and letrec variables, aliases, closures that
  // letrec patches).
  std::optional<std::pair<size_t, uint32_t>> slotOf(const Block* b, size_t i) {
    const Bind& bd = b->binds[i];
    const Var* v = bd.dst;
    if (!v || v->rec) return std::nullopt;
    switch (bd.kind) {
      case Bind::Call:
      case Bind::If:
        break;
      case Bind::Copy:
        if (bd.atom.kind == Atom::Local) return std::nullopt;
        break;
      case Bind::MakeLambda:
        for (const Var* fv : bd.lambda->freeVars)
          if (fv->rec) return std::nullopt;
        break;
      default:
        return std::nullopt;
    }
    size_t j = i;
    for (;;) {
      auto u = plan_->vars.find(v);
      if (u == plan_->vars.end() || u->second.count != 1 || u->second.last <= j ||
          u->second.last >= b->binds.size())
        return std::nullopt;
      j = u->second.last;
      const Bind& copy = b->binds[j];
      bool untag = copy.dst && plan_->untagged.count(
                                   copy.dst);  // (*j v), passed untagged: v goes to the window
      if (!untag && (copy.kind != Bind::Copy || copy.atom.kind != Atom::Local || copy.dst->rec))
        break;
      v = copy.dst;
    }
    const Bind& call = b->binds[j];
    if (!usesWindow(vm_, call) || reg_.count(bd.dst) || plan_->partsCalls.count(&call) ||
        isLoopJump(call))
      return std::nullopt;
    for (size_t slot = 0; slot < call.args.size(); ++slot)
      if (call.args[slot].kind == Atom::Local && call.args[slot].var == v)
        return std::pair(j, static_cast<uint32_t>(slot));
    return std::nullopt;
  }

  // Before binding i is compiled: a value that has a slot in a window (slotOf) is
  // given that register, so that it is computed there and the call needs no move:
  // (f (- n 1)) compiles to SUBK into the window, then CALL. The window is reserved at
  // the first such argument, at the top of the registers, and everything computed
  // until the call is above it, where the callee's frame goes: so a variable bound in
  // between and used after the call (`across`, from liveAcross) must be given a
  // register below the window first (placeBelow), or the window waits.
  void reserveSlot(const Block* b, size_t i, std::vector<size_t>& across) {
    if (std::optional<uint32_t> r = loopSlot(b, i)) {
      reg_[b->binds[i].dst] = *r;
      return;
    }
    auto found = slotOf(b, i);
    if (!found) return;
    auto [j, slot] = *found;
    const Bind& call = b->binds[j];
    auto w = std::find_if(windows_.begin(), windows_.end(),
                          [&](const Window& x) { return x.call == &call; });
    uint32_t base;
    if (w != windows_.end()) {
      base = w->base;
    } else {
      if (across.empty()) across = liveAcross(b);
      if (across[j] > i && !placeBelow(b, i, j)) return;
      base = top_;
      for (size_t k = 0; k < call.args.size(); ++k) allocReg();
      windows_.push_back({&call, base, top_});
    }
    reg_[b->binds[i].dst] = base + slot;
  }

  // A link of a chain of conditionals: the `if`, and the comparison fused into its
  // test (none: a plain test of its atom).
  struct IfLink {
    const Bind* bd = nullptr;
    const Bind* cmp = nullptr;
    NativeId cmpId = NativeId::None;
  };

  // Compiles block b into target t. With `chain`, a block that ends with an `if`
  // giving its value (anf::tailIf) is compiled up to that `if` only, which is left
  // in *chain for the caller's loop (compileIf); else *chain is left empty.
  void compileBlock(const Block* b, const Target& t, IfLink* chain = nullptr) {
    if (stack_.exceeded()) fail("expression nested too deeply to compile");
    size_t n = b->binds.size();
    bool delivered = false;
    // A list returned in parts (callconv.h): its conses compile at the outermost one.
    const ReturnedList* returned = nullptr;
    if (auto r = plan_->returned.find(b); r != plan_->returned.end()) returned = &r->second;
    std::vector<size_t> across;  // liveAcross(b), when a window is first reserved
    for (size_t i = 0; i < n; ++i) {
      const Bind& bd = b->binds[i];
      loc_ = bd.loc;
      reserveSlot(b, i, across);
      if (bd.kind == Bind::Rec && i + 2 < n) {
        // A loop (named let, do): compiled in place, its self-calls jumps.
        bool lastCall =
            i + 3 == n && b->result.kind == Atom::Local && b->result.var == b->binds[i + 2].dst;
        if (auto lp = loopPlan(b, i, lastCall && t.kind == Target::Tail)) {
          reserveSlot(b, i + 2, across);  // its value may go to a later call's window
          compileLoop(b, i, lastCall ? &t : nullptr, std::move(lp));
          if (lastCall) delivered = true;
          i += 2;
          continue;
        }
      }
      bool last = i + 1 == n && b->result.kind == Atom::Local && b->result.var == bd.dst &&
                  (bd.kind == Bind::Call || bd.kind == Bind::If);
      if (plan_->ahead.count(&bd)) {
        if (returned && &bd == returned->chain[0]) {
          emitReturnList(returned->chain, returned->rep);
          delivered = true;
        }
        continue;
      }
      if (size_t used = compileSplitCall(b, i)) {
        i += used - 1;
        continue;
      }
      if (i + 1 == n && t.kind == Target::Tail && bd.kind == Bind::Call &&
          b->result.kind == Atom::Local && b->result.var == bd.dst &&
          builtinOf(vm_, bd.args[0]) == NativeId::Cons && bd.level == 0 && bd.args.size() == 3) {
        // (cons a b) returned: RETURN2 makes the pair only for a caller that takes it whole.
        uint32_t x = atomReg(bd.args[1]), y = atomReg(bd.args[2]);
        emit(instr::make(Op::RETURN2, x, y));
        delivered = true;
        continue;
      }
      if (bd.kind == Bind::Call && i + 1 < n) {
        const Bind& next = b->binds[i + 1];
        NativeId id = builtinOf(vm_, bd.args[0]);
        if (next.kind == Bind::If && next.atom.kind == Atom::Local && next.atom.var == bd.dst &&
            isCompare(id) && bd.level == 0 && bd.args.size() == 3 && plan_->uses(bd.dst) == 1) {
          bool nextLast = i + 2 == n && b->result.kind == Atom::Local && b->result.var == next.dst;
          reserveSlot(b, i + 1, across);
          if (nextLast && chain)
            *chain = {&next, &bd, id};
          else
            compileIf(next, nextLast ? &t : nullptr, &bd, id);
          if (nextLast) delivered = true;
          ++i;
          continue;
        }
      }
      if (deferToJump(b, i)) continue;
      if (last && chain && bd.kind == Bind::If)
        *chain = {&bd};
      else
        compileBind(bd, last ? &t : nullptr);
      if (last) delivered = true;
    }
    if (!delivered) {
      loc_ = b->result.loc.known() ? b->result.loc : loc_;
      deliver(b->result, t);
    }
  }

  // Loads the callee and the arguments of a call into its window at base: the parts of
  // its argument for a parts call (CallPlan::partsCalls). Returns the B operand of its CALL
  // and makes *op CALLP for a parts call.
  uint32_t loadCall(const Bind& call, uint32_t base, const Atom& callee, Op* op) {
    auto parts = plan_->partsCalls.find(&call);
    if (parts == plan_->partsCalls.end()) {
      for (size_t j = 0; j < call.args.size(); ++j)
        loadAtom(j == 0 ? callee : call.args[j], base + static_cast<uint32_t>(j));
      return static_cast<uint32_t>(call.args.size() - 1);
    }
    auto m = static_cast<uint32_t>(parts->second.size());
    while (top_ < base + 1 + m) allocReg();
    loadAtom(callee, base);
    for (uint32_t j = 0; j < m; ++j) loadAtom(parts->second[j], base + 1 + j);
    *op = Op::CALLP;
    return m;
  }

  // Compiles the split call at binding i and its check (CallPlan::splits): CALL with
  // the split mode, its parts in the window's registers. Returns how many bindings it
  // compiled, 0 if binding i is no split call.
  size_t compileSplitCall(const Block* b, size_t i) {
    if (plan_->splits.empty()) return 0;
    auto found = plan_->splits.find(&b->binds[i]);
    if (found == plan_->splits.end()) return 0;
    const Bind& call = b->binds[i];
    const SplitPlan& plan = found->second;
    auto count = static_cast<uint32_t>(plan.parts.size());
    loc_ = call.loc;
    uint32_t base = windowFor(call, std::nullopt);
    // (Registers above the window held values used up by the call, or nothing.)
    while (top_ < base + count) allocReg();
    Op op = Op::CALL;
    uint32_t nargs = loadCall(call, base, call.args[0], &op);
    loc_ = call.loc;
    emit(instr::withRawArgs(instr::make(op, base, nargs, plan.mode),
                            untagArguments(call, nargs, op)));
    top_ = std::max(base + count, windowsTop());
    // The takes become names of the registers (registers are written once) and
    // compile to nothing where they stand (CallPlan::ahead).
    for (size_t j = 0; j < plan.parts.size(); ++j)
      for (const Bind* take : plan.parts[j]) reg_[take->dst] = base + static_cast<uint32_t>(j);
    return 2;
  }

  // Emits the return of a list returned in parts (ReturnedList): RETURNN, or RETURNR for a rep.
  void emitReturnList(const std::vector<const Bind*>& chain, bool rep) {
    loc_ = chain[0]->loc;
    size_t first = rep ? 1 : 0;  // the cons of the list's first element
    Instr marks = 0;
    // The head and the tail may be constants (kHeadK, kTailK), which need no register.
    auto operand = [&](const Atom& a, Instr mark) {
      if (a.kind == Atom::Const)
        if (uint32_t k = constant(a.value); k <= 0xffff) {
          marks |= mark;
          return k;
        }
      return atomReg(a);
    };
    uint32_t head = operand(chain[first]->args[1], instr::kHeadK);
    std::vector<uint32_t> regs;  // the words: RETURNR's bp, then x1 ... xk
    if (rep) regs.push_back(atomReg(chain[0]->args[2]));
    for (size_t j = first + 1; j < chain.size(); ++j) regs.push_back(atomReg(chain[j]->args[1]));
    uint32_t tail = operand(chain.back()->args[2], instr::kTailK);
    loc_ = chain[0]->loc;
    emit(instr::make(rep ? Op::RETURNR : Op::RETURNN, head, static_cast<uint32_t>(regs.size()),
                     tail) |
         marks);
    emitListWords(regs);
  }

  // The words after a RETURNN, RETURNR or SENSBK that list its registers, four to a
  // word, the first lowest (instr::listedReg reads them).
  void emitListWords(const std::vector<uint32_t>& regs) {
    for (size_t j = 0; j < regs.size(); j += 4) {
      Instr w = 0;
      for (size_t m = 0; m < 4 && j + m < regs.size(); ++m)
        w |= static_cast<Instr>(regs[j + m]) << (16 * m);
      emit(w);
    }
  }

  // Chains of *j (or of *j-inverse) through values used once, as transforming
  // transformed code makes them ((*j (*j x)), a number tagged twice; its primal taken
  // twice): one STARJ (JINV) whose C counts the levels after the first. The last such
  // instruction emitted, and the variable its bind defines:
  struct LevelChain {
    size_t at = SIZE_MAX;
    const Var* var = nullptr;
  } levelChain_;

  static std::optional<Op> levelOp(NativeId id) {
    if (id == NativeId::StarJ) return Op::STARJ;
    if (id == NativeId::StarJInverse) return Op::JINV;
    return std::nullopt;
  }

  // Whether bd, (*j v) or (*j-inverse v), extends the instruction just emitted, which
  // made v the same way at the same place in the source (an error names one place
  // for all levels) and v is used only here: it then takes one level more and writes
  // dst.
  bool extendLevels(const Bind& bd, uint32_t dst) {
    std::optional<Op> op = levelOp(builtinOf(vm_, bd.args[0]));
    const Atom& v = bd.args.back();
    if (!op || bd.args.size() != 2 || v.kind != Atom::Local || v.var != levelChain_.var ||
        plan_->uses(v.var) != 1 || levelChain_.at + 1 != proto_->code.size())
      return false;
    Instr& last = proto_->code[levelChain_.at];
    SrcLoc at = proto_->locs[levelChain_.at];
    if (instr::op(last) != *op || instr::a(last) != regOf(v.var) || instr::c(last) == 0xffff ||
        at.line != loc_.line || at.col != loc_.col)
      return false;
    last = instr::make(*op, dst, instr::b(last), instr::c(last) + 1);
    return true;
  }

  // The mask of a call's untagged arguments (CallPlan::untagged).
  uint32_t untagArguments(const Bind& call, uint32_t nargs, Op op) const {
    if (plan_->untagged.empty() || op != Op::CALL || nargs + 1 != call.args.size()) return 0;
    uint32_t raw = 0;
    for (uint32_t j = 0; j < nargs && j < 8; ++j) {
      const Atom& x = call.args[j + 1];
      if (x.kind == Atom::Local && plan_->untagged.count(x.var)) raw |= 1u << j;
    }
    return raw;
  }

  // Records bd's instruction if it is a STARJ or a JINV a next one may extend.
  void noteLevels(const Bind& bd) {
    bool chain = levelOp(builtinOf(vm_, bd.args[0])) && bd.args.size() == 2 && bd.dst &&
                 !proto_->code.empty();
    levelChain_ = chain ? LevelChain{proto_->code.size() - 1, bd.dst} : LevelChain{};
  }

  void initRec(const Var* v) {
    if (!pendingRec_.erase(v)) return;
    uint32_t r = regOf(v);
    for (const auto& gc : groupClosures_)
      for (size_t j = 0; j < gc.lam->freeVars.size(); ++j)
        if (gc.lam->freeVars[j] == v)
          emit(instr::make(Op::SETUPVAL, gc.reg, static_cast<uint32_t>(j), r));
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
      case Bind::Call:
        compileCall(bd, t);
        return;
      case Bind::If:
        compileIf(bd, t, nullptr, NativeId::None);
        return;
    }
  }

  void compileCall(const Bind& bd, const Target* t) {
    if (isLoopJump(bd)) return compileLoopJump(bd);
    if (!usesWindow(vm_, bd)) {
      if (bd.level > 0) {
        Op op = liftedBinaryOp(bd);
        emitInto(bd, t, [&](uint32_t dst) {
          uint32_t a = atomReg(bd.args[1]), b = atomReg(bd.args[2]);
          emit(instr::withLevel(instr::make(op, dst, a, b), bd.level));
        });
      } else {
        if (!t && plan_->untagged.count(bd.dst)) {
          // Passed untagged by its call: the name of v's register.
          reg_[bd.dst] = regOf(bd.args[1].var);
          levelChain_ = {};
          return;
        }
        emitInto(bd, t, [&](uint32_t dst) {
          if (extendLevels(bd, dst)) return;
          if (auto i = plan_->untaggedParams.find(&bd); i != plan_->untaggedParams.end()) {
            emit(instr::make(Op::ARGJINV, dst, atomReg(bd.args[1])));
            proto_->rawParams = static_cast<uint8_t>(proto_->rawParams | 1u << i->second);
            return;
          }
          emitPrimitive(builtinOf(vm_, bd.args[0]), bd.args, dst);
        });
        noteLevels(bd);
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

  // The first register of the window of `call`: the one reserved for it; else `into`,
  // the register its result goes to, if nothing is allocated above it (the result
  // then lands in place); else a fresh one at the top.
  uint32_t windowFor(const Bind& call, std::optional<uint32_t> into) {
    if (std::optional<uint32_t> w = takeWindow(&call)) return *w;
    uint32_t base = into && *into + 1 == top_ ? *into : top_;
    while (top_ < base + call.args.size()) allocReg();
    return base;
  }

  // A call through a window: R[base] = R[base](R[base + 1] ...). `callee` replaces
  // args[0] (a primitive's lifted form).
  void compileGenericCall(const Bind& bd, const Target* t, const Atom* callee = nullptr) {
    uint32_t nargs = static_cast<uint32_t>(bd.args.size() - 1);
    bool tail = t && t->kind == Target::Tail;
    // The result's register if it has one already: the branch's, or one in the window
    // of a later call (never a letrec variable's, which the arguments may still read).
    std::optional<uint32_t> into;
    if (t && !tail && t->fresh) into = t->reg;
    if (auto pre = reg_.find(bd.dst); !t && pre != reg_.end() && !bd.dst->rec) into = pre->second;
    uint32_t base = windowFor(bd, into);
    Op op = Op::CALL;
    nargs = loadCall(bd, base, callee ? *callee : bd.args[0], &op);
    uint32_t raw = untagArguments(bd, nargs, op);
    loc_ = bd.loc;
    if (tail) {
      emit(instr::withRawArgs(instr::make(Op::TAILCALL, base, nargs), raw));
      emit(instr::make(Op::RETURN, base));
      top_ = base;
      return;
    }
    emit(instr::withRawArgs(instr::make(op, base, nargs), raw));
    if (t) {
      if (t->reg != base) emit(instr::make(Op::MOVE, t->reg, base));
      top_ = std::max(base, windowsTop());
    } else if (auto pre = reg_.find(bd.dst); pre != reg_.end()) {
      // The result was given a register before (a window's, a letrec variable's).
      if (pre->second != base) emit(instr::make(Op::MOVE, pre->second, base));
      top_ = std::max({base, pre->second + 1, windowsTop()});
    } else {
      reg_[bd.dst] = base;
      top_ = std::max(base + 1, windowsTop());
    }
  }

  struct Checkpoint {
    size_t code, protos, closures;
    uint32_t top;
  };

  // Compiles an `if` binding and the chain of conditionals it starts (anf::chainBranch)
  // with a loop over the links: each link's test and jump, the branch where the chain
  // stops, and the bindings of the other branch up to its `if`, the next link. A
  // chain going on in its else branches (cond, case, or) finishes each link on the
  // way; one going on in its then branches (and) leaves each link's jump to the end
  // and else branch pending, compiled innermost first once the chain ends. Every end
  // is the end of the whole chain, where all the jumps to an end go. A link's test
  // may be a comparison (`cmp`), fused into one compare-and-jump; if the jump turns
  // out too far for its 16-bit offset, the chain is compiled again from that link
  // with the comparison computed and tested (for a pending link, from the first
  // pending fused link: the jumps of those before it are longer still).
  void compileIf(const Bind& first, const Target* t, const Bind* firstCmp, NativeId firstCmpId) {
    Target target = t ? *t : Target{Target::Reg, dstReg(first), !first.dst->rec};
    bool needEnd = target.kind != Target::Tail;
    uint32_t chainTop = top_;
    struct Pending {
      IfLink link;
      Checkpoint cp;
      size_t jumpElse;
      uint32_t branchTop;
    };
    std::vector<Pending> pending;           // links going on in their then branch, outermost first
    std::vector<size_t> jumpsEnd;           // JMPs to the end of the chain, to patch
    std::unordered_set<const Bind*> plain;  // links whose comparison is computed, not fused
    auto restore = [&](const Checkpoint& cp, const Block* compiled) {
      proto_->code.resize(cp.code);
      proto_->locs.resize(cp.code);
      proto_->protos.resize(cp.protos);
      proto_->captures.resize(cp.protos);
      groupClosures_.resize(cp.closures);
      top_ = cp.top;
      forgetBlock(compiled);
      while (!jumpsEnd.empty() && jumpsEnd.back() >= cp.code) jumpsEnd.pop_back();
    };
    auto jumpEnd = [&] {
      if (needEnd) jumpsEnd.push_back(emit(instr::makeBx(Op::JMP, 0, 0)));
    };
    IfLink link{&first, firstCmp, firstCmpId};
    for (;;) {
      const Bind& bd = *link.bd;
      Checkpoint cp{proto_->code.size(), proto_->protos.size(), groupClosures_.size(), top_};
      bool computed = link.cmp && plain.count(&bd);
      if (computed) {
        compileBind(*link.cmp, nullptr);
        link.cmp = nullptr;
      }
      size_t jumpElse = emitTest(bd, link);
      if (computed) top_ = cp.top;  // (the test was the comparison's only use)
      loc_ = bd.loc;
      uint32_t branchTop = top_;
      const Block* on = chainBranch(bd);
      IfLink next;
      if (on == bd.thenB) {
        compileBlock(bd.thenB, target, &next);
        pending.push_back({link, cp, jumpElse, branchTop});
      } else {
        compileBlock(bd.thenB, target);
        top_ = branchTop;
        jumpEnd();
        if (!patchJump(jumpElse)) {
          restore(cp, bd.thenB);
          plain.insert(&bd);
          continue;
        }
        compileBlock(bd.elseB, target, on ? &next : nullptr);
      }
      if (next.bd) {
        link = next;
        continue;
      }
      // The chain has ended: the pending links, innermost first.
      while (!pending.empty()) {
        Pending& p = pending.back();
        top_ = p.branchTop;
        jumpEnd();
        if (!patchJump(p.jumpElse)) break;
        compileBlock(p.link.bd->elseB, target);
        pending.pop_back();
      }
      if (pending.empty()) break;
      size_t from = pending.size();
      for (size_t k = pending.size(); k-- > 0;)
        if (pending[k].link.cmp) {
          plain.insert(pending[k].link.bd);
          from = k;
        }
      link = pending[from].link;
      restore(pending[from].cp, link.bd->thenB);
      pending.resize(from);
    }
    top_ = chainTop;
    for (size_t j : jumpsEnd) patchJump(j);
  }

  // Emits the test of an `if` and its jump to the else branch (offset left to patch):
  // the fused compare-and-jump of link.cmp, or JMPIFNOT on the if's atom.
  size_t emitTest(const Bind& bd, const IfLink& link) {
    uint32_t saved = top_;
    size_t at;
    if (link.cmp) {
      loc_ = link.cmp->loc;
      const Atom& x = link.cmp->args[1];
      const Atom& y = link.cmp->args[2];
      if (isNumberConst(y) && constant(y.value) <= 0xffff) {
        at = emit(instr::make(jumpOp(link.cmpId, true), atomReg(x), constant(y.value)));
      } else {
        uint32_t a = atomReg(x), b = atomReg(y);
        at = emit(instr::make(jumpOp(link.cmpId, false), a, b));
      }
    } else {
      at = emit(instr::makeBx(Op::JMPIFNOT, atomReg(bd.atom), 0));
    }
    top_ = saved;
    return at;
  }

  // Points the jump at `at` to the next instruction; false for a compare-and-jump
  // whose 16-bit offset cannot reach it.
  bool patchJump(size_t at) {
    int64_t off = static_cast<int64_t>(proto_->code.size()) - static_cast<int64_t>(at) - 1;
    Instr& ins = proto_->code[at];
    Op op = instr::op(ins);
    if (op == Op::JMP || op == Op::JMPIFNOT) {
      ins = instr::withSBx(ins, static_cast<int32_t>(off));
      return true;
    }
    if (off > 32767) return false;
    ins = instr::withSC(ins, static_cast<int32_t>(off));
    return true;
  }

  // Undoes what compiling `b` decided about its variables (their registers), so that
  // it can be compiled again from a checkpoint.
  void forgetBlock(const Block* b) {
    // (Into the lambdas too: a loop compiled in place named its variables here.)
    forEachBind(
        b,
        [&](const Bind& bd) {
          if (bd.dst) reg_.erase(bd.dst);
          for (Var* v : bd.recVars) reg_.erase(v);
          if (bd.lambda)
            for (Var* p : bd.lambda->params) reg_.erase(p);
        },
        true);
  }

  // ---- loops ------------------------------------------------------------------
  //
  // A named let or a do is, in the IR, a letrec of one procedure immediately called:
  // (Rec v) (MakeLambda v lam) (v args...). When v is used nowhere else but as the
  // callee of calls in tail position of lam's own body (not captured by a lambda made
  // in it, not passed), no closure of lam can be observed: the call compiles to lam's
  // body in place, in this frame, its parameters in registers of this function, and
  // each self-call to moves into them and a jump back to the body's start. Its
  // captured values are this function's registers already. The body is compiled with
  // lam's own plan (planCalls), swapped in while it is.

  // The variable, body and parameter registers of the loop being compiled in place.
  struct LoopCtx {
    const Var* var = nullptr;
    size_t head = 0;
    std::vector<uint32_t> params;
    std::vector<size_t> exits;  // the JMPs after its repeated tests (patchExits)
  };

  bool isLoopJump(const Bind& bd) const {
    return loop_ && bd.kind == Bind::Call && bd.args[0].kind == Atom::Local &&
           bd.args[0].var == loop_->var;
  }

  // How often v occurs in lam's own IR (atoms, block results, captures of lambdas made
  // in it), and its calls in tail position of lam's body (v callee, the right count
  // of arguments) into *tailCalls.
  static size_t mentions(const Lambda* lam, const Var* v, std::vector<const Bind*>* tailCalls) {
    size_t n = 0;
    auto at = [&](const Atom& a) { n += a.kind == Atom::Local && a.var == v; };
    forEachBlock(lam->body, [&](const Block* blk) {
      at(blk->result);
      for (const Bind& bd : blk->binds) {
        at(bd.atom);
        for (const Atom& a : bd.args) at(a);
        if (bd.lambda)
          n += static_cast<size_t>(
              std::count(bd.lambda->freeVars.begin(), bd.lambda->freeVars.end(), v));
      }
    });
    std::vector<const Block*> tails{lam->body};
    while (!tails.empty()) {
      const Block* blk = tails.back();
      tails.pop_back();
      if (blk->binds.empty() || blk->result.kind != Atom::Local) continue;
      const Bind& last = blk->binds.back();
      if (last.dst != blk->result.var) continue;
      if (last.kind == Bind::If) {
        tails.push_back(last.thenB);
        tails.push_back(last.elseB);
      } else if (last.kind == Bind::Call && last.level == 0 && last.args[0].kind == Atom::Local &&
                 last.args[0].var == v && last.args.size() == lam->params.size() + 1) {
        tailCalls->push_back(&last);
      }
    }
    return n;
  }

  // The plan of the loop starting at binding i of b, if it is one that compiles in
  // place (see above); `tail`: its call is in tail position of this function.
  std::unique_ptr<const CallPlan> loopPlan(const Block* b, size_t i, bool tail) {
    const Bind& rec = b->binds[i];
    const Bind& mk = b->binds[i + 1];
    const Bind& call = b->binds[i + 2];
    if (rec.recVars.size() != 1) return nullptr;
    const Var* v = rec.recVars[0];
    if (mk.kind != Bind::MakeLambda || mk.dst != v || call.kind != Bind::Call || call.level != 0 ||
        call.args[0].kind != Atom::Local || call.args[0].var != v)
      return nullptr;
    const Lambda* lam = mk.lambda;
    if (lam->rest || call.args.size() != lam->params.size() + 1) return nullptr;
    bool self = false;
    for (const Var* fv : lam->freeVars) {
      if (fv == v) {
        self = true;
        continue;
      }
      if (!reg_.count(fv) || lazyUpval_.count(fv)) return nullptr;
    }
    if (plan_->uses(v) != 1 + self || plan_->splits.count(&call) || plan_->partsCalls.count(&call))
      return nullptr;
    for (size_t j = 1; j < call.args.size(); ++j)
      if (call.args[j].kind == Atom::Local && plan_->untagged.count(call.args[j].var))
        return nullptr;
    std::vector<const Bind*> jumps;
    if (mentions(lam, v, &jumps) != jumps.size()) return nullptr;
    auto lp = planCalls(vm_, lam);
    if (lp->paramSplit || !lp->untaggedParams.empty() || (!tail && !lp->returned.empty()))
      return nullptr;
    for (const Bind* j : jumps) {
      if (lp->splits.count(j) || lp->partsCalls.count(j)) return nullptr;
      for (size_t k = 1; k < j->args.size(); ++k)
        if (j->args[k].kind == Atom::Local && lp->untagged.count(j->args[k].var)) return nullptr;
    }
    return lp;
  }

  // Compiles the loop at binding i of b (loopPlan gave lp) into t (null: the call's
  // own register).
  void compileLoop(const Block* b, size_t i, const Target* t, std::unique_ptr<const CallPlan> lp) {
    const Bind& call = b->binds[i + 2];
    const Lambda* lam = b->binds[i + 1].lambda;
    loc_ = call.loc;
    Target target = t ? *t : Target{Target::Reg, dstReg(call), true};
    uint32_t mark = top_;
    auto n = static_cast<uint32_t>(lam->params.size());
    LoopCtx ctx{b->binds[i].recVars[0], 0, std::vector<uint32_t>(n), {}};
    // The parameters: the call's window if one was reserved (its arguments are there).
    std::optional<uint32_t> window = takeWindow(&call);
    for (uint32_t j = 0; j < n; ++j) {
      ctx.params[j] = window ? *window + 1 + j : allocReg();
      reg_[lam->params[j]] = ctx.params[j];
    }
    for (uint32_t j = 0; j < n; ++j) loadAtom(call.args[j + 1], ctx.params[j]);
    ctx.head = proto_->code.size();
    LoopCtx* outerLoop = loop_;
    std::unique_ptr<const CallPlan> outerPlan = std::move(plan_);
    loop_ = &ctx;
    plan_ = std::move(lp);
    levelChain_ = {};
    compileBlock(lam->body, target);
    patchExits(ctx);
    levelChain_ = {};
    plan_ = std::move(outerPlan);
    loop_ = outerLoop;
    uint32_t free = window ? std::min(*window, mark) : mark;
    if (!t) free = std::max(free, target.reg + 1);
    top_ = std::max(free, windowsTop());
  }

  // Whether atom a is read from register r.
  bool inReg(const Atom& a, uint32_t r) const {
    if (a.kind != Atom::Local || lazyUpval_.count(a.var)) return false;
    auto it = reg_.find(a.var);
    return it != reg_.end() && it->second == r;
  }

  // Whether bd, or code nested in its branches or captured by its lambdas, reads register r.
  bool readsReg(const Bind& bd, uint32_t r) const {
    auto reads = [&](const Bind& x) {
      if (inReg(x.atom, r)) return true;
      for (const Atom& a : x.args)
        if (inReg(a, r)) return true;
      if (x.lambda)
        for (Var* fv : x.lambda->freeVars)
          if (inReg(localAtom(fv), r)) return true;
      return false;
    };
    if (reads(bd)) return true;
    bool found = false;
    for (const Block* nested : {bd.thenB, bd.elseB})
      if (nested)
        forEachBlock(nested, [&](const Block* blk) {
          found = found || inReg(blk->result, r);
          for (const Bind& x : blk->binds) found = found || reads(x);
        });
    return found;
  }

  // Before binding i of a loop's body is compiled: a value whose one use is as argument
  // j of a self-call of the loop later in the block is computed straight into parameter
  // j's register if nothing reads that parameter after it (no move at the jump): by
  // the bindings in between, the other arguments, or by binding i itself unless it is
  // one instruction (which reads its operands before it writes).
  std::optional<uint32_t> loopSlot(const Block* b, size_t i) {
    if (!loop_) return std::nullopt;
    const Bind& bd = b->binds[i];
    if (!bd.dst || bd.dst->rec || reg_.count(bd.dst)) return std::nullopt;
    if (bd.kind != Bind::Call && bd.kind != Bind::If &&
        !(bd.kind == Bind::Copy && bd.atom.kind != Atom::Local))
      return std::nullopt;
    auto u = plan_->vars.find(bd.dst);
    if (u == plan_->vars.end() || u->second.count != 1 || u->second.last <= i ||
        u->second.last >= b->binds.size() || u->second.last - i > kMaxPlacedScan)
      return std::nullopt;
    size_t last = u->second.last;
    const Bind& jump = b->binds[last];
    if (!isLoopJump(jump)) return std::nullopt;
    size_t j = 0;
    while (j + 1 < jump.args.size() &&
           !(jump.args[j + 1].kind == Atom::Local && jump.args[j + 1].var == bd.dst))
      ++j;
    if (j + 1 >= jump.args.size()) return std::nullopt;
    uint32_t r = loop_->params[j];
    for (size_t m = 0; m + 1 < jump.args.size(); ++m)
      if (m != j && inReg(jump.args[m + 1], r)) return std::nullopt;
    for (size_t k = i + 1; k < last; ++k)
      if (readsReg(b->binds[k], r)) return std::nullopt;
    bool oneInstruction = bd.kind == Bind::Call && !usesWindow(vm_, bd) && bd.args.size() <= 3;
    if (!oneInstruction && readsReg(bd, r)) return std::nullopt;
    // (A computation put off to the jump reads its operands there, after this.)
    for (const auto& [v, d] : deferred_)
      if (readsReg(*d, r)) return std::nullopt;
    return r;
  }

  // Binding i of a loop's body, an arithmetic operation whose one use is as argument j
  // of a self-call of the loop later in the block, which cannot be computed straight
  // into parameter j's register (loopSlot: a binding after it still reads that
  // parameter, as acc + i reads i in (loop (+ i 1) (+ acc i))): put off to the jump
  // (compileLoopJump), where it is computed into the register with no move, in an
  // order that reads each parameter before it is written. Only where it reads nothing
  // but the loop's parameters and number constants (registers the bindings in between
  // leave alone, loopSlot seeing to it) and only past bindings that are inline
  // primitives themselves: it has no effect to reorder, and what it reads is the same
  // at the jump. (An error of one of them may now come before its own.)
  bool deferToJump(const Block* b, size_t i) {
    const Bind& bd = b->binds[i];
    if (!loop_ || bd.kind != Bind::Call || bd.level != 0 || bd.args.size() != 3 || !bd.dst ||
        bd.dst->rec || reg_.count(bd.dst) || usesWindow(vm_, bd) || plan_->ahead.count(&bd) ||
        plan_->untagged.count(bd.dst))
      return false;
    NativeId id = builtinOf(vm_, bd.args[0]);
    if (id != NativeId::Add && id != NativeId::Sub && id != NativeId::Mul && id != NativeId::Div)
      return false;
    for (size_t k = 1; k < 3; ++k) {
      const Atom& a = bd.args[k];
      if (isNumberConst(a)) continue;
      if (a.kind != Atom::Local || lazyUpval_.count(a.var)) return false;
      auto r = reg_.find(a.var);
      if (r == reg_.end() ||
          std::find(loop_->params.begin(), loop_->params.end(), r->second) == loop_->params.end())
        return false;
    }
    auto u = plan_->vars.find(bd.dst);
    if (u == plan_->vars.end() || u->second.count != 1 || u->second.last <= i ||
        u->second.last >= b->binds.size() || u->second.last - i > kMaxPlacedScan)
      return false;
    size_t last = u->second.last;
    if (!isLoopJump(b->binds[last])) return false;
    for (size_t k = i + 1; k < last; ++k) {
      const Bind& x = b->binds[k];
      if (x.kind != Bind::Call || x.level != 0 || usesWindow(vm_, x) || isLoopJump(x) ||
          builtinOf(vm_, x.args[0]) == NativeId::None)
        return false;
    }
    if (loopSlot(b, i)) return false;
    deferred_[bd.dst] = &bd;
    return true;
  }

  // A self-call of the loop being compiled in place: its arguments moved into the
  // parameters' registers (as one parallel assignment) and a jump to the start. An
  // argument is a register (moved), an atom to load, or a computation put off to here
  // (deferToJump, computed into its parameter's register); each is written once no
  // other still to write reads its parameter, and where they all wait on each other
  // one parameter is first copied to a new register, which those read instead.
  void compileLoopJump(const Bind& bd) {
    loc_ = bd.loc;
    SrcLoc at = loc_;
    uint32_t saved = top_;
    const std::vector<uint32_t>& params = loop_->params;
    size_t n = params.size();
    struct Arg {
      enum Kind { Done, Move, Load, Compute } kind;
      uint32_t src = 0;             // Move
      std::vector<Atom> operation;  // Compute: the primitive's atoms (callee first)
      SrcLoc loc;
    };
    std::vector<Arg> args(n);
    for (size_t j = 0; j < n; ++j) {
      const Atom& a = bd.args[j + 1];
      Arg& g = args[j];
      if (a.kind == Atom::Local && deferred_.count(a.var)) {
        const Bind* d = deferred_.at(a.var);
        deferred_.erase(a.var);
        g = {Arg::Compute, 0, d->args, d->loc};
      } else if (a.kind == Atom::Local && !lazyUpval_.count(a.var)) {
        uint32_t r = regOf(a.var);
        g = {r == params[j] ? Arg::Done : Arg::Move, r, {}, {}};
      } else {
        g = {Arg::Load, 0, {}, {}};
      }
    }
    auto reads = [&](const Arg& g, uint32_t r) {
      if (g.kind == Arg::Move) return g.src == r;
      if (g.kind == Arg::Compute)
        for (size_t k = 1; k < g.operation.size(); ++k)
          if (inReg(g.operation[k], r)) return true;
      return false;
    };
    for (size_t left = n; left > 0;) {
      left = 0;
      size_t ready = n;
      for (size_t j = 0; j < n; ++j) {
        if (args[j].kind == Arg::Done) continue;
        ++left;
        bool read = false;
        for (size_t m = 0; m < n && !read; ++m)
          read = m != j && args[m].kind != Arg::Done && reads(args[m], params[j]);
        if (!read && ready == n) ready = j;
      }
      if (left == 0) break;
      if (ready == n) {
        // Every one left waits on another: the first's parameter is copied aside.
        size_t j = 0;
        while (args[j].kind == Arg::Done) ++j;
        uint32_t tmp = allocReg();
        emit(instr::make(Op::MOVE, tmp, params[j]));
        Var* alias = mod_->newVar("");
        reg_[alias] = tmp;
        for (Arg& g : args) {
          if (g.kind == Arg::Move && g.src == params[j]) g.src = tmp;
          if (g.kind == Arg::Compute)
            for (size_t k = 1; k < g.operation.size(); ++k)
              if (inReg(g.operation[k], params[j])) g.operation[k] = localAtom(alias, at);
        }
        continue;
      }
      Arg& g = args[ready];
      switch (g.kind) {
        case Arg::Move:
          emit(instr::make(Op::MOVE, params[ready], g.src));
          break;
        case Arg::Load:
          loadAtom(bd.args[ready + 1], params[ready]);
          break;
        case Arg::Compute:
          loc_ = g.loc;
          emitPrimitive(builtinOf(vm_, g.operation[0]), g.operation, params[ready]);
          loc_ = at;
          break;
        case Arg::Done:
          break;
      }
      g.kind = Arg::Done;
    }
    // The loop's body starts with its test, a compare-and-jump: the test is repeated
    // here, jumping back into the body where it leads (opcodes.h), and the JMP after it
    // goes where the test goes otherwise; with no such test, a JMP back to the start.
    size_t head = loop_->head;
    size_t next = head;  // where the JMP goes
    Instr test = head < proto_->code.size() ? proto_->code[head] : Instr{0};
    if (Op op = instr::op(test);
        head < proto_->code.size() && op >= Op::JNLT && op <= Op::JNNUMEQK) {
      SrcLoc call = loc_;
      loc_ = proto_->locs[head];
      auto at = static_cast<int64_t>(proto_->code.size());
      if (instr::sC(test) == 0) {
        // Not patched yet: the self-call is in the branch the test falls through to.
        if (int64_t back = static_cast<int64_t>(head) - at; back >= -32768) {
          emit(instr::withSC(instr::make(op, instr::a(test), instr::b(test)) | instr::kJumpIfHolds,
                             static_cast<int32_t>(back)));
          loop_->exits.push_back(proto_->code.size());
        }
      } else {
        // In the branch the test jumps to (patched before it was compiled).
        int64_t elseAt = static_cast<int64_t>(head) + 1 + instr::sC(test);
        if (int64_t back = elseAt - at - 1; back >= -32768 && back < 0) {
          emit(instr::withSC(instr::make(op, instr::a(test), instr::b(test)),
                             static_cast<int32_t>(back)));
          next = head + 1;
        }
      }
      loc_ = call;
    }
    int64_t off = static_cast<int64_t>(next) - static_cast<int64_t>(proto_->code.size()) - 1;
    emit(instr::makeBx(Op::JMP, 0, 0));
    proto_->code.back() = instr::withSBx(proto_->code.back(), static_cast<int32_t>(off));
    top_ = saved;
  }

  // Once the loop's body is compiled, the JMPs after its tests repeated with h (back to
  // its test) go straight where the test goes when it fails.
  void patchExits(const LoopCtx& ctx) {
    if (ctx.head >= proto_->code.size()) return;
    Instr test = proto_->code[ctx.head];
    Op op = instr::op(test);
    if (op < Op::JNLT || op > Op::JNNUMEQK) return;
    int64_t elseAt = static_cast<int64_t>(ctx.head) + 1 + instr::sC(test);
    auto head = static_cast<int64_t>(ctx.head);
    for (size_t at : ctx.exits) {
      // (A chain compiled again from a checkpoint may have overwritten one.)
      if (at >= proto_->code.size() || at == 0) continue;
      Instr jmp = proto_->code[at];
      Instr rep = proto_->code[at - 1];
      auto pos = static_cast<int64_t>(at);
      if (instr::op(jmp) != Op::JMP || pos + 1 + instr::sBx(jmp) != head || instr::op(rep) != op ||
          !instr::jumpsIfHolds(rep) || pos + instr::sC(rep) != head + 1)
        continue;
      proto_->code[at] = instr::withSBx(jmp, static_cast<int32_t>(elseAt - pos - 1));
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
  std::unique_ptr<const CallPlan> plan_;  // the analyses of lam_ (callconv.h)
  std::unordered_map<const Var*, uint32_t>
      lazyUpval_;  // captured values loaded at their use: their index
  std::unordered_map<uint64_t, uint32_t> constIndex_;
  std::unordered_set<const Var*> pendingRec_;
  std::vector<GroupClosure> groupClosures_;
  std::vector<Window> windows_;  // reserved, for calls not compiled yet (lowest first)
  LoopCtx* loop_ = nullptr;      // the innermost loop being compiled in place
  // Computations put off to the loop's jump (deferToJump), by the variable they bind.
  std::unordered_map<const Var*, const Bind*> deferred_;
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
