// interpreter.cpp — the bytecode interpreter loop, calls, tail calls, and errors.
//
// Frames live in frames_ and registers in stack_ (both heap-allocated and growing),
// so dlam recursion never recurses in C++. A call places the callee in R[A] and its
// arguments in R[A+1..]; the callee's register 0 is the caller's R[A+1] and its
// result is written back into the callee slot (stack_[base - 1]). VM::call enters
// the loop from C++ with a boundary frame; returning from that frame leaves it. An
// error unwinds through VM::call, which restores the frames and the stack top; a
// failed C++ allocation (std::bad_alloc) becomes the GC heap's "out of memory" there.
#include <algorithm>
#include <cmath>
#include <new>
#include <utility>

#include "dlam/opcodes.h"
#include "dlam/vm.h"
#include "forward_arith.h"

namespace dlam {

const char* opName(Op op) {
  static const char* const kNames[] = {
#define DLAM_OP_NAME(name, fmt, doc) #name,
      DLAM_OPCODES(DLAM_OP_NAME)
#undef DLAM_OP_NAME
  };
  return static_cast<size_t>(op) < static_cast<size_t>(Op::Count) ? kNames[static_cast<size_t>(op)]
                                                                  : "?";
}

// The dispatch of the loop in VM::execute: each handler ends by jumping straight to the next
// instruction's handler through a table of label addresses (computed goto, GCC and clang),
// or, where the compiler has no computed goto (or with the CMake option
// DLAM_SWITCH_DISPATCH, which tests this path), back to one switch on the opcode whose
// cases jump to the handlers. Both read the same handlers, generated from DLAM_OPCODES.
#if defined(__GNUC__) && !defined(DLAM_SWITCH_DISPATCH)
#define DLAM_COMPUTED_GOTO 1
#else
#define DLAM_COMPUTED_GOTO 0
#endif
// The helpers VM::execute defines as lambdas capture its pc, R, K, frame and closure by
// reference: one left out of line would keep those in memory (every handler loading and
// storing them), so they are always inlined.
#if defined(__GNUC__)
#define DLAM_INLINE_LAMBDA __attribute__((always_inline))
#else
#define DLAM_INLINE_LAMBDA
#endif

namespace {
constexpr int64_t kPollInterval = 1 << 16;

std::string procedureName(Value f) {
  if (isClosure(f)) {
    const std::string& n = asClosure(f)->proto->name;
    return n.empty() ? "#<procedure>" : n;
  }
  if (isNative(f) || isObj(f, ObjType::Foreign)) return asNative(f)->name;
  return "#<procedure>";
}

bool takesCount(const Proto* p, uint32_t nargs) {
  return p->hasRest ? nargs >= p->nparams : nargs == p->nparams;
}

[[noreturn]] void closureArityError(VM& vm, Closure* c, uint32_t nargs) {
  const Proto* p = c->proto;
  vm.runtimeError(procedureName(Value::object(c)) + ": expected " +
                  (p->hasRest ? "at least " : "") + std::to_string(p->nparams) + " argument" +
                  (p->nparams == 1 ? "" : "s") + ", got " + std::to_string(nargs));
}

[[noreturn]] void nativeArityError(VM& vm, const Native* n, uint32_t nargs) {
  vm.runtimeError(std::string(n->name) + ": wrong number of arguments (" + std::to_string(nargs) +
                  ")");
}
}  // namespace

void VM::checkArity(Value f, int nargs) {
  f = unwrapAttached(f);
  auto n = static_cast<uint32_t>(nargs);
  if (isClosure(f)) {
    if (!takesCount(asClosure(f)->proto, n)) closureArityError(*this, asClosure(f), n);
  } else if (isNative(f)) {
    const Native* nat = asNative(f);
    if (nat->kind == 0 && nat->fn && !nat->takes(nargs)) nativeArityError(*this, nat, n);
  }
}

void VM::growStack(size_t needed) {
  size_t n = stack_.size();
  while (n < needed) n *= 2;
  stack_.resize(n);  // (registers never written read as the number 0)
}

// The trace keeps this many entries (runs of the same call) from the innermost frame,
// and the outermost kTraceOuter after a gap.
constexpr size_t kTraceInner = 20;
constexpr size_t kTraceOuter = 3;

// Where a frame is: at the instruction it executes (the one before its saved pc), or at
// its function's start.
static SrcLoc frameLoc(const CallFrame& f) {
  const Proto* p = f.closure->proto;
  if (f.pc) {
    size_t idx = static_cast<size_t>(f.pc - p->code.data());
    if (idx > 0 && idx - 1 < p->locs.size() && p->locs[idx - 1].known()) return p->locs[idx - 1];
  }
  // An instruction no source text stands for is placed at its function.
  return p->loc;
}

void VM::buildTrace(Error& e) {
  // The frames from the innermost out, as runs of the same call (function and place):
  // the first kTraceInner runs, and the last kTraceOuter after them, the frames of the
  // runs that fell out between counted in gap. Entries are made for the kept runs only.
  struct Run {
    const Proto* proto;
    SrcLoc loc;
    uint64_t frames;
  };
  std::vector<Run> inner, outer;
  uint64_t gap = 0;
  const CallFrame* located = nullptr;  // the innermost frame of user code
  bool hasUserFrame = false;
  for (const CallFrame& f : frames_)
    if (f.closure && f.closure->proto->file != "<prelude>" &&
        f.closure->proto->file != "<primitive>")
      hasUserFrame = true;
  for (size_t i = frames_.size(); i-- > 0;) {
    const CallFrame& f = frames_[i];
    if (!f.closure) continue;
    const Proto* p = f.closure->proto;
    SrcLoc loc = frameLoc(f);
    // The error is located at the innermost frame of user code: library frames
    // (the prelude, eta-expanded primitives) stay in the trace only.
    bool library = p->file == "<prelude>" || p->file == "<primitive>";
    if (!located && !library) located = &f;
    // The library's frames are folded into the user's call that reached them (the
    // frame below), unless --full-trace; a trace of nothing else keeps them.
    if (library && !config_.fullTrace && hasUserFrame) continue;
    std::vector<Run>& runs = outer.empty() ? inner : outer;
    if (!runs.empty() && runs.back().proto == p && runs.back().loc.line == loc.line &&
        runs.back().loc.col == loc.col) {
      ++runs.back().frames;
    } else if (&runs == &inner && inner.size() < kTraceInner) {
      inner.push_back({p, loc, 1});
    } else {
      outer.push_back({p, loc, 1});
      if (outer.size() > kTraceOuter) {
        gap += outer.front().frames;
        outer.erase(outer.begin());
      }
    }
  }
  auto entry = [](const Run& r) {
    return TraceEntry{r.proto->name.empty() ? "#<procedure>" : r.proto->name, r.proto->file, r.loc,
                      r.frames};
  };
  for (const Run& r : inner) e.trace.push_back(entry(r));
  for (size_t k = 0; k < outer.size(); ++k) {
    e.trace.push_back(entry(outer[k]));
    if (k == 0) e.trace.back().skipped = gap;
  }
  // Else the innermost frame, whatever it is.
  if (!located)
    for (size_t i = frames_.size(); i-- > 0 && !located;)
      if (frames_[i].closure) located = &frames_[i];
  if (e.file.empty() && located) {
    e.file = located->closure->proto->file;
    e.loc = frameLoc(*located);
  }
  if (e.file.empty()) e.file = currentFile;
}

void VM::raise(ErrorKind kind, const std::string& message) { raiseError(Error(kind, message)); }

void VM::raiseError(Error e) {
  // A handler may take a runtime error: the trace is built if none does (handlers.cpp).
  if (e.kind != ErrorKind::Runtime || !handlerActive()) buildTrace(e);
  throw e;
}

void VM::runtimeError(const std::string& message) { raise(ErrorKind::Runtime, message); }
void VM::limitError(const std::string& message) { raise(ErrorKind::Limit, message); }

void VM::stackOverflow(const Proto* callee) {
  std::string message =
      "stack overflow (more than " + std::to_string(config_.stackLimit) + " frames)";
  // A transformed function's calls, tail calls too, keep their frames until the
  // backward pass: a loop under a derivative needs a frame per iteration.
  if (callee && callee->adLevel > 0)
    message +=
        " in differentiated code, where a loop keeps one frame per iteration until the "
        "backward pass: raise stack_limit for longer loops";
  limitError(message);
}

void VM::cxrError(uint64_t ins, const uint64_t* pc, const Value* R, Value got, const char* plain) {
  if (uint32_t id = instr::cxrId(ins)) {
    // The first step read the accessor's argument; the accessor itself reports it.
    Value arg = R[instr::b(pc[-1 - static_cast<ptrdiff_t>(instr::cxrStepOf(ins))])];
    builtin(static_cast<NativeId>(id))->fn(*this, &arg, 1);
  }
  typeError(plain, 0, "pair", got);
}

void VM::typeError(const char* who, int argIndex, const char* expected, Value got) {
  // A reverse-tagged number where some other type was expected is an ordinary type
  // error of the user's program (say (car x) with x a number being differentiated):
  // show the number. Where a number was expected, it means a level mix-up.
  bool numeric = std::string_view(expected) == "number";
  if (!numeric) got = untagged(got);
  std::string shown = show(got, true);
  if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
  if (isObj(got, ObjType::Rev))
    runtimeError(std::string(who) + ": got a reverse-tagged value " + shown +
                 " (a derivative level was mixed up)");
  runtimeError(std::string(who) + ": expected " + expected + " as argument " +
               std::to_string(argIndex + 1) + ", got " + shown);
}

double VM::checkNumber(const char* who, Value* args, int i) {
  if (!args[i].isNumber()) typeError(who, i, "number", args[i]);
  return args[i].asNumber();
}

void VM::recover(GcKind kind) {
  frames_.clear();
  raisedValue_ = Value::undefined();
  landing_ = Value::undefined();
  stackTop_ = 0;
  interruptRequested_ = false;
  pendingCall_.clear();  // a native's tail call the failed run never made
  callingNative = nullptr;
  tapeStart_ = UINT64_MAX;  // (a gradient the error ended)
  if (kind == GcKind::Major)
    collectGarbage();
  else if (gcRequested_ || majorDue() || bytesAllocated_ >= gcThreshold_)
    collectDue();
}

Value VM::runToplevel(Proto* chunk) {
  Closure* c = makeClosure(chunk, 0);
  return call(Value::object(c), nullptr, 0);
}

Value VM::call(Value fn, const Value* args, int nargs) {
  struct Depth {
    int& d;
    explicit Depth(int& x) : d(x) { ++d; }
    ~Depth() { --d; }
  } depth(callDepth_);
  if (callDepth_ > 2000)
    limitError("stack overflow (procedures calling back into dlam nested too deeply)");
  size_t entryDepth = frames_.size();
  uint32_t savedTop = stackTop_;
  uint32_t slot = stackTop_;
  ensureStack(slot + nargs + 1);
  stack_[slot] = fn;
  for (int i = 0; i < nargs; ++i) stack_[slot + 1 + i] = args[i];
  stackTop_ = slot + 1 + nargs;
  if (stackHigh_ < stackTop_) stackHigh_ = stackTop_;
  try {
    if (isClosure(fn)) [[likely]] {
      // A closure (what natives such as map call back, element by element), before the
      // tests for anything else.
      if (frames_.size() >= frameCap()) stackOverflow(asClosure(fn)->proto);
      frames_.push_back(CallFrame{asClosure(fn), nullptr, slot + 1, true});
      Value result = run(entryDepth);
      stackTop_ = savedTop;
      return result;
    }
    // Resolve attachments and apply before entering the loop.
    for (;;) {
      if (isObj(fn, ObjType::Attached)) {
        if (attachedTransposes(fn, &stack_[slot + 1], nargs)) [[unlikely]] {
          // (%attached-forward fn arg ...): fn's rep transposed for forward mode.
          ensureStack(slot + nargs + 2);
          for (int i = nargs; i > 0; --i) stack_[slot + 1 + i] = stack_[slot + i];
          stack_[slot + 1] = fn;
          ++nargs;
          stackTop_ = slot + 1 + nargs;
          if (stackHigh_ < stackTop_) stackHigh_ = stackTop_;
          fn = attachedForward();
        } else {
          fn = attachedCallee(fn, &stack_[slot + 1], nargs);
        }
        stack_[slot] = fn;
        continue;
      }
      break;
    }
    Value result;
    if (isNative(fn) || isObj(fn, ObjType::Foreign)) {
      Native* n = asNative(fn);
      if (n->id == static_cast<uint16_t>(NativeId::Apply)) {
        // apply from C++: flatten and call again.
        if (nargs < 1) runtimeError("apply: expected at least 1 argument, got 0");
        std::vector<Value> flat(stack_.begin() + slot + 2, stack_.begin() + slot + nargs);
        Value l = stack_[slot + nargs];
        while (isPair(l)) {
          flat.push_back(asPair(l)->car);
          l = asPair(l)->cdr;
        }
        if (!l.isNil()) typeError("apply", nargs - 1, "list", stack_[slot + nargs]);
        Value f = stack_[slot + 1];
        result = call(f, flat.data(), static_cast<int>(flat.size()));
      } else if (n->kind == static_cast<uint16_t>(NativeKind::Rep)) {
        std::vector<Value> argv(stack_.begin() + slot + 1, stack_.begin() + slot + 1 + nargs);
        Closure* c = repClosure(n, nargs);
        result = call(Value::object(c), argv.data(), nargs);
      } else {
        if (!n->takes(nargs)) nativeArityError(*this, n, static_cast<uint32_t>(nargs));
        callingNative = n;
        result = n->kind ? liftedCall(n, &stack_[slot + 1], nargs)
                         : callPrimitive(n, &stack_[slot + 1], nargs);
        if (result.isTailCall()) {
          std::vector<Value> pending;
          pending.swap(pendingCall_);
          stackTop_ = savedTop;
          result = call(pending[0], pending.data() + 1, static_cast<int>(pending.size() - 1));
        }
      }
    } else if (isClosure(fn)) {
      if (frames_.size() >= frameCap()) stackOverflow(asClosure(fn)->proto);
      frames_.push_back(CallFrame{nullptr, nullptr, slot + 1, true});
      // The CALL logic (arity, rest args, stack growth) lives in execute(); enter it
      // through a synthetic frame whose closure is set there.
      frames_.back().closure = asClosure(fn);
      result = run(entryDepth);
    } else if (isCommandLineCall(fn, static_cast<uint32_t>(nargs))) {
      result = fn;
    } else {
      notAProcedure(fn, static_cast<uint32_t>(nargs));
    }
    stackTop_ = savedTop;
    return result;
  } catch (const std::bad_alloc&) {
    // A C++ allocation failed (a vector or string of the interpreter or a native, the
    // compiler run by *j): the error the GC heap gives when it runs out, located and
    // traced while the frames are still there. If even that cannot be built, the
    // std::bad_alloc goes on (every entry point reports it as "out of memory" too).
    Error e(ErrorKind::Limit, std::string());
    bool built = false;
    try {
      e.message = "out of memory";
      buildTrace(e);
      built = true;
    } catch (...) {
    }
    frames_.resize(entryDepth);
    stackTop_ = savedTop;
    if (!built) throw;
    throw std::move(e);
  } catch (...) {
    frames_.resize(entryDepth);
    stackTop_ = savedTop;
    throw;
  }
}

// The head (A) and the tail (C) of a RETURNN or RETURNR: registers, or constants.
static inline Value returnHead(Instr ins, const Value* R, const Value* K) {
  return instr::headIsK(ins) ? K[instr::a(ins)] : R[instr::a(ins)];
}
static inline Value returnTail(Instr ins, const Value* R, const Value* K) {
  return instr::tailIsK(ins) ? K[instr::c(ins)] : R[instr::c(ins)];
}

// RETURNN's usual case, out of line and a leaf (it needs no saved registers): the
// caller takes every element (split = 2 + k) and there are at most four, whose register
// numbers fit in the word after the instruction. A parallel move of k + 2 values into
// R[-1] ..., all read into locals before any is written.
[[gnu::noinline]] static void returnSplit(Instr ins, const Instr* words, Value* R, const Value* K,
                                          uint32_t k) {
  Value* dst = R - 1;
  uint64_t w = k ? words[0] : 0;
  Value f = returnHead(ins, R, K), t = returnTail(ins, R, K);
  switch (k) {
    case 0:
      dst[0] = f, dst[1] = t;
      break;
    case 1: {
      Value x1 = R[w & 0xffff];
      dst[0] = f, dst[1] = x1, dst[2] = t;
      break;
    }
    case 2: {
      Value x1 = R[w & 0xffff], x2 = R[(w >> 16) & 0xffff];
      dst[0] = f, dst[1] = x1, dst[2] = x2, dst[3] = t;
      break;
    }
    case 3: {
      Value x1 = R[w & 0xffff], x2 = R[(w >> 16) & 0xffff], x3 = R[(w >> 32) & 0xffff];
      dst[0] = f, dst[1] = x1, dst[2] = x2, dst[3] = x3, dst[4] = t;
      break;
    }
    default: {
      Value x1 = R[w & 0xffff], x2 = R[(w >> 16) & 0xffff], x3 = R[(w >> 32) & 0xffff],
            x4 = R[w >> 48];
      dst[0] = f, dst[1] = x1, dst[2] = x2, dst[3] = x3, dst[4] = x4, dst[5] = t;
      break;
    }
  }
}

// The arguments of a function entered through the general path (VM::execute's
// enter), in its registers from R on: an argument given in parts is made whole for a
// function that takes it whole, the arguments past the fixed ones become the rest
// list, and a function that takes its argument in parts gets them regrouped.
void VM::arrangeArguments(const Proto* p, Value* R, uint32_t nargs, uint32_t parts) {
  if (parts && !p->paramSplit) {
    regroupParts(R, parts, 0);
    nargs = 1;
  }
  if (p->hasRest) {
    Value rest = Value::nil();
    for (uint32_t i = nargs; i > p->nparams; --i) rest = cons(R[i - 1], rest);
    R[p->nparams] = rest;
  }
  if (p->paramSplit) regroupParts(R, parts ? parts : 1, p->paramSplit);
}

// RETURNR's usual cases, out of line and a leaf: the caller takes every part, as a rep
// of a list of at most three elements (or of a rep); false for anything else. A
// parallel move, as in returnSplit; bp is the register in the low 16 bits of the
// word after the instruction, then x1 ... xk.
[[gnu::noinline]] static bool returnRepSplit(Instr ins, const Instr* words, Value* R,
                                             const Value* K, uint8_t split) {
  uint32_t k = instr::b(ins) - 1;
  uint64_t w = words[0];
  Value bp = R[w & 0xffff];
  if (!isProcedure(unwrapAttached(bp))) return false;
  Value* dst = R - 1;
  Value f = returnHead(ins, R, K), t = returnTail(ins, R, K);
  if (split == kSplitRepOf + 1) {
    if (k != 0 || !isProcedure(unwrapAttached(t))) return false;
    dst[0] = f, dst[1] = t, dst[2] = bp;
    return true;
  }
  if (split != kSplitRepOf + 2 + k) return false;
  switch (k) {
    case 0:
      dst[0] = f, dst[1] = t, dst[2] = bp;
      return true;
    case 1: {
      Value x1 = R[(w >> 16) & 0xffff];
      dst[0] = f, dst[1] = x1, dst[2] = t, dst[3] = bp;
      return true;
    }
    case 2: {
      Value x1 = R[(w >> 16) & 0xffff], x2 = R[(w >> 32) & 0xffff];
      dst[0] = f, dst[1] = x1, dst[2] = x2, dst[3] = t, dst[4] = bp;
      return true;
    }
    case 3: {
      Value x1 = R[(w >> 16) & 0xffff], x2 = R[(w >> 32) & 0xffff], x3 = R[w >> 48];
      dst[0] = f, dst[1] = x1, dst[2] = x2, dst[3] = x3, dst[4] = t, dst[5] = bp;
      return true;
    }
    default:
      return false;
  }
}

// The parts of a RETURNN or RETURNR, read before any is written (the caller's
// registers are the callee's first ones); left uninitialised (Value's constructor
// would fill it).
union Parts {
  Parts() {}
  Value v[kMaxSplitElements + 3];
};

// R[r] for the registers r listed j .. j + n - 1 in the words after an instruction
// (instr::listedReg), into out.
static void readListed(const Instr* words, const Value* R, uint32_t j, uint32_t n, Value* out) {
  for (uint32_t i = 0; i < n; ++i) out[i] = R[instr::listedReg(words, j + i)];
}

// RETURNN's work, out of line (its buffer would otherwise weigh on every handler of
// the interpreter loop): the result (cons R[A] (cons x1 ... (cons xk R[C]))), x1 .. xk
// the registers listed in the words after the instruction, is a backpropagator's fbar
// and argument sensitivities. A caller that splits them (split = 2 + taken) gets them
// in its registers R[-1] ..., with pairs made only for what it does not take apart;
// any other caller gets the whole value in R[-1]. Returns the whole value if it does
// not have the shape the caller splits (the caller's error), undefined otherwise.
[[gnu::noinline]] Value VM::returnList(Instr ins, const Instr* words, Value* R, const Value* K,
                                       uint8_t split) {
  uint32_t k = instr::b(ins);
  Value* dst = R - 1;
  Parts buf;
  Value* vals = buf.v;
  vals[0] = returnHead(ins, R, K);
  readListed(words, R, 0, k, vals + 1);
  vals[k + 1] = returnTail(ins, R, K);
  if (split >= 2 && split < kSplitRepOf && split - 2u <= k) {
    uint32_t taken = split - 2u;
    Value tail = vals[k + 1];
    for (uint32_t i = k; i > taken; --i) tail = cons(vals[i], tail);
    for (uint32_t i = 0; i <= taken; ++i) dst[i] = vals[i];
    dst[taken + 1] = tail;
    return Value::undefined();
  }
  Value list = vals[k + 1];
  for (uint32_t i = k; i > 0; --i) list = cons(vals[i], list);
  if (split >= 2 && split < kSplitRepOf && splitList(vals[0], list, split - 2u, dst))
    return Value::undefined();
  Value result = cons(vals[0], list);
  if (!split) {
    dst[0] = result;
    return Value::undefined();
  }
  return splitInto(result, split, dst) ? Value::undefined() : result;
}

// RETURNR's work: the result (cons (cons R[A] (x1 ... xk . R[C])) bp), bp and then
// x1 .. xk the registers listed in the words after the instruction: what a
// transformed backpropagator returns ((cons fbar xbar)'s image with its own
// backpropagator) and a function transformed twice (a rep result's image with its
// backpropagator). A caller that splits it as a rep of a list (kSplitRepOf + m) gets
// the parts in its registers R[-1] ..., with pairs made only for what it does not
// take apart; a caller that splits it as a rep gets the list and bp; any other caller
// the whole value. Returns the whole value if it does not have the shape the caller
// splits (the caller's error), undefined otherwise.
[[gnu::noinline]] Value VM::returnRepList(Instr ins, const Instr* words, Value* R, const Value* K,
                                          uint8_t split) {
  uint32_t k = instr::b(ins) - 1;
  Value* dst = R - 1;
  Parts buf;
  Value* vals = buf.v;
  Value bp;
  readListed(words, R, 0, 1, &bp);
  vals[0] = returnHead(ins, R, K);
  readListed(words, R, 1, k, vals + 1);
  vals[k + 1] = returnTail(ins, R, K);
  bool bpOk = isProcedure(unwrapAttached(bp));
  if (split >= kSplitRepOf && bpOk) {
    uint8_t inner = static_cast<uint8_t>(split - kSplitRepOf);
    if (inner >= 2 && inner - 2u <= k) {
      uint32_t taken = inner - 2u;
      Value tail = vals[k + 1];
      for (uint32_t i = k; i > taken; --i) tail = cons(vals[i], tail);
      for (uint32_t i = 0; i <= taken; ++i) dst[i] = vals[i];
      dst[taken + 1] = tail;
      dst[taken + 2] = bp;
      return Value::undefined();
    }
    if (inner == 1 && k == 0 && isProcedure(unwrapAttached(vals[1]))) {
      dst[0] = vals[0];
      dst[1] = vals[1];
      dst[2] = bp;
      return Value::undefined();
    }
  }
  Value list = vals[k + 1];
  for (uint32_t i = k + 1; i > 0; --i) list = cons(vals[i - 1], list);
  if (split == 1 && bpOk) {
    dst[0] = list;
    dst[1] = bp;
    return Value::undefined();
  }
  Value result = cons(list, bp);
  if (!split) {
    dst[0] = result;
    return Value::undefined();
  }
  return splitInto(result, split, dst) ? Value::undefined() : result;
}

Value VM::execute(bool resume) {
#if DLAM_COMPUTED_GOTO
  static void* const kLabels[] = {
#define DLAM_OP_LABEL(name, fmt, doc) &&op_##name,
      DLAM_OPCODES(DLAM_OP_LABEL)
#undef DLAM_OP_LABEL
  };
#define GOTO_HANDLER() goto* kLabels[static_cast<uint8_t>(instr::op(ins))]
#else
#define GOTO_HANDLER() goto dispatch
#endif

  CallFrame* frame;
  Closure* closure;
  const Instr* pc;
  Value* R;
  const Value* K;
  Instr ins = 0;  // (read by poll, after the first instruction)
  // Instructions left before the next poll. Each DISPATCH takes one; `granted` is what
  // the budget was last set to, so granted - budget instructions ran since then and are
  // not yet in instructionCount_. They are added at each poll and whenever execute() is
  // left, by a return or by an exception (a handler catching an error re-enters with a
  // new execute(), and a loop raising every few instructions must still reach its
  // instruction limit and notice an interrupt). The budget continues where the last
  // execute() stopped (nextPoll_), at least one instruction, so poll sees an `ins`.
  int64_t budget =
      std::clamp<int64_t>(static_cast<int64_t>(nextPoll_ - instructionCount_), 1, kPollInterval);
  int64_t granted = budget;
  struct CountOnExit {
    uint64_t& count;
    const int64_t& budget;
    const int64_t& granted;
    ~CountOnExit() { count += static_cast<uint64_t>(granted - budget); }
  } countOnExit{instructionCount_, budget, granted};
  Value badSplit =
      Value::undefined();  // (result . callee) of a return whose caller cannot split it
  // The call being made: the callee's register, its argument count (or parts), and
  // what it passes (Proto::callKey: the count, or kCallParts | parts for CALLP).
  uint32_t callA = 0, callN = 0, callKey = 0;
  uint32_t callRaw = 0;               // the arguments it passes untagged (instr::rawArgs)
  NativeId arithId = NativeId::None;  // the primitive and the operands of an ARITH for arith_slow
  Value arithArgs[2];
  uint64_t limit = config_.instructionLimit;
  const uint64_t frameCap = this->frameCap();

  // Enters the function of the newest frame: checks arity, gathers rest arguments,
  // grows the stack. Expects frames_.back() set up with closure and base; args are
  // in stack_[base .. base+nargs).
  // Raised while the caller's frame is still the innermost, so the error points at
  // the call site.
  auto checkArity = [&](Closure* c, uint32_t nargs) DLAM_INLINE_LAMBDA {
    if (!takesCount(c->proto, nargs)) [[unlikely]]
      closureArityError(*this, c, nargs);
  };

  // Enters the function of the newest frame: gathers rest arguments, grows the
  // stack. Expects frames_.back() set up with closure and base; args are in
  // stack_[base .. base+nargs) and their count already checked.
  auto enter = [&](uint32_t nargs, uint32_t parts = 0) DLAM_INLINE_LAMBDA {
    frame = &frames_.back();
    closure = frame->closure;
    forceClosure(closure);
    Proto* p = closure->proto;
    ensureBody(p);
    uint32_t top = frame->base + p->nregs;
    if (top >= stack_.size()) [[unlikely]]
      ensureStack(top + 1);
    if (top > stackHigh_) stackHigh_ = top;
    stackTop_ = top;
    pc = p->code.data();
    R = stack_.data() + frame->base;
    K = p->constants.data();
    // A rest parameter, or one taken in parts (callKey above any count), or an
    // argument given in parts.
    if (p->callKey > 0xffff || parts) [[unlikely]] {
      frame->pc = pc;  // (an error there is the function's, at its start)
      arrangeArguments(p, R, nargs, parts);
    }
  };
  // Arguments passed untagged (raw: bit j for R[a+1+j]) go as they are to a closure
  // whose parameters take them so (Proto::rawParams; entered with `key` as its
  // callKey, so they stay in place); for any other callee they are tagged here, as
  // the *j the caller left out would have.
  auto takesUntagged = [](Value fn, uint32_t raw, uint32_t key) {
    if (!isClosure(fn)) return false;
    const Proto* p = asClosure(fn)->proto;
    return (p->rawParams & raw) == raw && p->callKey == key;
  };
  auto tagArguments = [&](uint32_t a, uint32_t raw) DLAM_INLINE_LAMBDA {
    for (; raw; raw &= raw - 1) {
      uint32_t r = a + 1 + static_cast<uint32_t>(__builtin_ctz(raw));
      Value x = starJValue(R[r]);
      R = stack_.data() + frame->base;
      R[r] = x;
    }
  };
  // (apply f a ... lst) in R[a] .. R[a+nargs]: spread into f a ... x1 .. xn at R[a].
  auto spreadApply = [&](uint32_t a, uint32_t nargs) DLAM_INLINE_LAMBDA -> uint32_t {
    if (nargs < 1) runtimeError("apply: expected at least 1 argument, got 0");
    Value lst = R[a + nargs];
    uint32_t count = 0;
    Value l = lst;
    for (; isPair(l); l = asPair(l)->cdr) ++count;
    if (!l.isNil()) typeError("apply", static_cast<int>(nargs) - 1, "list", lst);
    uint32_t fixed = nargs >= 2 ? nargs - 2 : 0;
    uint32_t base = frame->base;
    ensureStack(base + a + 1 + fixed + count + 1);
    R = stack_.data() + base;
    for (uint32_t i = 0; i <= fixed; ++i) R[a + i] = R[a + 1 + i];
    uint32_t k = a + 1 + fixed;
    for (l = lst; isPair(l); l = asPair(l)->cdr) R[k++] = asPair(l)->car;
    if (stackTop_ < base + k) stackTop_ = base + k;
    if (stackHigh_ < base + k) stackHigh_ = base + k;
    return fixed + count;
  };

  // An attach-*j procedure called with bundles (attachedTransposes), in R[a] with its
  // arguments after it: (%attached-forward f x ...) at R[a] instead; the new count.
  auto transposeAttached = [&](uint32_t a, uint32_t nargs) DLAM_INLINE_LAMBDA -> uint32_t {
    uint32_t base = frame->base;
    ensureStack(base + a + nargs + 3);
    R = stack_.data() + base;
    for (uint32_t i = nargs; i > 0; --i) R[a + 1 + i] = R[a + i];
    R[a + 1] = R[a];
    R[a] = attachedForward();
    uint32_t k = a + nargs + 2;
    if (stackTop_ < base + k) stackTop_ = base + k;
    if (stackHigh_ < base + k) stackHigh_ = base + k;
    return nargs + 1;
  };

  // Starts running closure c in the frame just pushed for it (its arguments in place,
  // room on the stack up to top): the inline common case of a call.
  auto startFrame = [&](Closure* c, uint32_t top) DLAM_INLINE_LAMBDA {
    frame = &frames_.back();
    closure = c;
    if (top > stackHigh_) stackHigh_ = top;
    stackTop_ = top;
    pc = c->proto->code.data();
    R = stack_.data() + frame->base;
    K = c->proto->constants.data();
  };

  // Goes on in the innermost frame where it stands (a handler frame an error landed at).
  auto resumeTop = [&]() DLAM_INLINE_LAMBDA {
    frame = &frames_.back();
    closure = frame->closure;
    pc = frame->pc;
    R = stack_.data() + frame->base;
    K = closure->proto->constants.data();
  };

  if (resume) {
    resumeTop();
  } else {
    uint32_t nargs = stackTop_ - frames_.back().base;
    Closure* c = frames_.back().closure;
    if ((c->flags & kObservedBp) && observedCall(frames_.size() - 2, c->proto->adLevel)) {
      // A flagged backpropagator called by the host or a native (ad.cpp).
      c = asClosure(observedTarget(c));
      frames_.back().closure = c;
      stack_[frames_.back().base - 1] = Value::object(c);
    }
    if (c->proto->hasRest ? nargs < c->proto->nparams : nargs != c->proto->nparams) {
      frames_.pop_back();
      checkArity(c, nargs);
    }
    enter(nargs);
  }

#define DISPATCH()               \
  do {                           \
    if (--budget < 0) goto poll; \
    ins = *pc++;                 \
    GOTO_HANDLER();              \
  } while (0)
#define SAVE_PC() (frame->pc = pc)
#define RA R[instr::a(ins)]
#define RB R[instr::b(ins)]
#define RC R[instr::c(ins)]
#define KB K[instr::b(ins)]
#define KC K[instr::c(ins)]

  DISPATCH();

poll : {
  // (After a JMP, the jump itself, and after a loop's test repeated at its end that
  // jumped back, the JMP after it: a loop compiled in place stops at its self-call.)
  if (instr::op(ins) == Op::JMP)
    frame->pc = pc - instr::sBx(ins);
  else if (instr::isCompareJump(instr::op(ins)) && instr::sC(ins) < 0 && pc[-1] != ins)
    frame->pc = pc - instr::sC(ins) + 1;
  else
    frame->pc = pc;
  // granted - budget: the instructions dispatched since the last poll, and (budget is
  // -1 here) the one this poll dispatches.
  instructionCount_ += static_cast<uint64_t>(granted - budget);
  granted = budget = kPollInterval;
  if (limit) {
    uint64_t used = instructionCount_ - runStart_;
    if (used >= limit) {
      nextPoll_ = instructionCount_ + kPollInterval;
      limitError("instruction limit exceeded (" + std::to_string(limit) + " instructions)");
    }
    if (limit - used < static_cast<uint64_t>(kPollInterval))
      granted = budget = static_cast<int64_t>(limit - used);
  }
  nextPoll_ = instructionCount_ + static_cast<uint64_t>(budget);
  if (interruptRequested_) {
    interruptRequested_ = false;
    limitError("interrupted");
  }
  ins = *pc++;
  GOTO_HANDLER();
}

#if !DLAM_COMPUTED_GOTO
dispatch:
  switch (instr::op(ins)) {
#define DLAM_OP_CASE(name, fmt, doc) \
  case Op::name:                     \
    goto op_##name;
    DLAM_OPCODES(DLAM_OP_CASE)
#undef DLAM_OP_CASE
    case Op::Count:  // no instruction holds it
      break;
  }
  return Value::undefined();
#endif

op_LOADK:
  RA = K[instr::bx(ins)];
  DISPATCH();
op_MOVE:
  RA = RB;
  DISPATCH();
op_GETUPVAL : {
  // One captured value, or a run of them (a function's entry loads them all at once).
  const Value* up = closure->upvals + instr::b(ins);
  RA = up[0];
  for (uint32_t i = 1, n = instr::c(ins); i <= n; ++i) (&RA)[i] = up[i];
  DISPATCH();
}
op_GETGLOBAL : {
  Symbol* s = asSymbol(K[instr::bx(ins)]);
  if (s->global.isUndefined()) {
    SAVE_PC();
    runtimeError("undefined variable '" + s->name + "'");
  }
  RA = s->global;
  DISPATCH();
}
op_SETGLOBAL:
  setGlobal(asSymbol(K[instr::bx(ins)]), RA);
  DISPATCH();
op_CLOSURE : {
  SAVE_PC();
  if (gcRequested_) collectDue();
  Proto* p = closure->proto;
  uint32_t idx = instr::bx(ins);
  Proto* child = p->protos[idx];
  const std::vector<uint16_t>& caps = p->captures[idx];
  auto n = static_cast<uint32_t>(caps.size());
  Closure* c = newClosure(child, n);
  for (uint32_t i = 0; i < n; ++i) c->upvals[i] = R[caps[i]];
  RA = Value::object(c);
  DISPATCH();
}
op_SETUPVAL : {
  // letrec patching a closure made before its group's later closures: a collection
  // at their CLOSURE may have made it old.
  // A closure *j or *j-inverse has already been applied to gets the value in those too.
  Closure* c = asClosure(RA);
  Value v = RC;
  if (c->flags & (kMemoFwd | kMemoInv | kMemoBoth)) [[unlikely]] {
    patchCaptured(c, instr::b(ins), v);
    DISPATCH();
  }
  c->upvals[instr::b(ins)] = v;
  writeBarrier(c, v);
  DISPATCH();
}

op_CALL : {
  // The common case first, on its own: a closure taking the arguments as given (its
  // arity, no rest list, no argument untagged or split), its environment ready, room
  // for its frame and registers, no collection due. Anything else takes `call` below.
  Value fn = RA;
  if (!isClosure(fn)) [[unlikely]] {
    if (isObj(fn, ObjType::Attached) && instr::rawArgs(ins) == 0 &&
        !(fn.asObject()->flags & (kUserRep | kForwardRep))) {
      // An attached procedure that forward mode never transposes (the library's map
      // and fold-left): its primal, as attachedCallee gives it, in its place.
      fn = RA = static_cast<Attached*>(fn.asObject())->primal;
    }
  }
  if (isClosure(fn) && (ins >> instr::kCShift) == 0 && !gcRequested_) {
    Closure* c = asClosure(fn);
    Proto* p = c->proto;
    uint32_t base = frame->base + instr::a(ins) + 1;
    uint32_t top = base + p->nregs;
    if (p->callKey == instr::b(ins) && !(c->flags & (kLazyJ | kLazyJInv | kObservedBp)) &&
        top < stack_.size() && frames_.size() < frameCap) [[likely]] {
      SAVE_PC();
      frames_.push_back(CallFrame{c, nullptr, base, false, 0, 0});
      startFrame(c, top);
      DISPATCH();
    }
  }
  callA = instr::a(ins);
  callN = instr::b(ins);
  callKey = callN;
  callRaw = instr::rawArgs(ins);
  goto call;
}
op_CALLP:
  // The argument in B parts: as they are for a function that takes it in as many,
  // regrouped (enter) for one that takes it in others or whole, made the list for
  // anything else.
  callA = instr::a(ins);
  callN = instr::b(ins);
  callKey = kCallParts | callN;
  callRaw = 0;
call : {
  uint32_t a = callA;
  uint32_t nargs = callN;
  SAVE_PC();
  if (gcRequested_) {
    stackTop_ = frame->base + closure->proto->nregs;
    collectDue();
  }
  if (callRaw && !takesUntagged(R[a], callRaw, callKey)) {
    tagArguments(a, callRaw);
    callRaw = 0;
  }
call_again:
  Value fn = R[a];
  if (isClosure(fn)) {
    Closure* c = asClosure(fn);
    Proto* p = c->proto;
    if (frames_.size() >= frameCap) [[unlikely]]
      stackOverflow(p);
    uint32_t base = frame->base + a + 1;
    if (callKey != p->callKey || (c->flags & (kLazyJ | kLazyJInv | kObservedBp)) ||
        base + p->nregs >= stack_.size()) [[unlikely]] {
      if ((c->flags & kObservedBp) && observedCall(frames_.size() - 1, p->adLevel)) {
        // A flagged backpropagator called by code that observes its result (ad.cpp).
        R[a] = observedTarget(c);
        goto call_again;
      }
      uint32_t parts = callKey & kCallParts ? nargs : 0;
      checkArity(c, parts ? 1 : nargs);
      frames_.push_back(CallFrame{c, nullptr, base, false, static_cast<uint8_t>(instr::c(ins)),
                                  static_cast<uint8_t>(callRaw)});
      enter(parts ? 1 : nargs, parts);
      DISPATCH();
    }
    // The common case, inline: the arguments as the function takes them (its arity,
    // or the parts of its one argument), no rest list, environment ready, room on the
    // stack.
    frames_.push_back(CallFrame{c, nullptr, base, false, static_cast<uint8_t>(instr::c(ins)),
                                static_cast<uint8_t>(callRaw)});
    startFrame(c, base + p->nregs);
    DISPATCH();
  }
  if (callKey & kCallParts) [[unlikely]] {
    // Anything but a closure takes the argument whole.
    regroupParts(&R[a + 1], nargs, 0);
    nargs = 1;
    callKey = 1;
  }
  if (isNative(fn) || isObj(fn, ObjType::Foreign)) {
    Native* n = asNative(fn);
    if (n->id == static_cast<uint16_t>(NativeId::Apply)) {
      nargs = spreadApply(a, nargs);
      callKey = nargs;
      goto call_again;
    }
    if (n->kind == static_cast<uint16_t>(NativeKind::Rep)) {
      R[a] = Value::object(repClosure(n, static_cast<int>(nargs)));
      R = stack_.data() + frame->base;
      goto call_again;
    }
    if (!n->takes(static_cast<int>(nargs))) [[unlikely]]
      nativeArityError(*this, n, nargs);
    uint32_t base = frame->base;
    uint32_t savedTop = stackTop_;
    if (stackTop_ < base + a + 1 + nargs) stackTop_ = base + a + 1 + nargs;
    callingNative = n;
    Value result = n->kind ? liftedCall(n, &R[a + 1], static_cast<int>(nargs))
                           : callPrimitive(n, &R[a + 1], static_cast<int>(nargs));
    stackTop_ = savedTop;
    // A native may have called back into dlam and grown frames_ (reallocating it).
    frame = &frames_.back();
    R = stack_.data() + base;
    if (result.isTailCall()) [[unlikely]] {
      if (landed_) {
        // %next-handler landed an error at a handler frame of this run (handlers.cpp):
        // go on in the innermost frame where the landing left it.
        landed_ = false;
        resumeTop();
        stackTop_ = frame->base + closure->proto->nregs;  // as land() left it
        DISPATCH();
      }
      // The native handed the work to a procedure: call it in the native's place.
      nargs = static_cast<uint32_t>(pendingCall_.size() - 1);
      ensureStack(base + a + 1 + nargs + 1);
      R = stack_.data() + base;
      for (size_t i = 0; i < pendingCall_.size(); ++i) R[a + i] = pendingCall_[i];
      pendingCall_.clear();
      if (stackTop_ < base + a + 1 + nargs) stackTop_ = base + a + 1 + nargs;
      if (stackHigh_ < stackTop_) stackHigh_ = stackTop_;
      callKey = nargs;
      goto call_again;
    }
    if (uint8_t split = static_cast<uint8_t>(instr::c(ins))) {
      splitResult(result, split, fn, &R[a]);
      DISPATCH();
    }
    R[a] = result;
    DISPATCH();
  }
  if (isObj(fn, ObjType::Attached)) {
    if (attachedTransposes(fn, &R[a + 1], static_cast<int>(nargs))) [[unlikely]] {
      nargs = transposeAttached(a, nargs);
      callKey = nargs;
      goto call_again;
    }
    R[a] = attachedCallee(fn, &R[a + 1], static_cast<int>(nargs));
    goto call_again;
  }
  if (isCommandLineCall(fn, nargs) && !instr::c(ins)) {
    R[a] = fn;
    DISPATCH();
  }
  notAProcedure(fn, nargs);
}

op_TAILCALL : {
  // Codegen always follows TAILCALL A B with RETURN A, so a callee that is not a
  // closure (a native) is simply called as by CALL and the RETURN does the rest.
  {
    // The common case first, as CALL's: a closure taking the arguments as given, its
    // environment ready, room for its registers, no collection due. The frame stays.
    Value fn = RA;
    if (!isClosure(fn)) [[unlikely]] {
      if (isObj(fn, ObjType::Attached) && instr::rawArgs(ins) == 0 &&
          !(fn.asObject()->flags & (kUserRep | kForwardRep)))
        fn = RA = static_cast<Attached*>(fn.asObject())->primal;  // as CALL's
    }
    if (isClosure(fn) && instr::rawArgs(ins) == 0 && !gcRequested_) {
      Closure* c = asClosure(fn);
      Proto* p = c->proto;
      uint32_t nargs = instr::b(ins);
      uint32_t top = frame->base + p->nregs;
      if (p->callKey == nargs && !(c->flags & (kLazyJ | kLazyJInv | kObservedBp)) &&
          top < stack_.size()) [[likely]] {
        SAVE_PC();
        Value* dst = R - 1;
        const Value* src = R + instr::a(ins);
        for (uint32_t i = 0; i <= nargs; ++i) dst[i] = src[i];
        frame->closure = c;
        frame->raw = 0;
        closure = c;
        if (top > stackHigh_) stackHigh_ = top;
        stackTop_ = top;
        pc = p->code.data();
        K = p->constants.data();
        DISPATCH();
      }
    }
  }
  uint32_t a = instr::a(ins);
  uint32_t nargs = instr::b(ins);
  uint32_t raw = instr::rawArgs(ins);
  SAVE_PC();
  if (gcRequested_) {
    stackTop_ = frame->base + closure->proto->nregs;
    collectDue();
  }
  if (raw && !takesUntagged(R[a], raw, nargs)) {
    tagArguments(a, raw);
    raw = 0;
  }
  for (;;) {
    Value fn = R[a];
    if (isClosure(fn)) {
      if ((asClosure(fn)->flags & kObservedBp) &&
          observedCall(frames_.size() - 1, asClosure(fn)->proto->adLevel)) [[unlikely]] {
        R[a] = observedTarget(asClosure(fn));
        continue;
      }
      checkArity(asClosure(fn), nargs);
      Value* dst = R - 1;
      for (uint32_t i = 0; i <= nargs; ++i) dst[i] = R[a + i];
      frame->closure = asClosure(fn);
      frame->raw = static_cast<uint8_t>(raw);
      enter(nargs);
      DISPATCH();
    }
    if (isObj(fn, ObjType::Attached)) {
      if (attachedTransposes(fn, &R[a + 1], static_cast<int>(nargs))) [[unlikely]]
        nargs = transposeAttached(a, nargs);
      else
        R[a] = attachedCallee(fn, &R[a + 1], static_cast<int>(nargs));
      continue;
    }
    if (isNative(fn) && asNative(fn)->id == static_cast<uint16_t>(NativeId::Apply)) {
      nargs = spreadApply(a, nargs);
      continue;
    }
    if (isNative(fn) && asNative(fn)->kind == static_cast<uint16_t>(NativeKind::Rep)) {
      R[a] = Value::object(repClosure(asNative(fn), static_cast<int>(nargs)));
      R = stack_.data() + frame->base;
      continue;
    }
    break;
  }
  // Anything else is called as by a CALL with no split, the count passed whole (an
  // instruction's B field has 16 bits; apply may have spread millions of arguments).
  ins = instr::make(Op::CALL, a, 0);
  callA = a;
  callN = nargs;
  callKey = nargs;
  callRaw = 0;
  goto call;
}

op_RETURN : {
  Value result = RA;
  if (!frame->split && !frame->boundary) [[likely]] {
    // To a caller in this run that takes the result whole (leave_frame's common case).
    R[-1] = result;
    frames_.pop_back();
    resumeTop();
    stackTop_ = frame->base + closure->proto->nregs;
    DISPATCH();
  }
  if (uint8_t split = frame->split) {
    if (!splitInto(result, split, R - 1)) [[unlikely]] {
      SAVE_PC();
      badSplit = cons(result, Value::object(closure));
    }
  } else {
    R[-1] = result;
  }
  goto leave_frame;
}
op_RETURN2 : {
  // (cons R[A] R[B]) in tail position: the pair is made only if the caller takes it whole.
  Value x = RA, y = RB;
  if (uint8_t split = frame->split) {
    bool ok = split == 1            ? isProcedure(unwrapAttached(y))
              : split < kSplitRepOf ? splitList(x, y, split - 2u, R - 1)
                                    : splitRepOf(x, y, split, R - 1);
    if (!ok) [[unlikely]] {
      SAVE_PC();
      badSplit = cons(cons(x, y), Value::object(closure));
      goto leave_frame;
    }
    if (split == 1) {
      R[-1] = x;
      R[0] = y;
    }
  } else {
    SAVE_PC();
    R[-1] = cons(x, y);
  }
  goto leave_frame;
}
op_RETURNN : {
  // (cons R[A] (cons x1 ... (cons xk R[C]))) in tail position: see returnSplit and
  // returnList.
  if (uint32_t k = instr::b(ins); frame->split == 2 + k && k <= 4) [[likely]] {
    returnSplit(ins, pc, R, K, k);
    goto leave_frame;
  }
  SAVE_PC();
  Value bad = returnList(ins, pc, R, K, frame->split);
  if (!bad.isUndefined()) [[unlikely]]
    badSplit = cons(bad, Value::object(closure));
  goto leave_frame;
}
op_RETURNR : {
  // (cons (cons R[A] (x1 ... xk . R[C])) bp) in tail position: see returnRepSplit and
  // returnRepList.
  if (returnRepSplit(ins, pc, R, K, frame->split)) [[likely]]
    goto leave_frame;
  SAVE_PC();
  Value bad = returnRepList(ins, pc, R, K, frame->split);
  if (!bad.isUndefined()) [[unlikely]]
    badSplit = cons(bad, Value::object(closure));
  goto leave_frame;
}
leave_frame : {
  Value result = R[-1];
  bool boundary = frame->boundary;
  frames_.pop_back();
  if (boundary) return result;
  resumeTop();
  stackTop_ = frame->base + closure->proto->nregs;
  if (!badSplit.isUndefined()) [[unlikely]] {
    // A result the caller takes split that has not the shape: the error is the
    // caller's, at its call (the check of %rep-result or %bp-result gives it).
    Value bad = badSplit;
    badSplit = Value::undefined();
    splitResult(asPair(bad)->car, static_cast<uint8_t>(instr::c(pc[-1])), asPair(bad)->cdr,
                &R[instr::a(pc[-1])]);
  }
  DISPATCH();
}

op_JMP:
  pc += instr::sBx(ins);
  DISPATCH();
op_JMPIFNOT : {
  Value c = RA;
  if (c.isFalse()) {
    pc += instr::sBx(ins);
  } else if (isObj(c, ObjType::Attached)) [[unlikely]] {
    if (unwrapAttached(c).isFalse()) pc += instr::sBx(ins);  // tests like its primal
  }
  DISPATCH();
}

// Plain numbers are computed in place; reverse-tagged ones (the forward sweep of a
// gradient) go through liftedBinary, out of line (one block for all) so the plain
// paths stay tight. NUMS: both operands numbers; a K-form's constant is one already
// (codegen makes K-forms of number constants only), so only the register is checked.
#define ARITH(NAME, OPER, ID, LHS, RHS, NUMS, LEVELED)    \
  op_##NAME : {                                           \
    Value x = LHS, y = RHS;                               \
    if ((NUMS) && !(LEVELED && instr::hasLevel(ins))) {   \
      RA = Value::number(x.asNumber() OPER y.asNumber()); \
      DISPATCH();                                         \
    }                                                     \
    arithId = NativeId::ID;                               \
    arithArgs[0] = x;                                     \
    arithArgs[1] = y;                                     \
    goto arith_slow;                                      \
  }
// Only the register forms carry a level (codegen makes no K-form in transformed
// code: liftedBinaryOp), so the K-forms do not test it.
#define ARITH_R(NAME, OPER, ID, LHS, RHS, NUMS) ARITH(NAME, OPER, ID, LHS, RHS, NUMS, true)
#define ARITH_K(NAME, OPER, ID, LHS, RHS, NUMS) ARITH(NAME, OPER, ID, LHS, RHS, NUMS, false)
  ARITH_R(ADD, +, Add, RB, RC, x.isNumber() && y.isNumber())
  ARITH_R(SUB, -, Sub, RB, RC, x.isNumber() && y.isNumber())
  ARITH_R(MUL, *, Mul, RB, RC, x.isNumber() && y.isNumber())
  ARITH_R(DIV, /, Div, RB, RC, x.isNumber() && y.isNumber())
  ARITH_R(ADDS, +, SensAdd, RB, RC, x.isNumber() && y.isNumber())
  ARITH_R(SUBS, -, SensSub, RB, RC, x.isNumber() && y.isNumber())
  ARITH_K(ADDK, +, Add, RB, KC, x.isNumber())
  ARITH_K(SUBK, -, Sub, RB, KC, x.isNumber())
  ARITH_K(MULK, *, Mul, RB, KC, x.isNumber())
  ARITH_K(DIVK, /, Div, RB, KC, x.isNumber())
  ARITH_K(RSUBK, -, Sub, KC, RB, y.isNumber())
  ARITH_K(RDIVK, /, Div, KC, RB, y.isNumber())
#undef ARITH_R
#undef ARITH_K
#undef ARITH
arith_slow : {
  if (instr::swapped(ins)) std::swap(arithArgs[0], arithArgs[1]);
  if (!instr::hasLevel(ins) && (arithArgs[0].isNumber() || arithArgs[0].isZero()) &&
      (arithArgs[1].isNumber() || arithArgs[1].isZero())) {
    // A symbolic zero (a sensitivity nothing reached) is an exact 0 (arithWithZero).
    if (Value z = arithWithZero(arithId, arithArgs, 2); !z.isUndefined()) {
      RA = z;
      DISPATCH();
    }
    double x = arithArgs[0].isZero() ? 0.0 : arithArgs[0].asNumber();
    double y = arithArgs[1].isZero() ? 0.0 : arithArgs[1].asNumber();
    double r = arithId == NativeId::Add || arithId == NativeId::SensAdd   ? x + y
               : arithId == NativeId::Sub || arithId == NativeId::SensSub ? x - y
               : arithId == NativeId::Mul                                 ? x * y
                                                                          : x / y;
    RA = Value::number(r);
    DISPATCH();
  }
  SAVE_PC();
  // Arrays (and tagged values) come here: a safe point, so that a loop of array
  // arithmetic, which may make no call, lets the collector free its large temporaries.
  // (The operands are in registers or constants: the collection keeps them.)
  if (gcRequested_) {
    stackTop_ = frame->base + closure->proto->nregs;
    collectDue();
  }
  // Bundles of numbers (forward mode in plain code): the dual-number rule in place,
  // what the + - * / primitives would reach through callPrimitive and fwdApply.
  if (!instr::hasLevel(ins) && (isFwd(arithArgs[0]) || isFwd(arithArgs[1]))) {
    if (Value r = fwdArith2(arithId, arithArgs[0], arithArgs[1]); !r.isUndefined()) {
      RA = r;
      DISPATCH();
    }
  }
  uint32_t base = frame->base;
  Value r = liftedBinary(arithId, instr::level(ins), arithArgs);
  R = stack_.data() + base;
  RA = r;
  DISPATCH();
}

#define COMPARE(NAME, OPER, ID, RHS, YNUM, LEVELED)                   \
  op_##NAME : {                                                       \
    Value x = RB, y = RHS;                                            \
    if (x.isNumber() && YNUM && !(LEVELED && instr::hasLevel(ins))) { \
      RA = Value::boolean(x.asNumber() OPER y.asNumber());            \
      DISPATCH();                                                     \
    }                                                                 \
    SAVE_PC();                                                        \
    Value args[2] = {x, y};                                           \
    RA = liftedBinary(NativeId::ID, instr::level(ins), args);         \
    DISPATCH();                                                       \
  }
  COMPARE(LT, <, Lt, RC, y.isNumber(), true)
  COMPARE(LE, <=, Le, RC, y.isNumber(), true)
  COMPARE(GT, >, Gt, RC, y.isNumber(), true)
  COMPARE(GE, >=, Ge, RC, y.isNumber(), true)
  COMPARE(NUMEQ, ==, NumEq, RC, y.isNumber(), true)
  COMPARE(LTK, <, Lt, KC, true, false)
  COMPARE(LEK, <=, Le, KC, true, false)
  COMPARE(GTK, >, Gt, KC, true, false)
  COMPARE(GEK, >=, Ge, KC, true, false)
  COMPARE(NUMEQK, ==, NumEq, KC, true, false)
