// primitives_io.cpp — output, errors and introspection: display, write, newline,
// print, error, assert, exit, disasm, gc-stats, and R7RS's clocks (current-second,
// current-jiffy, jiffies-per-second) for timing from a script.
//
// All output goes through vm.output so embedders and tests can capture it (display,
// write and newline to a port given them: primitives_ports.cpp).
// (collect-garbage) lives in primitives_ad.cpp: it only requests a collection at
// the next safe point, since natives are not safe points themselves.
#include <chrono>
#include <string>

#include "primitives.h"

namespace dlam::prim {

namespace {

void emit(VM& vm, const std::string& s) {
  if (!s.empty()) vm.output(s);
}

// (void): the value of an expression that has none (display's, for-each's, a do's
// without result expressions), which -e and the REPL do not print.
Value voidValue(VM&, Value*, int) { return Value::voidValue(); }

// display, write and newline take an optional port (primitives_ports.cpp).
Value display(VM& vm, Value* a, int n) {
  writeOutput(vm, "display", a, n, 1, vm.show(a[0], false));
  return Value::voidValue();
}

Value write(VM& vm, Value* a, int n) {
  writeOutput(vm, "write", a, n, 1, vm.show(a[0], true));
  return Value::voidValue();
}

Value newline(VM& vm, Value* a, int n) {
  writeOutput(vm, "newline", a, n, 0, "\n");
  return Value::voidValue();
}

// (print x ...): the values as display shows them, separated by spaces, then a newline.
Value print(VM& vm, Value* a, int n) {
  std::string line;
  for (int i = 0; i < n; ++i) {
    if (i) line += ' ';
    line += vm.show(a[i], false);
  }
  vm.output(line + "\n");
  return Value::voidValue();
}

// A message argument: a string's text, or any other value written.
std::string messageText(VM& vm, Value v) {
  Value u = unwrapAttached(v);
  return isString(u) ? std::string(asString(u)->view()) : vm.show(v, true);
}

Value assertion(VM& vm, Value* a, int n) {
  if (unwrapAttached(a[0]).isTruthy()) return Value::voidValue();
  vm.runtimeError(n == 2 ? "assertion failed: " + messageText(vm, a[1])
                         : std::string("assertion failed"));
}

Value disasm(VM& vm, Value* a, int) {
  Value f = unwrapAttached(a[0]);
  if (!isClosure(f)) vm.typeError("disasm", 0, "compiled procedure", a[0]);
  emit(vm, vm.disassemble(asClosure(f)->proto));
  return Value::voidValue();
}

// (gc-stats) → (live-objects live-bytes collections peak-bytes total-allocated-bytes)
Value gcStats(VM& vm, Value*, int) {
  GcStats s = vm.gcStats();
  Value xs[] = {Value::number(static_cast<double>(s.liveObjects)),
                Value::number(static_cast<double>(s.liveBytes)),
                Value::number(static_cast<double>(s.collections)),
                Value::number(static_cast<double>(s.peakBytes)),
                Value::number(static_cast<double>(s.totalAllocatedBytes))};
  return vm.list(xs, 5);
}

// (exit [status]): ends the run, as R7RS's exit: no argument or #t is status 0, #f is 1,
// an integer from 0 to 255 is itself. It unwinds like an error of kind Exit (error.h):
// the command line exits with the status, the REPL leaves, the C API returns DLAM_EXIT.
Value exitRun(VM& vm, Value* a, int n) {
  int code = 0;
  if (n == 1) {
    Value v = untagged(unwrapAttached(a[0]));  // (tagged in differentiated code)
    if (v.isBool()) {
      code = v.isFalse() ? 1 : 0;
    } else if (v.isNumber() && v.asNumber() >= 0 && v.asNumber() <= 255 &&
               v.asNumber() == static_cast<int>(v.asNumber())) {
      code = static_cast<int>(v.asNumber());
    } else {
      vm.typeError("exit", 0, "integer from 0 to 255 or boolean", a[0]);
    }
  }
  Error e(ErrorKind::Exit, "exit " + std::to_string(code));
  e.exitCode = code;
  throw e;
}

// (gc-reset-peak): starts a new peak measurement from the bytes live now.
Value gcResetPeak(VM& vm, Value*, int) {
  vm.resetPeak();
  return Value::voidValue();
}

// (current-second): seconds since the epoch (UTC, R7RS's TAI approximated by UTC).
Value currentSecond(VM&, Value*, int) {
  auto d = std::chrono::system_clock::now().time_since_epoch();
  return Value::number(std::chrono::duration<double>(d).count());
}

// (current-jiffy): microseconds of a monotonic clock from an arbitrary start, exact in
// a double for 285 years; (jiffies-per-second) is 10^6.
Value currentJiffy(VM&, Value*, int) {
  auto d = std::chrono::steady_clock::now().time_since_epoch();
  return Value::number(
      static_cast<double>(std::chrono::duration_cast<std::chrono::microseconds>(d).count()));
}

Value jiffiesPerSecond(VM&, Value*, int) { return Value::number(1e6); }

}  // namespace

void openIoPrimitives(Registrar& r) {
  VM& vm = r.vm;
  vm.defineNative("void", voidValue, 0, 0);
  r.define(NativeId::Display, display);
  r.define(NativeId::Write, write);
  r.define(NativeId::Newline, newline);
  r.define(NativeId::Print, print);
  r.define(NativeId::Assert, assertion);
  vm.defineNative("exit", exitRun, 0, 1);
  vm.defineNative("disasm", disasm, 1, 1);
  vm.defineNative("gc-stats", gcStats, 0, 0);
  vm.defineNative("gc-reset-peak", gcResetPeak, 0, 0);
  vm.defineNative("current-second", currentSecond, 0, 0);
  vm.defineNative("current-jiffy", currentJiffy, 0, 0);
  vm.defineNative("jiffies-per-second", jiffiesPerSecond, 0, 0);
}

}  // namespace dlam::prim
