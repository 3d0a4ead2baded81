// handlers.cpp — errors a program catches: handler frames, raise, raise-continuable
// and the landing of a runtime error at the innermost handler.
//
// A handler is a frame on the VM's own frame stack, not a C++ try block per handler:
// %with-handler-frame is a closure of a small hand-made proto that calls its thunk
// and, if an error lands at it, tail-calls its handler in its own place. Every entry
// into the interpreter (VM::call → run) catches the runtime errors raised while it
// runs; if the innermost active handler frame is one of its frames, the frames above
// it are dropped (with everything they held: a half-built tape dies with them), the
// raised object (or an error object made from the error's message) goes into the
// frame's registers and the interpreter goes on at the frame's landing code. Else the
// error goes on to the entry below (natives that called back into dlam unwind in
// C++ as before), so a million nested handlers cost no C++ stack. Finding the
// handler walks the frames from the top to it (an unwinding walks them anyway);
// raise-continuable calls a handler on top of the stack through a marker frame that
// makes the walk skip to below the handler's own frame (R7RS: a handler runs without
// itself as the current handler). Only ErrorKind::Runtime is caught: limit errors
// and exit end the run whatever handlers there are.
#include <cmath>

#include "dlam/opcodes.h"
#include "dlam/vm.h"

namespace dlam {

namespace {
// %with-handler-frame (h thunk ch): R0 = h, R1 = thunk, R2 = ch, R3 = the gradient
// boundary's state when it was entered (VM::gradientBoundary), R4 the thunk's value.
constexpr uint32_t kThunkReturn = 4;  // the pc saved while the thunk runs: active
constexpr uint32_t kLanding = 5;      // where a caught error goes on: R1 = the object
constexpr uint32_t kTapeRegister = 3;
constexpr uint32_t kContinuableRegister = 2;
// The marker frame of raise-continuable (h obj index): R2 is the handler frame's index.
constexpr uint32_t kSkipRegister = 2;

// (%tape-state): the collector's gradient boundary (where a top-level gradient began,
// or #f), saved by a handler frame and restored when an error lands there.
Value tapeStateNative(VM&, Value*, int);
}  // namespace

void VM::defineHandlerFrames() {
  using instr::make;
  auto finish = [&](Proto* p, const char* name, uint16_t nparams) {
    p->name = name;
    p->file = "<prelude>";
    p->nparams = nparams;
    p->callKey = nparams;
    p->nregs = 6;
    p->locs.assign(p->code.size(), SrcLoc{});
    noteProtoBytes(p);
  };
  Proto* h = makeProto();
  Native* tape = makeNative("%tape-state", tapeStateNative, 0, 0);
  h->constants.push_back(Value::object(tape));
  h->code = {
      instr::makeBx(Op::LOADK, kTapeRegister, 0),  // R3 = (%tape-state)
      make(Op::CALL, kTapeRegister, 0),
      make(Op::MOVE, 4, 1),  // R4 = (thunk)
      make(Op::CALL, 4, 0),
      make(Op::RETURN, 4),
      make(Op::TAILCALL, 0, 1),  // landing: (h obj) in this frame's place
      make(Op::RETURN, 0),
  };
  finish(h, "%with-handler", 3);
  handlerProto_ = h;
  defineGlobal("%with-handler-frame", Value::object(makeClosure(h, 0)));

  Proto* c = makeProto();
  c->code = {
      make(Op::MOVE, 3, 0),  // R3 = (h obj)
      make(Op::MOVE, 4, 1),
      make(Op::CALL, 3, 1),
      make(Op::RETURN, 3),
  };
  finish(c, "raise-continuable", 3);
  continuableProto_ = c;
  continuableCall_ = makeClosure(c, 0);
}

namespace {
Value tapeStateNative(VM& vm, Value*, int) { return vm.tapeState(); }
}  // namespace

long VM::findHandler(size_t from) const {
  for (size_t i = from; i-- > 0;) {
    const CallFrame& f = frames_[i];
    if (!f.closure) continue;
    const Proto* p = f.closure->proto;
    if (p == handlerProto_) {
      // Active while its thunk runs (not once an error landed at it).
      if (f.pc == p->code.data() + kThunkReturn) return static_cast<long>(i);
    } else if (p == continuableProto_) {
      // A handler called by raise-continuable: the handlers from its own frame on
      // are not current while it runs.
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

std::string VM::errorObjectText(Value obj) {
  auto* e = static_cast<ErrorObject*>(obj.asObject());
  std::string msg = isString(e->message) ? std::string(asString(e->message)->view())
                                         : show(e->message, true);
  for (Value l = e->irritants; isPair(l); l = asPair(l)->cdr)
    msg += " " + show(asPair(l)->car, true);
  return msg;
}

void VM::raiseValue(Value obj) {
  raisedValue_ = obj;
  if (handlerActive()) {
    // Caught: no message or trace is needed (a raise in a deep recursion stays cheap).
    Error e(ErrorKind::Runtime, std::string());
    e.raised = true;
    throw e;
  }
  std::string message = isObj(obj, ObjType::ErrorObject)
                            ? errorObjectText(obj)
                            : "uncaught exception: " + show(obj, true);
  Error e(ErrorKind::Runtime, message);
  e.raised = true;
  buildTrace(e);
  throw e;
}

Value VM::raiseContinuable(Value obj) {
  long h = findHandler(frames_.size());
  if (h < 0) raiseValue(obj);
  Value ch = stack_[frames_[static_cast<size_t>(h)].base + kContinuableRegister];
  if (ch.isFalse()) raiseValue(obj);  // a guard's handler: it unwinds
  Value args[3] = {ch, obj, Value::number(static_cast<double>(h))};
  return tailCall(Value::object(continuableCall_), args, 3);
}

bool VM::landAtHandler(const Error& e, size_t entryDepth) {
  if (e.kind != ErrorKind::Runtime) return false;
  long h = findHandler(frames_.size());
  if (h < 0 || static_cast<size_t>(h) < entryDepth) return false;
  Value obj = e.raised ? raisedValue_ : makeErrorObject(makeString(e.message), Value::nil());
  raisedValue_ = Value::undefined();
  frames_.resize(static_cast<size_t>(h) + 1);
  CallFrame& f = frames_.back();
  Value* R = stack_.data() + f.base;
  R[1] = obj;
  // A top-level gradient the error ended (begun since the handler was entered) is over.
  Value tape = R[kTapeRegister];
  tapeStart_ = tape.isNumber() ? static_cast<uint64_t>(tape.asNumber()) : UINT64_MAX;
  f.pc = handlerProto_->code.data() + kLanding;
  stackTop_ = f.base + handlerProto_->nregs;
  pendingCall_.clear();
  callingNative = nullptr;
  return true;
}

Value VM::run(size_t entryDepth) {
  bool resume = false;
  for (;;) {
    try {
      return execute(resume);
    } catch (const Error& e) {
      if (!landAtHandler(e, entryDepth)) throw;
      resume = true;
    }
  }
}

}  // namespace dlam