#undef COMPARE

// The compare-and-jumps jump where the comparison fails, or with h (instr::jumpsIfHolds:
// a loop's test repeated at its end) where it holds. The path of two numbers dispatches
// on its own (no join with the slow path).
// A K-form's constant is a number (codegen makes K-forms of number constants only):
// YNUM checks the right operand only in the register form.
#define CMPJUMP(NAME, OPER, ID, RHS, YNUM)                                                    \
  op_##NAME : {                                                                               \
    Value x = RA, y = RHS;                                                                    \
    if (x.isNumber() && YNUM) {                                                               \
      if ((x.asNumber() OPER y.asNumber()) == instr::jumpsIfHolds(ins)) pc += instr::sC(ins); \
      DISPATCH();                                                                             \
    }                                                                                         \
    SAVE_PC();                                                                                \
    Value args[2] = {x, y};                                                                   \
    bool holds = callPrimitive(builtin(NativeId::ID), args, 2).isTruthy();                    \
    if (holds == instr::jumpsIfHolds(ins)) pc += instr::sC(ins);                              \
    DISPATCH();                                                                               \
  }
  CMPJUMP(JNLT, <, Lt, RB, y.isNumber())
  CMPJUMP(JNLE, <=, Le, RB, y.isNumber())
  CMPJUMP(JNGT, >, Gt, RB, y.isNumber())
  CMPJUMP(JNGE, >=, Ge, RB, y.isNumber())
  CMPJUMP(JNNUMEQ, ==, NumEq, RB, y.isNumber())
  CMPJUMP(JNLTK, <, Lt, KB, true)
  CMPJUMP(JNLEK, <=, Le, KB, true)
  CMPJUMP(JNGTK, >, Gt, KB, true)
  CMPJUMP(JNGEK, >=, Ge, KB, true)
  CMPJUMP(JNNUMEQK, ==, NumEq, KB, true)
