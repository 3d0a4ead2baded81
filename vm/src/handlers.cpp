// handlers.cpp — errors a program catches: handler frames, raise, raise-continuable,
// and how a runtime error finds the handler that takes it.
//
// A handler is a frame on the VM's own frame stack, not a C++ try block per handler:
// %with-handler-frame is a closure of a small hand-made proto that calls its thunk
// and, when an error lands at it, tail-calls a procedure in its own place. Every
// entry into the interpreter (VM::call → run) catches the runtime errors raised while
// it runs. The innermost run to see an error asks the handlers, from the innermost
// out, where it was raised (R7RS: a guard's clauses are tested, a handler of
// with-exception-handler runs, in the dynamic context of the raise): it pushes an
// asking frame on top of the frames and goes on there. That frame calls each handler
// in turn, and while it does the search for a handler skips to below that handler's
// own frame, so an error in a handler goes to the handlers outside (and is asked about
// in a frame of its own, on top: no C++ recursion). A handler answers #f (declined:
// the next is asked) or a procedure k: the error is then decided for that handler
// frame. The run whose frames hold it drops the frames above it (with what they held:
// a half-built tape dies with them) and goes on there with (k); a run below it
// rethrows (natives that called back into dlam unwind in C++ as before), so a million
// nested handlers cost no C++ stack. If no handler takes the error, it is located and
// traced where it was raised, and ends the run as any error does. Only
// ErrorKind::Runtime is caught: limit errors and exit end the run whatever handlers
// there are. Finding a handler walks the frames down to it.
//
// A C++ throw costs about 20 000 instructions of unwinding, so the common case throws
// nothing: raise and error, called by the interpreter, return a tail call of the asking
// frame (raiseToHandlers), and %next-handler, when the handler frame it decides for is
// in its own run (above the innermost frame entered from C++), lands there itself and
// tells the interpreter to go on in the innermost frame (landed_). Runtime errors of
// primitives, and landings below a native that called back into dlam, still throw.
#include <cmath>
#include <memory>

#include "dlam/opcodes.h"
#include "dlam/vm.h"

