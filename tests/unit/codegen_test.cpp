// codegen_test.cpp — properties of the code generator (compiler/src/codegen.cpp)
// seen in the bytecode it emits, with the values the code computes.
#include <gtest/gtest.h>

#include <string>

#include "dlam/compiler.h"
#include "dlam/stdlib.h"
#include "dlam/vm.h"

namespace {

using dlam::Value;
using dlam::VM;

std::string show(VM& vm, const std::string& code) { return vm.show(dlam::evalSource(vm, code, "<codegen>")); }

// `n` calls (f 1) in a row: more than 32767 instructions for n > 11000.
std::string calls(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += " (f 1)";
  return s;
}

TEST(Codegen, AComparisonWhoseThenBranchIsTooFarForItsJumpIsCompiledAgain) {
  // The fused compare-and-jump has a 16-bit offset: past it the `if` is compiled
  // again with a plain test, and the branch's variables get their registers anew.
  VM vm;
  dlam::openStdlib(vm);
  dlam::evalSource(vm,
                   "(define (f x) x) (define (h a b c) (list a b c))"
                   "(define (g x) (if (< x 2) (let* ((a (* x 10)) (b (+ x 5)) (c (cons a b)))" +
                       calls(12000) + " (h (car c) b (cdr c))) 0))",
                   "<codegen>");
  EXPECT_EQ(show(vm, "(g 1)"), "(10 6 6)");
  EXPECT_EQ(show(vm, "(g 3)"), "0");
}

}  // namespace