#undef CMPJUMP

op_CONS : {
  SAVE_PC();
  Value x = RB, y = RC;
  RA = Value::object(newPair(x, y));
  DISPATCH();
}
op_CAR : {
  Value x = RB;
  if (!isPair(x)) {
    x = unwrapAttached(x);
    if (!isPair(x)) {
      SAVE_PC();
      cxrError(ins, pc, R, x, "car");
    }
  }
  RA = asPair(x)->car;
  DISPATCH();
}
op_CDR : {
  Value x = RB;
  if (!isPair(x)) {
    x = unwrapAttached(x);
    if (!isPair(x)) {
      SAVE_PC();
      cxrError(ins, pc, R, x, "cdr");
    }
  }
  RA = asPair(x)->cdr;
  DISPATCH();
}
op_NOT:
  RA = Value::boolean(unwrapAttached(RB).isFalse());
  DISPATCH();
op_NULLP:
  RA = Value::boolean(unwrapAttached(RB).isNil());
  DISPATCH();
op_PAIRP:
  RA = Value::boolean(isPair(unwrapAttached(RB)));
  DISPATCH();
op_TYPEP : {
  // The common answers inline (a number, a symbol, a string, a boolean, a closure or a
  // native, and anything that is no number for number?); an attached value, a tagged
  // or bundled number and anything else ask the primitive.
  Value x = RB;
  switch (static_cast<NativeId>(instr::c(ins))) {
    case NativeId::NumberP:
      if (x.isNumber()) {
        RA = Value::boolean(true);
        DISPATCH();
      }
      if (!x.isObject()) {
        RA = Value::boolean(x.isZero());
        DISPATCH();
      }
      break;
    case NativeId::SymbolP:
    case NativeId::StringP:
    case NativeId::ProcedureP:
      if (!x.isObject()) {
        RA = Value::boolean(false);
        DISPATCH();
      }
      if (!isObj(x, ObjType::Attached)) {
        ObjType t = x.asObject()->type;
        NativeId id = static_cast<NativeId>(instr::c(ins));
        RA = Value::boolean(id == NativeId::SymbolP   ? t == ObjType::Symbol
                            : id == NativeId::StringP ? t == ObjType::String
                                                      : isProcedure(x));
        DISPATCH();
      }
      break;
    case NativeId::BooleanP:
      if (!x.isObject()) {
        RA = Value::boolean(x.isBool());
        DISPATCH();
      }
      break;
    default:
      break;
  }
  SAVE_PC();
  RA = callPrimitive(builtin(static_cast<NativeId>(instr::c(ins))), &x, 1);
  DISPATCH();
}
op_EQP : {
  Value x = RB, y = RC;
  if (x.isNumber() && y.isNumber()) {
    RA = Value::boolean(sameNumber(x.asNumber(), y.asNumber()));
    DISPATCH();
  }
  if (x == y) {
    RA = Value::boolean(true);
    DISPATCH();
  }
  // Two different values neither of which is tagged, bundled, attached or the symbolic
  // zero (which are compared by what they stand for: eqValues) are not eq?.
  auto plain = [](Value v) DLAM_INLINE_LAMBDA {
    if (!v.isObject()) return !v.isZero();
    ObjType t = v.asObject()->type;
    return t != ObjType::Rev && t != ObjType::Attached && t != ObjType::Fwd;
  };
  if (plain(x) && plain(y)) {
    RA = Value::boolean(false);
    DISPATCH();
  }
  SAVE_PC();
  Value args[2] = {x, y};
  RA = builtin(NativeId::EqP)->fn(*this, args, 2);
  DISPATCH();
}

