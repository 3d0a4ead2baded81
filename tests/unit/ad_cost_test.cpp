// ad_cost_test.cpp — what a gradient costs in allocations, measured with the VM's
// allocation counter: the properties of the reverse transform that the benchmarks rely
// on, as tests that fail when the transform regresses (the values themselves are
// checked by the lang suite).
//
// Numeric primitives run in the forward sweep on primal (untagged) values, so the
// arithmetic of a function body allocates nothing in either sweep: only its interface
// (the tagged result, the backpropagator and the sensitivity lists) allocates.
#include <gtest/gtest.h>

#include <string>

#include "dlam/compiler.h"
#include "dlam/stdlib.h"
#include "dlam/vm.h"

namespace {

using dlam::Value;
using dlam::VM;

// A function of x and y whose body is a sum of `ops` products (flat, not nested:
// 2 ops - 1 arithmetic operations in all).
std::string chain(int ops) {
  std::string body = "(+";
  for (int i = 0; i < ops; ++i) body += " (* x y)";
  return "(define (chain" + std::to_string(ops) + " x y) " + body + "))";
}

// The bytes allocated by running `code` the second time (the first transforms and
// compiles what it differentiates). After a collection the next one is megabytes
// away: the growth of the live bytes is what the run allocated.
uint64_t bytesOfSecondRun(VM& vm, const std::string& code) {
  dlam::evalSource(vm, code, "<cost>");
  vm.collectGarbage();
  uint64_t before = vm.gcStats().liveBytes;
  dlam::evalSource(vm, code, "<cost>");
  return vm.gcStats().liveBytes - before;
}

// The bytes allocated by one gradient of (chainN 1.5 0.75).
uint64_t bytesPerGradient(VM& vm, int ops) {
  std::string name = "chain" + std::to_string(ops);
  dlam::evalSource(vm, chain(ops), "<cost>");
  dlam::evalSource(
      vm, "(define g-" + name + " (gradient (lambda (v) (" + name + " (car v) (cadr v)))))",
      "<cost>");
  return bytesOfSecondRun(vm, "(g-" + name + " '(1.5 0.75))");
}

TEST(AdCost, ArithmeticInABodyAllocatesNothingPerOperation) {
  VM vm;
  dlam::openStdlib(vm);
  uint64_t small = bytesPerGradient(vm, 3);
  uint64_t large = bytesPerGradient(vm, 300);
  // Tagging each intermediate result (a reverse-tagged box per operation in the
  // forward sweep) would cost at least 597 * 16 bytes more.
  EXPECT_LT(large, small + 300 * 4)
      << "3 products: " << small << " bytes, 300 products: " << large << " bytes";
}

TEST(AdCost, TheGradientOfTheChainIsRight) {
  VM vm;
  dlam::openStdlib(vm);
  dlam::evalSource(vm, chain(5), "<cost>");
  // chain5 = 5 x y: d/dx = 5 y, d/dy = 5 x
  Value g = dlam::evalSource(vm, "((gradient (lambda (v) (chain5 (car v) (cadr v)))) '(1.5 0.75))",
                             "<cost>");
  EXPECT_EQ(vm.show(g), "(3.75 7.5)");
}

// `text` with every N replaced by n.
std::string sized(std::string text, const std::string& n) {
  for (size_t p; (p = text.find('N')) != std::string::npos;) text.replace(p, 1, n);
  return text;
}

// The bytes per element one gradient of `fn` allocates: fn is defined by `def` (with N
// standing for the size), applied to `arg`, at sizes 1000 and 2000.
uint64_t bytesPerElement(const std::string& def, const std::string& arg) {
  VM vm;
  dlam::openStdlib(vm);
  auto at = [&](int n) {
    std::string sn = std::to_string(n);
    dlam::evalSource(vm, sized(def + "(define g-N (gradient fn-N))", sn), "<cost>");
    return bytesOfSecondRun(vm, "(g-" + sn + " " + sized(arg, sn) + ")");
  };
  return (at(2000) - at(1000)) / 1000;
}

// bytesPerElement of fn applied to (iota N).
uint64_t bytesPerElementOfIota(const std::string& def) {
  return bytesPerElement(def + "(define xs-N (iota N))", "xs-N");
}

// The gradient of fn-1, as defined by `def` (N standing for the size), at `arg`, printed.
std::string gradientOfFn1(const std::string& def, const std::string& arg) {
  VM vm;
  dlam::openStdlib(vm);
  dlam::evalSource(vm, sized(def, "1"), "<cost>");
  return vm.show(dlam::evalSource(vm, "((gradient fn-1) " + arg + ")", "<cost>"));
}

TEST(AdCost, ALoopsClosureSensitivityCostsNothing) {
  uint64_t perElement = bytesPerElementOfIota(
      "(define (fn-N x) (let loop ((x x) (acc 0))"
      "  (if (null? x) acc (loop (cdr x) (+ acc (* (car x) (car x)))))))");
  // Per iteration: the backpropagator closure and the tagged accumulator forward, the
  // gradient's pair backward (128 bytes). The sensitivity of the loop closure itself (a
  // list of zeros) is a constant: built per iteration it would add at least a pair, and
  // distributing it over the recursive group at the end (%rec-fix) more: 400 bytes
  // before. The backpropagator's (cons fbar (xbar accbar)) goes to its caller as three
  // registers (RETURNN, CALL split bp + 2) rather than as three pairs, and %materialize
  // copies no pair of the gradient list: 256 bytes before.
  EXPECT_LE(perElement, 160u) << perElement << " bytes per element";
}
TEST(AdCost, ALoopCapturingAVariableKeepsItsClosureSensitivityFlat) {
  uint64_t perElement = bytesPerElement(
      "(define (fn-N v) (let ((k (car v))) (let loop ((l (cdr v)) (acc 0))"
      "  (if (null? l) acc (loop (cdr l) (+ acc (* k (car l))))))))"
      "(define v-N (cons 2 (iota N)))",
      "v-N");
  // The loop's closure sensitivity (that of k) is added up as the backward pass goes:
  // a chain of nested closure sensitivities, one level per iteration, distributed at
  // the end by %rec-fix, cost 400 bytes per element; 288 with the argument
  // sensitivities returned as a list, 192 now.
  EXPECT_LE(perElement, 224u) << perElement << " bytes per element";
}

TEST(AdCost, ATailIfUsingTheBindingsBeforeItMakesNoJoin) {
  uint64_t perElement = bytesPerElementOfIota(
      "(define (fn-N x) (let loop ((x x) (acc 0)) (let ((a (* 0.5 acc)))"
      "  (if (null? x) a (loop (cdr x) (+ a (car x)))))))");
  // The branches use a, computed before the if: each branch's backpropagator repeats
  // a's reverse step, and the if needs no join (a closure, two pairs and a call per
  // iteration in each sweep): 352 bytes per element with the join, 128 without.
  EXPECT_LE(perElement, 160u) << perElement << " bytes per element";
}

TEST(AdCost, AListWalkedByCarAndCadrBuildsOneGradientPairPerElement) {
  const std::string walk =
      "(define (fn-N x) (let loop ((x x) (acc 0))"
      "  (if (null? (cdr x)) acc (loop (cdr x) (+ acc (* (car x) (cadr x)))))))";
  uint64_t perElement = bytesPerElementOfIota(walk);
  // (cdr x) gets a sensitivity from (cadr x), a pair (b̄ . 0) built at transform time,
  // and one from the recursive call, a list: their sum is taken apart, the list's car
  // added to b̄ and its cdr kept, so no pair is made for (b̄ . 0) and no plus walks it.
  // With that pair: 192 bytes per element; without, 160 (the closure, the tagged
  // accumulator, the two pairs of x̄ = (ā (b̄ + ...) ...)).
  EXPECT_LE(perElement, 160u) << perElement << " bytes per element";
  // The gradient itself: element i gets x_{i-1} + x_{i+1}.
  EXPECT_EQ(gradientOfFn1(walk, "'(1 2 3 4 5)"), "(2 4 6 8 4)");
  EXPECT_EQ(gradientOfFn1(walk, "'(7)"), "(0)");
}

TEST(AdCost, TheSensitivityOfReverseIsGatheredInOnePass) {
  const std::string weighted =
      "(define (fn-N x) (let loop ((l (reverse x)) (i 1) (acc 0))"
      "  (if (null? l) acc (loop (cdr l) (+ i 1) (+ acc (* i (car l)))))))";
  uint64_t perElement = bytesPerElementOfIota(weighted);
  // The reversed list's pair forward; the loop's closure, tagged accumulator and
  // gradient pair; and the gradient taken back through reverse (%sens-reverse), one
  // pair per element. Taking the first (length l) sensitivities as a list, then
  // reversing it, made two: 240 bytes per element, 176 in one pass.
  EXPECT_LE(perElement, 176u) << perElement << " bytes per element";
  // Element i of x is multiplied by n - i.
  EXPECT_EQ(gradientOfFn1(weighted, "'(5 6 7 8)"), "(4 3 2 1)");
}

TEST(AdCost, AHessianVectorProductTakesTransformedResultsApartInRegisters) {
  // Reverse over reverse: the code transformed twice calls functions transformed
  // twice, which return a rep result whose value is itself a rep result (the loop's),
  // and transformed backpropagators, which return a backpropagator's result with its
  // own backpropagator. The callers take the values apart too (CALL split rep of rep,
  // split rep of bp + k), the callees return the parts (RETURNR): no pair is made for
  // them. And the backpropagators of the second level, which take their sensitivity
  // lists apart, take them in parts, which their callers pass without making the
  // lists (CALLP). 1152 bytes per element when only the outer pair was split, 1024
  // with the results split through, 896 with the arguments in parts too. The first
  // backpropagator sums the two sensitivities of x_i that products gave with +, not
  // plus: transformed again, the sum is taken on primal values, with neither operand
  // nor the sum tagged (864). The second level's backpropagator rebuilt a sensitivity
  // it had taken apart, (cons (%scar s) (%scdr s)), to pass it on: it passes s (832).
  // A sum with one arithmetic term is a sum of numbers too, + rather than plus (816).
  // The transformed backpropagators keep the numbers they capture as primal values
  // (primalFree): the code that makes them no longer tags t and u for them (784). A
  // tagged sensitivity plus a tagged arithmetic result is one tag of the sum (768).
  // Arrays: the first backpropagator sums sensitivities with %sens+, which sums an
  // operand that carries a broadcast's axes to the shape the two have in common, so its
  // reverse must give each operand those axes back (%unreduce) and needs the operand's
  // shape. Read from the primals the products that made the operand keep anyway, it
  // costs one more value kept per element, the sensitivity of x_i+1 that the callee
  // returned, whose shape nothing else here shows (808). The sum's sensitivity is first
  // summed to the sum's own shape (it may carry axes of a broadcast of its own, which
  // the operands' axes must not be taken for: ad_rules.cpp, ownShape), which keeps the
  // sum too: one more value per element (824). The transformed backpropagators no
  // longer keep captured numbers as primal values: that gave wrong derivatives where a
  // program's own (*j (*j f)) met two more levels (tests/lang/ad/program_jj_nested.dlam),
  // and cost no instructions to drop; t and u are tagged for them again (856).
  VM vm;
  dlam::openStdlib(vm);
  dlam::evalSource(vm,
                   "(define (rosen x) (let loop ((x x) (acc 0)) (if (null? (cdr x)) acc"
                   "  (let* ((a (car x)) (b (cadr x)) (t (- b (* a a))) (u (- 1 a)))"
                   "    (loop (cdr x) (+ acc (* 100 (* t t)) (* u u)))))))"
                   "(define (dot a b) (let loop ((a a) (b b) (acc 0))"
                   "  (if (null? a) acc (loop (cdr a) (cdr b) (+ acc (* (car a) (car b)))))))"
                   "(define grad-rosen (gradient rosen))"
                   "(define (hvp x v) ((gradient (lambda (y) (dot (grad-rosen y) v))) x))"
                   "(define x-1000 (iota 1000)) (define v-1000 (map (lambda (i) 1) x-1000))"
                   "(define x-2000 (iota 2000)) (define v-2000 (map (lambda (i) 1) x-2000))",
                   "<cost>");
  uint64_t perElement =
      (bytesOfSecondRun(vm, "(hvp x-2000 v-2000)") - bytesOfSecondRun(vm, "(hvp x-1000 v-1000)")) /
      1000;
  EXPECT_LE(perElement, 856u) << perElement << " bytes per element";
  // H v for f = sum 100 (x_{i+1} - x_i^2)^2 + (1 - x_i)^2 at x = (0 1 2 3), v = (1 1 1 1):
  // H_ii = 800 x_i^2 - 400 (x_{i+1} - x_i^2) + 2 (+ 200 past the first), H_i,i+1 = -400 x_i.
  EXPECT_EQ(vm.show(dlam::evalSource(vm, "(hvp '(0 1 2 3) '(1 1 1 1))", "<cost>")),
            "(-398 202 2602 -600)");
}

TEST(AdCost, ADotWithAConstantOperandMakesOneProductOnTheWayBack) {
  // (dot X w) with X a global: the way back makes X^T g for w (with the transpose
  // passed to dgemm, not copied) and not g w^T for X, which nothing would use. The
  // same X captured by the function instead is not a constant (the function's
  // sensitivity is that of what it captures), and gets its product. An array of 100 x
  // 100 is 80000 bytes: the forward product, the sensitivity put back over the sum and
  // w's make three (242 kB), four captured (322 kB). With X's product and the two
  // transposes copied, six (482 kB).
  VM vm;
  dlam::openStdlib(vm);
  dlam::evalSource(
      vm,
      "(define X (build-array '(100 100) (lambda (i j) (* 0.01 (- i j)))))"
      "(define W (build-array '(100 100) (lambda (i j) (* 0.02 (+ i j)))))"
      "(define g-global (gradient (lambda (w) (sum (dot X w)))))"
      "(define g-captured (let ((x (+ X 0))) (gradient (lambda (w) (sum (dot x w))))))",
      "<cost>");
  uint64_t global = bytesOfSecondRun(vm, "(g-global W)");
  uint64_t captured = bytesOfSecondRun(vm, "(g-captured W)");
  EXPECT_LT(global, 4 * 80000u) << global << " bytes";
  EXPECT_GT(captured, global + 70000) << captured << " bytes captured, " << global << " global";
  // Both the same gradient: X^T 1, the column sums of X in every column.
  EXPECT_EQ(vm.show(dlam::evalSource(vm, "(equal? (g-global W) (g-captured W))", "<cost>")), "#t");
}

}  // namespace
