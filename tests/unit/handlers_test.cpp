// handlers_test.cpp — the VM's state around errors a program catches (vm/src/handlers.cpp):
// a caught error that ended a top-level gradient resets the collector's gradient
// boundary, the frames and the stack top are back where the handler was, and an
// uncaught error after caught ones is located and traced as before.
#include <gtest/gtest.h>

#include <string>

#include "dlam/compiler.h"
#include "dlam/stdlib.h"
#include "dlam/vm.h"

namespace {

std::string eval(dlam::VM& vm, const std::string& code) {
  return vm.show(dlam::evalSource(vm, code, "handlers.dlam"));
}

TEST(Handlers, CaughtErrorInGradientResetsTheGradientBoundary) {
  dlam::VM vm;
  vm.output = [](std::string_view) {};
  dlam::openStdlib(vm);
  EXPECT_TRUE(vm.tapeState().isFalse());
  // The forward pass raises: %gradient-end never runs; the handler puts back the state
  // it was entered with (no gradient begun).
  EXPECT_EQ(eval(vm, "(guard (e (#t e)) ((gradient (lambda (x) (raise 'f))) 1))"), "f");
  EXPECT_TRUE(vm.tapeState().isFalse());
  EXPECT_EQ(
      eval(vm,
           "(guard (e (#t (error-object-message e)))"
           "  ((gradient (custom-vjp (lambda (x) x) (lambda (x) (cons x (lambda (g) (car g))))))"
           "   1))"),
      "\"car: expected pair as argument 1, got 1\"");
  EXPECT_TRUE(vm.tapeState().isFalse());
  // A handler inside a gradient keeps the gradient's boundary (it was entered after it).
  EXPECT_EQ(eval(vm,
                 "(list ((gradient (lambda (x) (guard (e (#t (* 3 x))) (raise 'g)))) 1)"
                 "      ((gradient (lambda (x) (* x x))) 4))"),
            "(3 8)");
  EXPECT_TRUE(vm.tapeState().isFalse());
  EXPECT_TRUE(vm.idle());
}

TEST(Handlers, CaughtErrorsLeaveNoFramesAndUncaughtOnesAreTraced) {
  dlam::VM vm;
  vm.output = [](std::string_view) {};
  dlam::openStdlib(vm);
  eval(vm, "(define (deep n) (if (= n 0) (car n) (+ 1 (deep (- n 1)))))");
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(eval(vm, "(guard (e ((error-object? e) 'caught)) (deep 1000))"), "caught");
  EXPECT_TRUE(vm.idle());
  try {
    dlam::evalSource(vm, "(define unused 0)\n(guard (e ((string? e) e)) (deep 30))",
                     "handlers.dlam");
    ADD_FAILURE() << "no error";
  } catch (const dlam::Error& e) {
    EXPECT_EQ(e.message, "car: expected pair as argument 1, got 0");
    EXPECT_EQ(e.file, "handlers.dlam");
    EXPECT_EQ(e.loc.line, 1u);      // in deep, where car failed
    ASSERT_GE(e.trace.size(), 2u);  // deep at the car, then the 30 calls of deep
    EXPECT_EQ(e.trace[0].function, "deep");
    EXPECT_EQ(e.trace[1].function, "deep");
    EXPECT_EQ(e.trace[1].repeat, 30u);
  }
  vm.recover();
  EXPECT_EQ(eval(vm, "(guard (e (#t (list e))) (raise 1))"), "(1)");
}

// A host calling a dlam procedure that raises: a handler inside the call catches it;
// none catching, the error comes out of VM::call as any error does.
TEST(Handlers, ThroughHostCalls) {
  dlam::VM vm;
  vm.output = [](std::string_view) {};
  dlam::openStdlib(vm);
  eval(vm, "(define (safe f) (guard (e (#t (list 'caught e))) (f)))");
  eval(vm, "(define (boom) (raise 'b))");
  dlam::Value boom = vm.global("boom");
  EXPECT_EQ(vm.show(vm.call(vm.global("safe"), &boom, 1)), "(caught b)");
  try {
    vm.call(boom, nullptr, 0);
    ADD_FAILURE() << "no error";
  } catch (const dlam::Error& e) {
    EXPECT_EQ(e.message, "uncaught exception: b");
  }
  vm.recover();
  EXPECT_TRUE(vm.idle());
}

}  // namespace