op_UNRED : {
  // A sensitivity given back to an operand of %sens+ (ad_rules.cpp): as it is when the
  // operand is a number, as every one in scalar code is.
  Value like = RC;
  if (like.isNumber() || like.isZero()) {
    RA = RB;
    DISPATCH();
  }
  SAVE_PC();
  Value args[2] = {RB, like};
  RA = callPrimitive(builtin(NativeId::Unreduce), args, 2);
  DISPATCH();
}
op_SENSBK : {
  // A sensitivity given back to an operand x of %sens+ or plus (ad_rules.cpp): as it is
  // unless x is the symbolic zero, as no number is (every operand in scalar code, under
  // reverse tags or not). A bundle goes to the native (forward mode's dual rule).
  const Instr* words = pc;
  pc += instr::listWords(ins);
  uint32_t n = instr::b(ins);
  bool product = instr::isProduct(ins);
  bool slow = false;  // x may be the zero (or is a bundle): the native decides
  for (uint32_t j = 0; j < (product ? n : 1) && !slow; ++j) {
    Value v = R[instr::listedReg(words, j)];
    if (!v.isNumber()) {
      v = untagged(unwrapAttached(v));
      slow = !v.isNumber() && (v.isZero() || isFwd(v));
    }
  }
  if (!slow) [[likely]] {
    RA = RC;
    DISPATCH();
  }
  SAVE_PC();
  Value args[instr::kMaxSensBackArgs];
  args[0] = RC;
  uint32_t k = 1;
  if (product) args[k++] = Value::boolean(true);
  readListed(words, R, 0, n, args + k);
  RA = callPrimitive(builtin(NativeId::SensBack), args, static_cast<int>(k + n));
  DISPATCH();
}
op_SUMTO : {
  // A sensitivity summed to the shape of the value it is of (ad_rules.cpp, ownShape):
  // as it is when it is a number, as every one in scalar code is.
  Value g = RB;
  if (g.isNumber() || g.isZero()) {
    RA = g;
    DISPATCH();
  }
  SAVE_PC();
  Value args[2] = {g, RC};
  RA = callPrimitive(builtin(NativeId::SumTo), args, 2);
  DISPATCH();
}
op_PLUS : {
  Value x = RB, y = RC;
  if (x.isNumber() && y.isNumber()) {
    RA = Value::number(x.asNumber() + y.asNumber());
    DISPATCH();
  }
  // x ⊕ 0 = x (an attached value goes through plus, which gives its primal)
  if (y.isZero() && !isObj(x, ObjType::Attached)) {
    RA = x;
    DISPATCH();
  }
  if (x.isZero() && !isObj(y, ObjType::Attached)) {
    RA = y;
    DISPATCH();
  }
  SAVE_PC();
  if (isObj(x, ObjType::Rev) && isObj(y, ObjType::Rev)) {
    // Sensitivities of a nested derivative: tagged numbers, added under their tag.
    Value px = static_cast<Rev*>(x.asObject())->primal,
          py = static_cast<Rev*>(y.asObject())->primal;
    if (px.isNumber() && py.isNumber()) {
      RA = Value::object(makeRev(Value::number(px.asNumber() + py.asNumber())));
      DISPATCH();
    }
  }
  RA = closure->proto->adLevel == 0 ? plusChecked(x, y) : plus(x, y);
  DISPATCH();
}
// car/cdr of a sensitivity: the symbolic zero stands for a pair of zeros.
#define SENS_PART(NAME, FIELD) \
  op_##NAME : {                \
    Value x = RB;              \
    if (isPair(x)) {           \
      RA = asPair(x)->FIELD;   \
      DISPATCH();              \
    }                          \
    if (x.isZero()) {          \
      RA = x;                  \
      DISPATCH();              \
    }                          \
    SAVE_PC();                 \
    sensitivityPartError(x);   \
  }
  SENS_PART(SCAR, car)
  SENS_PART(SCDR, cdr)
