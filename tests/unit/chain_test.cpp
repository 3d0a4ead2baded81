// chain_test.cpp — long chains of conditionals (cond, case, and, or, else-if chains
// of if) through every pass: the expander, the code generator and the reverse
// transform walk them with loops, so 10^4 clauses compile, run and differentiate
// (to second order), while truly nested source still gives the clean "nested too
// deeply" error. The sources are generated here, too large to keep as files.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "dlam/compiler.h"
#include "dlam/stdlib.h"
#include "dlam/vm.h"

namespace {

using dlam::VM;

class Chain : public ::testing::Test {
 protected:
  Chain() { dlam::openStdlib(vm); }

  void define(const std::string& code) { dlam::evalSource(vm, code, "<chain>"); }
  std::string show(const std::string& code) {
    return vm.show(dlam::evalSource(vm, code, "<chain>"));
  }

  // The error evaluating `code` gives, formatted with its location ("" if none).
  std::string error(const std::string& code) {
    try {
      dlam::evalSource(vm, code, "<chain>");
    } catch (const dlam::Error& e) {
      return e.format();
    }
    return "";
  }

  // part(0) part(1) ... part(n - 1), separated by spaces.
  template <class Part>
  static std::string parts(int n, Part part) {
    std::string s;
    for (int k = 0; k < n; ++k) s += part(k) + " ";
    return s;
  }
  static std::string num(int k) { return std::to_string(k); }

  // The first and second derivatives of the function named f at x, as shown.
  using Derivatives = std::pair<std::string, std::string>;
  Derivatives derivatives(const std::string& f, const std::string& x) {
    return {show("((derivative " + f + ") " + x + ")"),
            show("((derivative (derivative " + f + ")) " + x + ")")};
  }

  VM vm;
};

constexpr int kClauses = 10000;

TEST_F(Chain, CondOfTenThousandClauses) {
  define("(define (f x) (cond " +
         parts(kClauses, [](int k) { return "((= x " + num(k) + ") " + num(3 * k) + ")"; }) +
         "(else -1)))");
  EXPECT_EQ(show("(f 0)"), "0");
  EXPECT_EQ(show("(f 5000)"), "15000");
  EXPECT_EQ(show("(f 9999)"), "29997");
  EXPECT_EQ(show("(f -5)"), "-1");
  // Not in tail position, without an else.
  define("(define (g x) (list (cond " +
         parts(kClauses, [](int k) { return "((= x " + num(k) + ") " + num(k) + ")"; }) + ")))");
  EXPECT_EQ(show("(g 9998)"), "(9998)");
  EXPECT_EQ(show("(eq? (car (g 10000)) (if #f #f))"), "#t");
}

TEST_F(Chain, CaseOfTenThousandClauses) {
  define(
      "(define (f x) (case x " +
      parts(kClauses,
            [](int k) { return "((" + num(k) + " " + num(k + kClauses) + ") " + num(k) + ")"; }) +
      "(else 'none)))");
  EXPECT_EQ(show("(f 9998)"), "9998");
  EXPECT_EQ(show("(f 19999)"), "9999");
  EXPECT_EQ(show("(f 1)"), "1");
  EXPECT_EQ(show("(f 'x)"), "none");
}

TEST_F(Chain, AndAndOrOfTenThousandOperands) {
  define("(define (all x) (and " + parts(kClauses, [](int k) { return "(> x " + num(k) + ")"; }) +
         "x))");
  define("(define (any x) (or " + parts(kClauses, [](int k) { return "(= x " + num(k) + ")"; }) +
         "'no))");
  EXPECT_EQ(show("(all 10000)"), "10000");
  EXPECT_EQ(show("(all 5000.5)"), "#f");
  EXPECT_EQ(show("(all -1)"), "#f");
  EXPECT_EQ(show("(any 9999)"), "#t");
  EXPECT_EQ(show("(any 10000)"), "no");
  // 4 * 10^4 comparisons: the compare-and-jumps of the outer operands cannot reach
  // their else branches, compiled after the whole chain (they test a register).
  define("(define (all4 x) (and " +
         parts(4 * kClauses, [](int k) { return "(> x " + num(k) + ")"; }) + "#t))");
  EXPECT_EQ(show("(all4 39999.5)"), "#t");
  EXPECT_EQ(show("(all4 30000.5)"), "#f");
  EXPECT_EQ(show("(all4 100.5)"), "#f");
  EXPECT_EQ(show("(all4 39998.5)"), "#f");
}

TEST_F(Chain, ElseIfChainOfTenThousandIfs) {
  define("(define (f x) " +
         parts(kClauses, [](int k) { return "(if (= x " + num(k) + ") " + num(k) + ""; }) + "-1" +
         std::string(kClauses, ')') + ")");
  EXPECT_EQ(show("(f 9998)"), "9998");
  EXPECT_EQ(show("(f 0)"), "0");
  EXPECT_EQ(show("(f 12345)"), "-1");
}

// g(x) = (k + 1) x^2 on [k - 1, k), 3 x^2 from kClauses on: g' = 2 (k + 1) x, g'' = 2 (k + 1).
TEST_F(Chain, CondDifferentiatedToSecondOrder) {
  define(
      "(define (g x) (cond " +
      parts(kClauses, [](int k) { return "((< x " + num(k) + ") (* " + num(k + 1) + " x x))"; }) +
      "(else (* 3 x x))))");
  EXPECT_EQ(derivatives("g", "0.5"), Derivatives("2", "4"));
  EXPECT_EQ(derivatives("g", "5000.5"), Derivatives("50025002", "10004"));  // 2 * 5002 * 5000.5
  EXPECT_EQ(derivatives("g", "10000.5"), Derivatives("60003", "6"));
  EXPECT_EQ(show("((gradient g) -1)"), "-2");
}

// The chain inside an expression, its branches using a variable bound before it:
// h(x) = 1 + (k + 1) y with y = x^2, so h' = 2 (k + 1) x and h'' = 2 (k + 1).
TEST_F(Chain, CondNotInTailPositionDifferentiated) {
  define("(define (h x) (let ((y (* x x))) (+ 1 (cond " +
         parts(kClauses, [](int k) { return "((< x " + num(k) + ") (* " + num(k + 1) + " y))"; }) +
         "(else (* 3 y))))))");
  EXPECT_EQ(show("(h 2.5)"), "26");
  EXPECT_EQ(derivatives("h", "2.5"), Derivatives("20", "8"));
  EXPECT_EQ(derivatives("h", "9998.5"), Derivatives("199970000", "20000"));
}

TEST_F(Chain, TrulyNestedSourceStillFailsCleanly) {
  const int deep = 100000;
  std::string sum;
  for (int k = 0; k < deep; ++k) sum += "(+ 1 ";
  sum += "0" + std::string(deep, ')');
  std::string e = error(sum);
  EXPECT_NE(e.find("<chain>:1:"), std::string::npos) << e;
  EXPECT_NE(e.find("nested too deeply"), std::string::npos) << e;
  // A cond nested in the body of the last clause of another is nesting, not a chain.
  std::string conds;
  for (int k = 0; k < deep; ++k) conds += "(cond ((= x " + num(k) + ") " + num(k) + ") (else ";
  conds += "-1" + std::string(2 * deep, ')');
  e = error("(lambda (x) " + conds + ")");
  EXPECT_NE(e.find("<chain>:1:"), std::string::npos) << e;
  EXPECT_NE(e.find("nested too deeply"), std::string::npos) << e;
}

}  // namespace