namespace dlam {

namespace {
// %with-handler-frame (h thunk ch): R0 = h, R1 = thunk, R2 = ch, R3 = the gradient
// boundary's state when it was entered (VM::gradientBoundary), R4 the thunk's value.
constexpr uint32_t kThunkReturn = 4;  // the pc saved while the thunk runs: active
constexpr uint32_t kLanding = 5;      // where a decided error goes on: R0 = k
constexpr uint32_t kTapeRegister = 3;
constexpr uint32_t kContinuableRegister = 2;
// The frames a handler is called in, (h obj index), hold its frame's index in R2.
constexpr uint32_t kSkipRegister = 2;

// (%tape-state): the collector's gradient boundary (where a top-level gradient began,
// or #f), saved by a handler frame and restored when an error lands there.
Value tapeStateNative(VM& vm, Value*, int) { return vm.tapeState(); }
}  // namespace

void VM::defineHandlerFrames() {
  using instr::make;
  auto finish = [&](Proto* p, const char* name, uint16_t nparams, uint16_t nregs) {
    p->name = name;
    p->file = "<prelude>";
    p->nparams = nparams;
    p->callKey = nparams;
    p->nregs = nregs;
    p->locs.assign(p->code.size(), SrcLoc{});
    noteProtoBytes(p);
  };
  Proto* h = makeProto();
  h->constants.push_back(Value::object(makeNative("%tape-state", tapeStateNative, 0, 0)));
  h->code = {
      instr::makeBx(Op::LOADK, kTapeRegister, 0),  // R3 = (%tape-state)
      make(Op::CALL, kTapeRegister, 0),
      make(Op::MOVE, 4, 1),  // R4 = (thunk)
      make(Op::CALL, 4, 0),
      make(Op::RETURN, 4),
      make(Op::TAILCALL, 0, 0),  // landing: (k) in this frame's place
      make(Op::RETURN, 0),
  };
  finish(h, "%with-handler", 3, 6);
  handlerProto_ = h;
  defineGlobal("%with-handler-frame", Value::object(makeClosure(h, 0)));

  // raise-continuable's: (h obj) returned to the raise.
  Proto* c = makeProto();
  c->code = {
      make(Op::MOVE, 3, 0),
      make(Op::MOVE, 4, 1),
      make(Op::CALL, 3, 1),
      make(Op::RETURN, 3),
  };
  finish(c, "%call-handler", 3, 6);
  continuableProto_ = c;
  continuableCall_ = makeClosure(c, 0);

  // An error's: asks (h obj); %next-handler decides for a procedure, raises the error
  // uncaught after the last handler, or gives the next handler's frame, asked in turn.
  Proto* a = makeProto();
  a->constants.push_back(Value::object(makeNative("%next-handler", nextHandlerNative, 3, 3)));
  a->constants.push_back(Value::object(makeNative("%handler-at", handlerAtNative, 1, 1)));
  a->code = {
      make(Op::MOVE, 3, 0),  // R3 = (h obj)
      make(Op::MOVE, 4, 1),
      make(Op::CALL, 3, 1),
      instr::makeBx(Op::LOADK, 4, 0),  // R2 = (%next-handler R3 obj R2)
      make(Op::MOVE, 5, 3),
      make(Op::MOVE, 6, 1),
      make(Op::MOVE, 7, 2),
      make(Op::CALL, 4, 3),
      make(Op::MOVE, kSkipRegister, 4),
      instr::makeBx(Op::LOADK, 5, 1),  // R0 = (%handler-at R2)
      make(Op::MOVE, 6, kSkipRegister),
      make(Op::CALL, 5, 1),
      make(Op::MOVE, 0, 5),
      instr::makeBx(Op::JMP, 0, static_cast<uint32_t>(-14)),  // to the start
  };
  finish(a, "%ask-handler", 3, 9);
  askProto_ = a;
  askCall_ = makeClosure(a, 0);
}

long VM::findHandler(size_t from) const {
  for (size_t i = from; i-- > 0;) {
    const CallFrame& f = frames_[i];
    if (!f.closure) continue;
    const Proto* p = f.closure->proto;
    if (p == handlerProto_) {
      // Active while its thunk runs (not once an error landed at it).
      if (f.pc == p->code.data() + kThunkReturn) return static_cast<long>(i);
    } else if (p == continuableProto_ || p == askProto_) {
      // A handler being called: the handlers from its own frame on are not current.
      i = static_cast<size_t>(stack_[f.base + kSkipRegister].asNumber());
    }
  }
  return -1;
}

Value VM::makeErrorObject(Value message, Value irritants) {
  auto* e = static_cast<ErrorObject*>(allocate(ObjType::ErrorObject, sizeof(ErrorObject)));
  e->message = message;
  e->irritants = irritants;
  return Value::object(e);
}

std::string VM::uncaughtMessage(Value obj) {
  if (!isObj(obj, ObjType::ErrorObject)) return "uncaught exception: " + show(obj, true);
  auto* e = static_cast<ErrorObject*>(obj.asObject());
  std::string msg =
      isString(e->message) ? std::string(asString(e->message)->view()) : show(e->message, true);
  for (Value l = e->irritants; isPair(l); l = asPair(l)->cdr)
    msg += " " + show(asPair(l)->car, true);
  return msg;
}

void VM::raiseValue(Value obj) {
  raisedValue_ = obj;
  if (handlerActive()) {
    // The handlers are asked first (decide); no message or trace is made unless none
    // takes it, so a raise in a deep recursion stays cheap.
    Error e(ErrorKind::Runtime, std::string());
    e.raised = true;
    throw e;
  }
  Error e(ErrorKind::Runtime, uncaughtMessage(obj));
  e.raised = true;
  e.decided = true;
  raisedValue_ = Value::undefined();
  buildTrace(e);
  throw e;
}

Value VM::raiseToHandlers(Value obj) {
  long h = findHandler(frames_.size());
  if (h < 0) raiseValue(obj);
  Value args[3] = {stack_[frames_[static_cast<size_t>(h)].base], obj,
                   Value::number(static_cast<double>(h))};
  return tailCall(Value::object(askCall_), args, 3);
}

Value VM::raiseContinuable(Value obj) {
  long h = findHandler(frames_.size());
  if (h < 0) raiseValue(obj);
  Value ch = stack_[frames_[static_cast<size_t>(h)].base + kContinuableRegister];
  if (ch.isFalse()) raiseValue(obj);  // a guard: its clauses are asked as for raise
  Value args[3] = {ch, obj, Value::number(static_cast<double>(h))};
  return tailCall(Value::object(continuableCall_), args, 3);
}

// An error no handler has seen: the asking frame is pushed on top of the frames, as
// if the innermost frame had called it, to ask the innermost handler first.
void VM::askHandlers(Error& e) {
  Value obj = e.raised ? raisedValue_ : makeErrorObject(makeString(e.message), Value::nil());
  raisedValue_ = Value::undefined();
  long h = findHandler(frames_.size());
  if (h < 0) {  // (a handler frame between ended before the error came here)
    if (e.raised) e.message = uncaughtMessage(obj);
    e.decided = true;
    if (e.trace.empty()) buildTrace(e);
    return;
  }
  uint32_t base = stackTop_ + 1;
  ensureStack(base + askProto_->nregs + 1);
  stack_[base - 1] = Value::object(askCall_);
  stack_[base] = stack_[frames_[static_cast<size_t>(h)].base];
  stack_[base + 1] = obj;
  stack_[base + 2] = Value::number(static_cast<double>(h));
  stackTop_ = base + 3;
  if (stackHigh_ < stackTop_) stackHigh_ = stackTop_;
  frames_.push_back(CallFrame{askCall_, nullptr, base, false});
  pendingCall_.clear();
  callingNative = nullptr;
}

// (%next-handler answer obj index), in the asking frame: see defineHandlerFrames.
Value VM::nextHandlerNative(VM& vm, Value* a, int) {
  auto index = static_cast<size_t>(a[2].asNumber());
  Error e(ErrorKind::Runtime, std::string());
  e.decided = true;
  if (!a[0].isFalse()) {
    vm.landing_ = a[0];
    if (index >= vm.runEntry()) {
      // The handler frame is in the run this native was called by: land there now,
      // and let the interpreter go on where the landing left the frames.
      vm.land(index);
      vm.landed_ = true;
      return Value::tailCall();
    }
    e.handlerFrame = static_cast<int64_t>(index);
    throw e;
  }
  long next = vm.findHandler(index);
  if (next >= 0) return Value::number(static_cast<double>(next));
  // Uncaught: located and traced where it was raised (without the asking frame).
  e.message = vm.uncaughtMessage(a[1]);
  vm.frames_.pop_back();
  vm.buildTrace(e);
  throw e;
}

Value VM::handlerAtNative(VM& vm, Value* a, int) {
  return vm.stack_[vm.frames_[static_cast<size_t>(a[0].asNumber())].base];
}

size_t VM::runEntry() const {
  for (size_t i = frames_.size(); i-- > 0;)
    if (frames_[i].boundary) return i;
  return 0;
}

void VM::land(size_t index) {
  frames_.resize(index + 1);
  CallFrame& f = frames_.back();
  Value* R = stack_.data() + f.base;
  R[0] = landing_;
  landing_ = Value::undefined();
  // A top-level gradient the error ended (begun since the handler was entered) is over.
  Value tape = R[kTapeRegister];
  tapeStart_ = tape.isNumber() ? static_cast<uint64_t>(tape.asNumber()) : UINT64_MAX;
  f.pc = handlerProto_->code.data() + kLanding;
  stackTop_ = f.base + handlerProto_->nregs;
  pendingCall_.clear();
  callingNative = nullptr;
}

Value VM::run(size_t entryDepth) {
  // The usual run raises nothing: it enters execute() and leaves, with no Error made
  // (an Error is large; building and destroying an empty one cost each call more than
  // the call of a small procedure). What is caught is handled out of the catch.
  std::unique_ptr<Error> caught;
  try {
    return execute(false);
  } catch (Error& e) {
    if (e.kind != ErrorKind::Runtime) throw;
    caught = std::make_unique<Error>(std::move(e));
  }
  return runCaught(entryDepth, std::move(*caught));
}

// run's loop after a runtime error was raised: ask the handlers, land, run again.
Value VM::runCaught(size_t entryDepth, Error err) {
  bool resume = false;
  for (bool first = true;; first = false) {
    if (!first) {
      try {
        return execute(resume);
      } catch (Error& e) {
        if (e.kind != ErrorKind::Runtime) throw;
        err = std::move(e);
      }
    }
    if (!err.decided) {
      askHandlers(err);  // (pushes the asking frame, or decides it uncaught)
      if (!err.decided) {
        resume = false;  // enter the asking frame
        continue;
      }
    }
    if (err.handlerFrame < 0 || static_cast<size_t>(err.handlerFrame) < entryDepth) throw err;
    land(static_cast<size_t>(err.handlerFrame));
    resume = true;
  }
}

}  // namespace dlam