#undef SENS_PART
// JINV and STARJ apply their operation C + 1 times (a chain the compiler joined); each
// level's result is in R[A] while the next is taken.
op_JINV : {
  Value x = RB;
  for (uint32_t more = instr::c(ins);; --more) {
    if (isObj(x, ObjType::Rev)) [[likely]] {
      x = static_cast<Rev*>(x.asObject())->primal;
    } else {
      SAVE_PC();
      x = starJInverse(x);
      R = stack_.data() + frame->base;
    }
    RA = x;
    if (!more) break;
  }
  DISPATCH();
}
op_ADENTRY:
  // A reverse-transformed function's entry: called by code that observes its result,
  // it runs through %j-boundary at the caller's level (ad.cpp), which calls it again
  // from the AD machinery's own code and flags the backpropagator it returns.
  SAVE_PC();
  if (int n = adEntry()) [[unlikely]]
    enter(n);
  DISPATCH();
op_ARGJINV:
  // A parameter used only here: as it is if its caller passed it untagged.
  if (frame->raw >> instr::b(ins) & 1) {
    RA = RB;
    DISPATCH();
  }
  goto op_JINV;
op_STARJ : {
  Value x = RB;
  for (uint32_t more = instr::c(ins);; --more) {
    if (isClosure(x) && (asClosure(x)->flags & kMemoFwd)) {
      // A procedure differentiated before (a global function called in transformed code).
      x = asClosure(x)->memo;
    } else {
      SAVE_PC();
      x = starJValue(x);
      R = stack_.data() + frame->base;
    }
    RA = x;
    if (!more) break;
  }
  DISPATCH();
}
op_NEG : {
  Value x = RB;
  if (x.isNumber()) {
    RA = Value::number(-x.asNumber());
    DISPATCH();
  }
  SAVE_PC();
  if (gcRequested_) {  // a safe point, as arith_slow's
    stackTop_ = frame->base + closure->proto->nregs;
    collectDue();
  }
  Value r = callPrimitive(builtin(NativeId::Sub), &x, 1);
  R = stack_.data() + frame->base;
  RA = r;
  DISPATCH();
}
// The results of a callee's *j and of a backpropagator in transformed code, checked
// (the error names the procedure): inline when well formed.
#define CHECKED_RESULT(NAME, MODE, ID)              \
  op_##NAME : {                                     \
    Value x = RB;                                   \
    if (splitsAs(x, MODE)) {                        \
      RA = x;                                       \
      DISPATCH();                                   \
    }                                               \
    SAVE_PC();                                      \
    Value args[2] = {x, RC};                        \
    RA = builtin(NativeId::ID)->fn(*this, args, 2); \
    DISPATCH();                                     \
  }
  CHECKED_RESULT(REPRES, 1, RepResult)
  CHECKED_RESULT(BPRES, 2, BpResult)
#undef CHECKED_RESULT
op_VREF : {
  Value x = RB, k = RC;
  if (isObj(x, ObjType::Vector) && k.isNumber()) {
    // An integer index in range of a dense vector (a sparse sensitivity's aux is its
    // storage), and an element that is not a NaN (whose payload the native canonicalises).
    auto* v = static_cast<Vector*>(x.asObject());
    double i = k.asNumber();
    if (!isSparse(v) && v->rank == 1 && i >= 0 && i < v->aux &&
        i == static_cast<double>(static_cast<uint32_t>(i))) {
      double d = v->items[static_cast<uint32_t>(i)];
      if (d == d) {
        RA = Value::number(d);
        DISPATCH();
      }
    }
  }
  SAVE_PC();
  Value args[2] = {x, k};
  Value r = callPrimitive(builtin(NativeId::VectorRef), args, 2);
  R = stack_.data() + frame->base;
  RA = r;
  DISPATCH();
}
op_ATTACH : {
  SAVE_PC();
  Value x = RB, y = RC;
  RA = Value::object(attachRep(x, y));
  DISPATCH();
}

#undef DISPATCH
#undef GOTO_HANDLER
#undef SAVE_PC
#undef RA
#undef RB
#undef RC
#undef KB
#undef KC
}

}  // namespace dlam
