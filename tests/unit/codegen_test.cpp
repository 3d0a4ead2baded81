// codegen_test.cpp — properties of the code generator (compiler/src/codegen.cpp)
// seen in the bytecode it emits, with the values the code computes.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <set>
#include <sstream>
#include <string>

#include "dlam/compiler.h"
#include "dlam/opcodes.h"
#include "dlam/stdlib.h"
#include "dlam/vm.h"

namespace {

using dlam::Value;
using dlam::VM;

// Each test has its own VM with the standard library, and the listing of the last
// function `moves` looked at, for failure messages.
class Codegen : public ::testing::Test {
 protected:
  Codegen() { dlam::openStdlib(vm); }

  std::string show(const std::string& code) {
    return vm.show(dlam::evalSource(vm, code, "<codegen>"));
  }

  // The error evaluating `code` raises (a failure, and an empty error, if none).
  dlam::Error errorOf(const std::string& code) {
    try {
      show(code);
    } catch (const dlam::Error& e) {
      return e;
    }
    ADD_FAILURE() << "no error from " << code;
    return dlam::Error(dlam::ErrorKind::Runtime, "");
  }

  // The MOVEs of the function `code` evaluates to (its own code, not its children's).
  size_t moves(const std::string& code) {
    Value f = dlam::evalSource(vm, code, "<codegen>");
    if (!dlam::isClosure(f)) {
      listing = "not a closure: " + vm.show(f);
      return SIZE_MAX;
    }
    const dlam::Proto* p = dlam::asClosure(f)->proto;
    listing = vm.disassemble(p, false);
    size_t n = 0;
    for (dlam::Instr ins : p->code) n += dlam::instr::op(ins) == dlam::Op::MOVE;
    return n;
  }

  VM vm;
  std::string listing;
};

// The proto of the closure `code` evaluates to (listing set to its code).
const dlam::Proto* protoOf(VM& vm, const std::string& code, std::string& listing) {
  Value f = dlam::evalSource(vm, code, "<codegen>");
  if (!dlam::isClosure(f)) return nullptr;
  const dlam::Proto* p = dlam::asClosure(f)->proto;
  listing = vm.disassemble(p, false);
  return p;
}

// The sum of the squares of a list's elements, by a named let (two tests transform it).
const std::string kSumSq =
    "(define (sumsq l) (let loop ((l l) (acc 0)) (if (null? l) acc (loop (cdr l) (+ acc (* (car l) "
    "(car l)))))))";

// The extended Rosenbrock function of a list, by a named let (as bench/dlam/rosenbrock.dlam).
const std::string kRosen =
    "(define (rosen x) (let loop ((x x) (acc 0)) (if (null? (cdr x)) acc"
    "  (let* ((a (car x)) (b (cadr x)) (t (- b (* a a))) (u (- 1 a)))"
    "    (loop (cdr x) (+ acc (* 100 (* t t)) (* u u)))))))";

// Whether a line of the listing is an instruction `op` whose operands end with `end`.
bool hasInstr(const std::string& listing, const std::string& op, const std::string& end) {
  std::istringstream in(listing);
  for (std::string line; std::getline(in, line);)
    if (line.find("  " + op + " ") != std::string::npos && line.size() >= end.size() &&
        line.compare(line.size() - end.size(), end.size(), end) == 0)
      return true;
  return false;
}

size_t countOps(const dlam::Proto* p, dlam::Op op) {
  size_t n = 0;
  for (size_t i = 0; i < p->code.size(); ++i) {
    dlam::Instr ins = p->code[i];
    n += dlam::instr::op(ins) == op;
    i += dlam::instr::listWords(ins);  // RETURNN's and RETURNR's register lists
  }
  return n;
}

// The top byte of an instruction, read through its accessors (opcodes.h): each meaning
// apart from the fields below it.
TEST(InstructionWord, TopByteAccessors) {
  namespace instr = dlam::instr;
  using dlam::Op;
  dlam::Instr add = instr::withLevel(instr::make(Op::ADD, 1, 2, 3), 5);
  EXPECT_EQ(instr::level(add), 5u);
  EXPECT_TRUE(instr::hasLevel(add));
  EXPECT_FALSE(instr::swapped(add));
  EXPECT_EQ(instr::op(add), Op::ADD);
  EXPECT_EQ(instr::c(add), 3u);
  dlam::Instr mulk = instr::make(Op::MULK, 1, 2, 0xffff) | instr::kSwapped;
  EXPECT_TRUE(instr::swapped(mulk));
  EXPECT_FALSE(instr::hasLevel(mulk));
  EXPECT_EQ(instr::c(mulk), 0xffffu);
  dlam::Instr call = instr::withRawArgs(instr::make(Op::CALL, 4, 8, 0), 0x81);
  EXPECT_EQ(instr::rawArgs(call), 0x81u);
  EXPECT_EQ(instr::b(call), 8u);
  dlam::Instr ret = instr::make(Op::RETURNN, 1, 5, 2) | instr::kTailK;
  EXPECT_TRUE(instr::tailIsK(ret));
  EXPECT_FALSE(instr::headIsK(ret));
  EXPECT_EQ(instr::listWords(ret), 2u);
  EXPECT_EQ(instr::sBx(instr::withSBx(instr::makeBx(Op::JMPIFNOT, 7, 0), -3)), -3);
  EXPECT_EQ(instr::a(instr::withSBx(instr::makeBx(Op::JMPIFNOT, 7, 0), -3)), 7u);
}

TEST_F(Codegen, AFunctionTakingItsArgumentApartAlongAListTakesItInParts) {
  // A backpropagator's parameter, a list of sensitivities taken apart with %scar and
  // %scdr: its parts (here the first element and the rest) are its registers from
  // the entry on, and no %scar or %scdr is left in its code.
  dlam::evalSource(vm, "(define (take2 s) (list (%scar s) (%scdr s)))", "<codegen>");
  const dlam::Proto* p = protoOf(vm, "take2", listing);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->paramSplit, 2u) << listing;
  EXPECT_EQ(countOps(p, dlam::Op::SCAR) + countOps(p, dlam::Op::SCDR), 0u) << listing;
  // Called with the list whole: taken apart at the entry, as %scar and %scdr would
  // (a zero stands for a pair of zeros), with their error, located at the function.
  EXPECT_EQ(show("(take2 (list 1 2 3))"), "(1 (2 3))");
  EXPECT_EQ(show("(take2 %Z)"), "(0 0)");
  EXPECT_EQ(show("(take2 (zero '(2 3)))"), "(0 (0))");
  dlam::Error e = errorOf("(take2 5)");
  EXPECT_NE(e.message.find("backpropagator: expected a pair sensitivity"), std::string::npos)
      << e.message;
  EXPECT_EQ(e.loc.line, 1u);
  EXPECT_EQ(e.loc.col, 1u);
  EXPECT_EQ(show("(take2 '(7 8 9))"), "(7 (8 9))");  // the VM goes on
}

TEST_F(Codegen, TransformedCodePassesAListMadeForACallInParts) {
  // In code the reverse transform made, (cons a (cons b r)) made for a call only is
  // passed as its parts (CALLP) and no pair is made for it: here the backpropagators
  // of code transformed twice pass their callees' sensitivity lists. Other code makes
  // the list where it stands (the VM making it would cost more).
  dlam::evalSource(vm,
                   "(define (take2 s) (list (%scar s) (%scdr s)))"
                   "(define (c2 a r) (car (list (take2 (cons a r)))))" +
                       kSumSq,
                   "<codegen>");
  const dlam::Proto* p = protoOf(vm, "c2", listing);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(countOps(p, dlam::Op::CALLP), 0u) << listing;
  EXPECT_EQ(show("(c2 1 '(2 3))"), "(1 (2 3))");
  std::string twice = vm.disassemble(
      dlam::asClosure(dlam::evalSource(vm, "(*j (*j sumsq))", "<codegen>"))->proto, true);
  EXPECT_NE(twice.find("CALLP"), std::string::npos) << twice;
  // d2/dx_i dx_j of sum x^2 is 2 on the diagonal: H v = 2 v.
  EXPECT_EQ(show("((gradient (lambda (y) (let loop ((g ((gradient sumsq) y)) (v '(1 2 3)) (acc 0))"
                 "  (if (null? g) acc (loop (cdr g) (cdr v) (+ acc (* (car g) (car v)))))))) '(0.5 "
                 "-1 2))"),
            "(2 4 6)");
}

TEST_F(Codegen, AReturnedListsConstantHeadAndTailAreConstantOperands) {
  // A backpropagator's (cons fbar (x1 ... xk . tail)) with a constant fbar or tail:
  // RETURNN and RETURNR take them from the constants, with no LOADK before them.
  dlam::evalSource(vm, "(define (r2 a b) (cons '(0) (cons a (cons b '()))))" + kSumSq, "<codegen>");
  const dlam::Proto* p = protoOf(vm, "r2", listing);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(countOps(p, dlam::Op::RETURNN), 1u) << listing;
  EXPECT_EQ(countOps(p, dlam::Op::LOADK), 0u) << listing;
  EXPECT_NE(listing.find("RETURNN    (0) (r0 r1 . ())"), std::string::npos) << listing;
  EXPECT_EQ(show("(r2 1 2)"), "((0) 1 2)");
  EXPECT_EQ(show("(let ((l (r2 'x 'y))) (list (cdr l) (car l)))"), "((x y) (0))");
  // The loop's backpropagators return the loop closure's sensitivity, the constant (0),
  // and end their lists with '(); transformed twice, with their own backpropagators.
  std::string once =
      vm.disassemble(dlam::asClosure(dlam::evalSource(vm, "(*j sumsq)", "<codegen>"))->proto, true);
  EXPECT_NE(once.find("RETURNN    (0) ("), std::string::npos) << once;
  std::string twice = vm.disassemble(
      dlam::asClosure(dlam::evalSource(vm, "(*j (*j sumsq))", "<codegen>"))->proto, true);
  EXPECT_NE(twice.find("RETURNR    ((0) "), std::string::npos) << twice;
  EXPECT_EQ(show("((gradient sumsq) '(1 2 3))"), "(2 4 6)");
  EXPECT_EQ(show("((gradient (lambda (y) (car ((gradient sumsq) y)))) '(1 2 3))"), "(2 0 0)");
}

TEST_F(Codegen, ABackpropagatorFoldsTheNegationsOfSubtractions) {
  // The rule of - negates the subtrahend's sensitivity; each negation here goes into
  // an operation there anyway (ad_simplify.cpp): u = 1 - a gives a (* ū' -2) for the
  // product ū = 2 u ḡ, t = b - a² gives a² the factor -2 of (* a a)'s rule, and b's
  // sum t̄ + (-w̄) is t̄ - w̄. No NEG is left in the backpropagator, and the gradient
  // and a second derivative through it are the analytic ones: at a = 0.5, b = 2,
  // t = 1.75, u = 0.5, w = -0.5, f_a = -400 a t - 2 u + 6 = -345, f_b = 200 t - 2 = 348,
  // f_aa = 800 a² - 400 t + 2 = -498.
  dlam::evalSource(vm,
                   "(define (f a b) (let* ((t (- b (* a a))) (u (- 1 a)) (w (- (* 3 a) b)))"
                   "  (+ (* 100 (* t t)) (* u u) (* w 2))))",
                   "<codegen>");
  std::string once =
      vm.disassemble(dlam::asClosure(dlam::evalSource(vm, "(*j f)", "<codegen>"))->proto, true);
  EXPECT_EQ(once.find("NEG"), std::string::npos) << once;
  EXPECT_TRUE(hasInstr(once, "MULK", " -2")) << once;
  EXPECT_NE(once.find("SUB"), once.rfind("SUB")) << "one SUB forward, one backward: " << once;
  EXPECT_EQ(show("((gradient f) 0.5 2)"), "(-345 348)");
  EXPECT_EQ(show("((derivative (lambda (a) (car ((gradient f) a 2)))) 0.5)"), "-498");
  EXPECT_EQ(show("((gradient (lambda (b) (cadr ((gradient f) 0.5 b)))) 2)"), "200");
}

// The STARJs of a listing whose operand a JINV of the same function made.
size_t starJOfJInverse(const std::string& listing) {
  std::istringstream in(listing);
  std::set<std::string> inverted;  // registers a JINV wrote, in the current function
  size_t n = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("function ", 0) == 0) inverted.clear();
    std::istringstream words(line);
    std::string w, op, a, b;
    while (words >> w && w != "JINV" && w != "STARJ") {
    }
    if (w != "JINV" && w != "STARJ") continue;
    words >> a >> b;
    if (w == "JINV")
      inverted.insert(a);
    else
      n += inverted.count(b);
  }
  return n;
}

TEST_F(Codegen, ABackpropagatorGivesTheSensitivityItsPrimalWasTakenFrom) {
  // Transformed twice, Rosenbrock's backpropagator takes the primal of a tagged
  // sensitivity (JINV) to multiply with it, and the rule of *j-inverse gives that
  // primal's sensitivity back tagged (STARJ): (*j (*j-inverse s)) is s itself.
  dlam::evalSource(vm, kRosen, "<codegen>");
  std::string twice = vm.disassemble(
      dlam::asClosure(dlam::evalSource(vm, "(*j (*j rosen))", "<codegen>"))->proto, true);
  EXPECT_NE(twice.find("JINV"), std::string::npos) << twice;
  EXPECT_EQ(starJOfJInverse(twice), 0u) << twice;
  // The sum of a tagged sensitivity and a tagged number is taken on their primals and
  // tagged once: no PLUS is left (one made a tagged value more per element).
  EXPECT_EQ(twice.find("PLUS"), std::string::npos) << twice;
  // H v at x = (0 1 2 3), v = (1 1 1 1) (as AdCost's Hessian-vector product)
  EXPECT_EQ(
      show(
          "((gradient (lambda (y) (let loop ((g ((gradient rosen) y)) (v '(1 1 1 1)) (acc 0))"
          "  (if (null? g) acc (loop (cdr g) (cdr v) (+ acc (* (car g) (car v)))))))) '(0 1 2 3))"),
      "(-398 202 2602 -600)");
}

// The instructions of `p` and of the functions it creates, at any depth, that have no
// source location, listed as "function: index opcode" lines.
std::string unlocated(const dlam::Proto* p) {
  std::string out;
  std::vector<const dlam::Proto*> work{p};
  std::set<const dlam::Proto*> seen;
  while (!work.empty()) {
    const dlam::Proto* q = work.back();
    work.pop_back();
    if (!seen.insert(q).second) continue;
    for (size_t i = 0; i < q->code.size(); ++i) {
      dlam::Instr ins = q->code[i];
      if (!q->locs.at(i).known())
        out += q->name + ": " + std::to_string(i) + " " +
               std::to_string(int(dlam::instr::op(ins))) + "\n";
      i += dlam::instr::listWords(ins);
    }
    for (const dlam::Proto* c : q->protos) work.push_back(c);
  }
  return out;
}

TEST_F(Codegen, EveryInstructionOfTransformedCodeHasASourceLocation) {
  // What the reverse transform adds (the letrec of a loop, the closure of a
  // backpropagator made after a nested function was transformed, the (cons fbar xbar)
  // a backpropagator returns) is placed in the user's source too: an error there (a
  // heap limit at a CLOSURE, a wrong shape at a return) names a line of it.
  dlam::evalSource(
      vm,
      kRosen +
          "(define (curried a) (lambda (b) (let ((c (* a b))) (lambda (d) (+ c (* d a))))))"
          "(define (pick x) (if (< x 0) (- x) (let loop ((k 3) (y x)) (if (= k 0) y (loop (- k 1) "
          "(* y x))))))" +
          kSumSq,
      "<codegen>");
  for (const char* f : {"rosen", "curried", "pick", "sumsq"}) {
    const dlam::Proto* plain = dlam::asClosure(vm.global(f))->proto;
    EXPECT_EQ(unlocated(plain), "") << f;
    for (const std::string& jf :
         {"(*j " + std::string(f) + ")", "(*j (*j " + std::string(f) + "))"}) {
      const dlam::Proto* t = dlam::asClosure(dlam::evalSource(vm, jf, "<codegen>"))->proto;
      EXPECT_EQ(unlocated(t), "") << jf << "\n" << vm.disassemble(t, true);
    }
  }
}

TEST_F(Codegen, VectorRefIsAnOpcodeInUserCodeAndInItsDerivative) {
  // (vector-ref v i) compiles to VREF, as car to CAR, and so does the primal read in
  // its derivative (vector-ref's rule runs it on primal values); the opcode's slow
  // path keeps the native's errors and the VM goes on.
  dlam::evalSource(vm,
                   "(define (dot3 u v) (+ (* (vector-ref u 0) (vector-ref v 0)) (* (vector-ref u "
                   "2) (vector-ref v 2))))",
                   "<codegen>");
  const dlam::Proto* p = protoOf(vm, "dot3", listing);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(countOps(p, dlam::Op::VREF), 4u) << listing;
  EXPECT_EQ(countOps(p, dlam::Op::CALL) + countOps(p, dlam::Op::TAILCALL), 0u) << listing;
  std::string once =
      vm.disassemble(dlam::asClosure(dlam::evalSource(vm, "(*j dot3)", "<codegen>"))->proto, true);
  EXPECT_NE(once.find("VREF"), std::string::npos) << once;
  EXPECT_EQ(show("(dot3 (vector 1 2 3) (vector 4 5 6))"), "22");
  EXPECT_EQ(show("((gradient dot3) (vector 1 2 3) (vector 4 5 6))"), "(#(4 0 6) #(1 0 3))");
  std::string message = errorOf("(dot3 (vector 1 2) (vector 4 5 6))").message;
  EXPECT_NE(message.find("vector-ref: index 2 is out of range for a vector of length 2"),
            std::string::npos)
      << message;
  EXPECT_EQ(show("(vector-ref (vector 1 +nan.0 -0.0) 1)"), "+nan.0");
  EXPECT_EQ(show("(dot3 (vector 1 0 1) (vector 1 0 1))"), "2");  // the VM goes on
}

TEST_F(Codegen, ASensitivityGivenBackToASumsOperandIsOneInstruction) {
  // The reverse of %sens+ gives each operand its part through %sens-back (ad_rules.cpp),
  // which is SENSBK: the sensitivity as it is unless the operand is the symbolic zero.
  // The registers it reads are listed in the word after it (instr::listWords); an
  // operand that is a product of them (p) needs no register of its own.
  namespace instr = dlam::instr;
  dlam::Instr sb = instr::make(dlam::Op::SENSBK, 1, 3, 2) | instr::kProduct;
  EXPECT_TRUE(instr::isProduct(sb));
  EXPECT_EQ(instr::listWords(sb), 1u);
  EXPECT_EQ(instr::listWords(instr::make(dlam::Op::SENSBK, 1, 5, 2)), 2u);
  dlam::evalSource(vm, "(define (f a b) (+ (* a 2) (expt a b)))", "<codegen>");
  std::string twice = vm.disassemble(
      dlam::asClosure(
          dlam::evalSource(vm, "(cdr (car ((*j (*j f)) (*j (*j 2.)) (*j (*j 0.)))))", "<codegen>"))
          ->proto,
      true);
  EXPECT_TRUE(hasInstr(twice, "SENSBK", ") product")) << twice;
  EXPECT_EQ(twice.find("%sens-back"), std::string::npos) << twice;  // no call of the native
  // d2/da db (2a + a^b) at b = 0 is 1/a, through the zero that d/da a^b is there
  EXPECT_EQ(
      show("((gradient (lambda (b) ((gradient (lambda (a) (+ (sum (* a #(2 1))) (expt a b)))) "
           "2))) 0)"),
      "0.5");
}

TEST_F(Codegen, TypePredicatesAreOneInstruction) {
  // number?, symbol?, string?, boolean? and procedure? compile to TYPEP (no call), which
  // answers plain values inline and asks the primitive for the rest: attached values,
  // reverse-tagged numbers and bundles.
  dlam::evalSource(vm,
                   "(define (kinds x) (list (number? x) (symbol? x) (string? x) (boolean? x) "
                   "(procedure? x)))",
                   "<codegen>");
  const dlam::Proto* p = protoOf(vm, "kinds", listing);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(countOps(p, dlam::Op::TYPEP), 5u) << listing;
  EXPECT_TRUE(hasInstr(listing, "TYPEP", "r0 number?")) << listing;
  EXPECT_TRUE(hasInstr(listing, "TYPEP", "r0 procedure?")) << listing;
  EXPECT_EQ(show("(kinds 1.5)"), "(#t #f #f #f #f)");
  EXPECT_EQ(show("(kinds 'a)"), "(#f #t #f #f #f)");
  EXPECT_EQ(show("(kinds \"s\")"), "(#f #f #t #f #f)");
  EXPECT_EQ(show("(kinds #f)"), "(#f #f #f #t #f)");
  EXPECT_EQ(show("(kinds '())"), "(#f #f #f #f #f)");
  EXPECT_EQ(show("(kinds car)"), "(#f #f #f #f #t)");
  EXPECT_EQ(show("(kinds kinds)"), "(#f #f #f #f #t)");
  EXPECT_EQ(show("(kinds map)"), "(#f #f #f #f #t)");     // an attached procedure
  EXPECT_EQ(show("(kinds (*j 2))"), "(#t #f #f #f #f)");  // a reverse-tagged number
  EXPECT_EQ(show("(kinds (vector 1 2))"), "(#f #f #f #f #f)");
  // A derivative through code that tests its argument's type, at first and second order.
  dlam::evalSource(vm, "(define (f x) (if (number? x) (* x x x) 0))", "<codegen>");
  EXPECT_EQ(show("((gradient f) 3)"), "27");
  EXPECT_EQ(show("((gradient (gradient f)) 3)"), "18");
  EXPECT_EQ(show("((derivative f) 2)"), "12");  // forward mode: number? of a bundle
  EXPECT_EQ(show("((derivative (derivative f)) 2)"), "12");
}

TEST_F(Codegen, ANumberConstantLateInAnArithmeticChainIsAKForm) {
  // (+ a b c 0.01) is a chain of binary instructions through one register; a number
  // constant after the first two operands is the K-form's constant, with no LOADK.
  dlam::evalSource(vm, "(define (r2 dx dy dz) (+ (* dx dx) (* dy dy) (* dz dz) 0.01))",
                   "<codegen>");
  const dlam::Proto* p = protoOf(vm, "r2", listing);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(countOps(p, dlam::Op::ADDK), 1u) << listing;
  EXPECT_EQ(countOps(p, dlam::Op::LOADK), 0u) << listing;
  EXPECT_TRUE(hasInstr(listing, "ADDK", "0.01")) << listing;
  EXPECT_EQ(show("(r2 1 2 3)"), "14.01");
  EXPECT_EQ(show("(- 10 1 2)"), "7");
  EXPECT_EQ(show("(* 2 3 4)"), "24");
  EXPECT_EQ(show("(/ 100 2 5)"), "10");
  EXPECT_EQ(errorOf("(+ 1 2 'a)").message, "+: expected number as argument 2, got a");
  // Gradients through it at first and second order: 2x, and 2.
  EXPECT_EQ(show("((gradient (lambda (x) (r2 x 2 3))) 1.5)"), "3");
  EXPECT_EQ(show("((gradient (gradient (lambda (x) (r2 x 2 3)))) 1.5)"), "2");
  EXPECT_EQ(show("((gradient (lambda (x) (* 2 x x 3))) 1)"), "12");
}

TEST(RegroupParts, PartsBecomeThePartsACalleeTakes) {
  // VM::regroupParts: m parts (m - 1 elements of a list and its rest) made n.
  VM vm;
  dlam::openStdlib(vm);
  auto num = [](double d) { return Value::number(d); };
  Value rest = dlam::evalSource(vm, "'(4 5)", "<regroup>");
  // More parts than taken: the last elements go back on the rest.
  Value a[4] = {num(1), num(2), num(3), rest};
  vm.regroupParts(a, 4, 2);
  EXPECT_EQ(vm.show(a[0]), "1");
  EXPECT_EQ(vm.show(a[1]), "(2 3 4 5)");
  // The list whole (n = 0).
  Value b[3] = {num(1), num(2), rest};
  vm.regroupParts(b, 3, 0);
  EXPECT_EQ(vm.show(b[0]), "(1 2 4 5)");
  // Fewer parts than taken: the rest is taken apart further; a zero stands for a
  // pair of zeros.
  Value c[5] = {num(1), rest};
  vm.regroupParts(c, 2, 4);
  EXPECT_EQ(vm.show(c[0]) + " " + vm.show(c[1]) + " " + vm.show(c[2]) + " " + vm.show(c[3]),
            "1 4 5 ()");
  Value d[4] = {Value::zero()};
  vm.regroupParts(d, 1, 3);
  EXPECT_TRUE(d[0].isZero() && d[1].isZero() && d[2].isZero());
  // Not a list that far: %scar's error, and the VM goes on.
  Value e[4] = {num(1), num(7)};
  EXPECT_THROW(vm.regroupParts(e, 2, 3), dlam::Error);
  EXPECT_EQ(vm.show(dlam::evalSource(vm, "(+ 1 2)", "<regroup>")), "3");
}

TEST_F(Codegen, ArgumentsComputedEarlierInTheBlockAreComputedInTheCallWindow) {
  // t and s are computed before (* h h), which is between them and the call.
  dlam::evalSource(
      vm,
      "(define (walk l acc)"
      "  (if (null? l) acc (let* ((t (cdr l)) (h (car l)) (s (* h h))) (walk t (+ acc s)))))",
      "<codegen>");
  EXPECT_EQ(moves("walk"), 0u) << listing;
  EXPECT_EQ(show("(walk '(1 2 3) 0)"), "14");

  // Transformed code: the arguments (cdr ws) and (cdr inputs) come first, the callee
  // (*j unit) last, and (car ws) and (car inputs), computed in between, are kept for
  // the backpropagator (they get registers below the window).
  dlam::evalSource(vm,
                   "(define (unit ws inputs acc)"
                   "  (if (null? inputs) (cons (+ acc (car ws)) (cdr ws))"
                   "      (unit (cdr ws) (cdr inputs) (+ acc (* (car ws) (car inputs))))))",
                   "<codegen>");
  EXPECT_EQ(moves("(*j unit)"), 0u) << listing;
  EXPECT_EQ(show("(unit '(1 2 3 4) '(5 6) 0)"), "(20 4)");
  EXPECT_EQ(show("((gradient (lambda (ws) (car (unit ws '(5 6) 0)))) '(1 2 3 4))"), "(5 6 1 0)");
}

TEST_F(Codegen, ValuesComputedBetweenAnArgumentAndItsCallSurviveTheCall) {
  // c goes into the window of (g c e); b and the closure k, computed after c and used
  // after the call, get registers below the window, out of reach of g's frame; e,
  // used by the call last, may stay above it. In h, d is used by a second call and
  // after it.
  dlam::evalSource(
      vm,
      "(define (g a b) (list a b))"
      "(define (f x) (let* ((c (cdr x)) (e (car x)) (b (* e 2)) (k (lambda () b)) (r (g c e)))"
      "                (list r (k) (k) b)))"
      "(define (h x) (let* ((c (cdr x)) (e (car x)) (d (- e 1)) (r (g c e)) (s (g d r))) (list s "
      "d)))",
      "<codegen>");
  EXPECT_EQ(show("(f '(3 . 4))"), "((4 3) 6 6 6)");
  EXPECT_EQ(show("(h '(3 . 4))"), "((2 (4 3)) 2)");
  EXPECT_EQ(show("((gradient (lambda (v) (let ((r (f (cons (car v) (cadr v))))) (* (car (car r)) "
                 "(cadr r)))))"
                 " '(3 4))"),
            "(8 6)");
  EXPECT_EQ(show("((gradient (lambda (v) (let ((r (h (cons (car v) (cadr v))))) (* (car (car r)) "
                 "(cadr r)))))"
                 " '(3 4))"),
            "(4 0)");
}

// `n` calls (f 1) in a row: more than 32767 instructions for n > 11000.
std::string calls(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s += " (f 1)";
  return s;
}

TEST_F(Codegen, AComparisonWhoseThenBranchIsTooFarForItsJumpIsCompiledAgain) {
  // The fused compare-and-jump has a 16-bit offset: past it the `if` is compiled
  // again with a plain test, and the branch's variables get their registers anew.
  dlam::evalSource(vm,
                   "(define (f x) x) (define (h a b c) (list a b c))"
                   "(define (g x) (if (< x 2) (let* ((a (* x 10)) (b (+ x 5)) (c (cons a b)))" +
                       calls(12000) + " (h (car c) b (cdr c))) 0))",
                   "<codegen>");
  EXPECT_EQ(show("(g 1)"), "(10 6 6)");
  EXPECT_EQ(show("(g 3)"), "0");
}

// A let* of 3 10^4 bindings (each name bound again, and the parameter used in every
// init) compiles in linear time: names are looked up in one scope for the whole let*,
// and a name no scope binds (+, -) without walking the scopes (it took 28 s before).
TEST_F(Codegen, ALongLetStarCompilesInLinearTime) {
  const int n = 30000;
  std::string src = "(define (f x) (let* ((v x)";
  for (int i = 0; i < n; ++i) src += " (v (+ v 1 (- x x)))";
  src += " (u (* 2 v))) (+ u x)))";
  auto start = std::chrono::steady_clock::now();
  dlam::evalSource(vm, src, "<codegen>");
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(show("(f 5)"), std::to_string(2 * (5 + n) + 5));
  EXPECT_LT(seconds, 20.0);
  // Shadowing within one let*: each init sees the binding before it.
  EXPECT_EQ(show("(let* ((a 1) (b (+ a 1)) (a (* b 10)) (c (list a b))) (cons a c))"), "(20 20 2)");
  EXPECT_EQ(show("((gradient (lambda (x) (let* ((y (* x x)) (y (* y x)) (z y)) (+ y z)))) 2)"),
            "24");
}

// A captured value used once, as the callee or an argument of a call, is loaded where
// it is used (straight into the call's window), not at entry and then moved.
TEST_F(Codegen, ACapturedValueUsedOnceByACallIsLoadedIntoItsWindow) {
  dlam::evalSource(vm, "(define (caller f k) (lambda (x) (+ k (f x))))", "<codegen>");
  // Only x is moved into the window (f was loaded at entry and moved: 2 before).
  EXPECT_EQ(moves("(caller car 1)"), 1u) << listing;
  EXPECT_EQ(show("((caller car 1) '(41 2))"), "42");
  // Used twice, in a branch, as an argument, as the callee of a tail call: the values.
  EXPECT_EQ(show("((lambda (f) ((lambda (x) (+ (f x) (f x))) 3)) (lambda (y) (* y y)))"), "18");
  EXPECT_EQ(show("(map (lambda (x) ((lambda (f) (if (> x 0) (f x) 0)) -)) '(1 -2))"), "(-1 0)");
  EXPECT_EQ(show("((lambda (a g) ((lambda (x) (list (g a x))) 5)) 7 cons)"), "((7 . 5))");
  EXPECT_EQ(show("((lambda (g) ((lambda (x) (g x x)) 4)) *)"), "16");
  // And in transformed code, where every backpropagator calls the one it captured.
  EXPECT_EQ(show("((gradient (lambda (x) ((caller (lambda (y) (* x y y)) 1) x))) 3)"), "27");
}

// The captured values a function uses in its own registers are loaded at entry, a run
// of consecutive ones by one GETUPVAL (R[A] .. R[A+C] = captured values B .. B+C),
// including those an opcode uses once (before, each was loaded where used, one
// instruction each); one used once by a call through a window still goes straight
// into the window, and splits the run.
TEST_F(Codegen, CapturedValuesAreLoadedByOneInstructionPerRun) {
  dlam::evalSource(vm, "(define (three a b c) (lambda (x) (+ (* a x) (* b x) (* c x))))",
                   "<codegen>");
  const dlam::Proto* p = protoOf(vm, "(three 1 2 3)", listing);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(countOps(p, dlam::Op::GETUPVAL), 1u) << listing;
  EXPECT_NE(listing.find("GETUPVAL   r1..r3 [0..2]"), std::string::npos) << listing;
  EXPECT_EQ(show("((three 1 2 3) 10)"), "60");
  // f, used once as a callee, is loaded into its window: a run before it, one after.
  dlam::evalSource(vm, "(define (around a f b) (lambda (x) (* a (f x) b)))", "<codegen>");
  p = protoOf(vm, "(around 2 car 5)", listing);
  ASSERT_NE(p, nullptr);
  EXPECT_NE(listing.find("GETUPVAL   r1 [0]"), std::string::npos) << listing;
  EXPECT_NE(listing.find("GETUPVAL   r2 [2]"), std::string::npos) << listing;
  EXPECT_EQ(moves("(around 2 car 5)"), 1u) << listing;  // x into the window only
  EXPECT_EQ(show("((around 2 car 5) '(7))"), "70");
  // In a branch, in a closure made inside, recursive, and in derivatives of all of them.
  EXPECT_EQ(show("(map ((lambda (a b) (lambda (x) (if (> x 0) (* a x) (- b x)))) 3 4) '(2 -1))"),
            "(6 5)");
  EXPECT_EQ(show("((((lambda (a b c) (lambda (x) (lambda (y) (list a b c x y)))) 1 2 3) 4) 5)"),
            "(1 2 3 4 5)");
  EXPECT_EQ(show("((derivative (lambda (x) ((three x (* x x) 3) x))) 2)"), "19");
  EXPECT_EQ(show("((derivative (derivative (lambda (x) ((three x (* x x) 3) x)))) 2)"), "14");
  // Rosenbrock's backpropagator transformed captures ten values: products' operands,
  // the values whose shapes %unreduce and %sum-to read (the reverses of %sens+ and plus,
  // ad_rules.cpp), and the backpropagator it calls, into its window; a run of them
  // used together is loaded by one instruction.
  dlam::evalSource(vm, kRosen, "<codegen>");
  std::string twice = vm.disassemble(
      dlam::asClosure(dlam::evalSource(vm, "(*j (*j rosen))", "<codegen>"))->proto, true);
  EXPECT_TRUE(hasInstr(twice, "GETUPVAL", " [5..8]")) << twice;
  // (the first row of the Hessian at (1 2 3): 1200 x0^2 - 400 x1 + 2, -400 x0, 0)
  EXPECT_EQ(show("((gradient (lambda (y) (car ((gradient rosen) y)))) '(1 2 3))"), "(402 -400 0)");
}

// Transforming transformed code tags a number twice and takes a primal twice: such a
// chain of *j (of *j-inverse), each result used only by the next, made at one place
// in the source, is one STARJ (JINV) whose C counts the levels after the first.
TEST_F(Codegen, ChainsOfStarJAndOfJInverseAreOneInstruction) {
  dlam::evalSource(vm, kRosen, "<codegen>");
  std::string twice = vm.disassemble(
      dlam::asClosure(dlam::evalSource(vm, "(*j (*j rosen))", "<codegen>"))->proto, true);
  EXPECT_TRUE(hasInstr(twice, "JINV", " (2 levels)")) << twice;
  EXPECT_TRUE(hasInstr(twice, "STARJ", " (2 levels)")) << twice;
  std::string thrice = vm.disassemble(
      dlam::asClosure(dlam::evalSource(vm, "(*j (*j (*j rosen)))", "<codegen>"))->proto, true);
  EXPECT_NE(thrice.find("(3 levels)"), std::string::npos) << thrice;
  // The derivatives through them: H e0 at (1 2 3), and x^4's third derivative at 2.
  EXPECT_EQ(show("((gradient (lambda (y) (car ((gradient rosen) y)))) '(1 2 3))"), "(402 -400 0)");
  EXPECT_EQ(show("((derivative (derivative (derivative (lambda (x) (* x x x x))))) 2)"), "48");
  // Written by hand: joined when in one place of the source, and each level's value is
  // right for numbers, lists and procedures.
  dlam::evalSource(vm, "(define (j2 x) (*j (*j x))) (define (i2 x) (*j-inverse (*j-inverse x)))",
                   "<codegen>");
  EXPECT_EQ(show("(list (i2 (j2 3)) (i2 (j2 (list 1 car))) (eq? (i2 (j2 car)) car))"),
            "(3 (1 #<procedure car>) #t)");
  EXPECT_EQ(show("(*j-inverse (car (j2 '(5))))"), "#<rev 5>");
  // A value that reaches the second *j-inverse from an `if` (by two paths) is not joined
  // to the one in a branch.
  dlam::evalSource(vm, "(define (f c a b) (*j-inverse (if c (*j-inverse a) (*j-inverse b))))",
                   "<codegen>");
  EXPECT_EQ(show("(list (f #t (*j (*j 1)) (*j (*j 2))) (f #f (*j (*j 1)) (*j (*j 2))))"), "(1 2)");
  // Two places in the source stay two instructions: an error names the one that failed.
  dlam::evalSource(vm, "(define (g x) (*j-inverse (*j-inverse x)))", "<codegen>");
  dlam::Error e = errorOf("(g (*j 1))");
  EXPECT_NE(e.message.find("derivative level was mixed up"), std::string::npos) << e.message;
  EXPECT_EQ(e.loc.col, 15u) << e.message;
}

TEST_F(Codegen, NumbersForACallThatTakesThemUntaggedAreNotTagged) {
  // The loop's sum is passed as (*j (+ acc ...)) to a parameter taken only *j-inverse
  // of: the ADD goes straight into the window, the CALL flags it untagged, and the
  // callee reads it with ARGJINV. The one STARJ left tags the callee, the other the
  // value returned at the end.
  dlam::evalSource(vm,
                   "(define (unit ws inputs acc)"
                   "  (if (null? inputs) (cons (+ acc (car ws)) (cdr ws))"
                   "      (unit (cdr ws) (cdr inputs) (+ acc (* (car ws) (car inputs))))))",
                   "<codegen>");
  std::string listing;
  const dlam::Proto* p = protoOf(vm, "(*j unit)", listing);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(hasInstr(listing, "ARGJINV", " r2")) << listing;
  EXPECT_TRUE(hasInstr(listing, "CALL", "split rep, untagged 3")) << listing;
  EXPECT_EQ(countOps(p, dlam::Op::STARJ), 2u) << listing;
  EXPECT_EQ(p->rawParams, 1u << 2);
  EXPECT_EQ(show("((gradient (lambda (ws) (car (unit ws '(5 6) 0)))) '(1 2 3 4))"), "(5 6 1 0)");
  EXPECT_EQ(show("((gradient (lambda (x) (car (unit (list x x 1) (list x 2) (* x x))))) 3)"), "14");

  // A value of sin, as of any arithmetic primitive, goes untagged too: both of the
  // loop's numbers here. The derivative against the chain rule written out.
  dlam::evalSource(vm,
                   "(define (iter x) (let loop ((i 0) (acc x)) (if (= i 10) (* acc 1) (loop (+ i "
                   "1) (sin acc)))))",
                   "<codegen>");
  std::string all =
      vm.disassemble(dlam::asClosure(dlam::evalSource(vm, "(*j iter)", "<codegen>"))->proto, true);
  EXPECT_TRUE(hasInstr(all, "CALL", "split rep, untagged 1 2")) << all;
  EXPECT_EQ(show("(< (abs (- ((derivative iter) 0.5)"
                 "           (let loop ((i 0) (a 0.5) (d 1)) (if (= i 10) d (loop (+ i 1) (sin a) "
                 "(* d (cos a)))))))"
                 "   1e-15)"),
            "#t");

  // A parameter also used as it is (returned) is not taken untagged.
  dlam::evalSource(vm, "(define (magnitude y) (if (> y 0) y (- y)))", "<codegen>");
  p = protoOf(vm, "(*j magnitude)", listing);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->rawParams, 0u) << listing;
  EXPECT_EQ(countOps(p, dlam::Op::ARGJINV), 0u) << listing;

  // Plain code too: (*j v) of a sum, used once by a call, is flagged (TAILCALL here);
  // used twice, or of a value whose *j could fail (a car), it is made where it stands.
  dlam::evalSource(vm, "(define (call-j g x) (g (*j (* x 3))))", "<codegen>");
  p = protoOf(vm, "call-j", listing);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(hasInstr(listing, "TAILCALL", "1 args, untagged 1")) << listing;
  EXPECT_EQ(countOps(p, dlam::Op::STARJ), 0u) << listing;
  EXPECT_EQ(show("(let ((r (call-j (*j (lambda (y) (* y y))) 2))) (list (*j-inverse (car r)) ((cdr "
                 "r) 1)))"),
            "(36 (() . 12))");
  EXPECT_EQ(show("(let ((r (call-j (*j (lambda (y) (if (> y 0) y 0))) 2))) (list (*j-inverse (car "
                 "r)) ((cdr r) 1)))"),
            "(6 (() . 1))");
  p = protoOf(vm, "(lambda (g x) (let ((y (*j (* x 3)))) (g y y)))", listing);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(listing.find("untagged"), std::string::npos) << listing;
  EXPECT_EQ(countOps(p, dlam::Op::STARJ), 1u) << listing;
  p = protoOf(vm, "(lambda (g l) (g (*j (car l))))", listing);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(listing.find("untagged"), std::string::npos) << listing;
  EXPECT_EQ(countOps(p, dlam::Op::STARJ), 1u) << listing;
}

// The backward jumps of a function's code (its own, not its children's): a loop's test
// repeated at its end, or a JMP (not the one after such a test, taken once, on the
// way out).
size_t backJumps(const dlam::Proto* p) {
  size_t n = 0;
  bool afterTest = false;
  for (size_t i = 0; i < p->code.size(); ++i) {
    dlam::Instr ins = p->code[i];
    bool test = dlam::instr::isCompareJump(dlam::instr::op(ins)) && dlam::instr::sC(ins) < 0;
    n += test || (dlam::instr::op(ins) == dlam::Op::JMP && dlam::instr::sBx(ins) < 0 && !afterTest);
    afterTest = test;
    i += dlam::instr::listWords(ins);
  }
  return n;
}

// A named let or a do whose name is only called in tail position of its own body runs
// in place: no closure, no call, a jump back per iteration, its variables in registers
// of the enclosing function; a value computed for a variable nothing reads after it is
// computed straight into that variable's register.
TEST_F(Codegen, ALoopWhoseNameIsOnlyTailCalledIsAJump) {
  const dlam::Proto* p = protoOf(
      vm, "(lambda (n) (let loop ((i 0) (acc 0)) (if (< i n) (loop (+ i 1) (+ acc i)) acc)))",
      listing);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(p->protos.empty()) << listing;
  EXPECT_EQ(countOps(p, dlam::Op::CLOSURE) + countOps(p, dlam::Op::CALL) +
                countOps(p, dlam::Op::TAILCALL),
            0u)
      << listing;
  EXPECT_EQ(backJumps(p), 1u) << listing;
  // (+ acc i) goes straight into acc's register; (+ i 1), which acc's sum reads i
  // before, is put off to the jump and goes into i's there: no move.
  EXPECT_EQ(countOps(p, dlam::Op::MOVE), 0u) << listing;
  EXPECT_EQ(show("((lambda (n) (let loop ((i 0) (acc 0)) (if (< i n) (loop (+ i 1) (+ acc i)) "
                 "acc))) 1000000)"),
            "499999500000");

  // do, with a body, and a loop whose value is used (not in tail position).
  p = protoOf(vm,
              "(lambda (n) (+ 1 (do ((i 0 (+ i 1)) (s '() (cons i s))) ((= i n) (length s)) "
              "(car (list i)))))",
              listing);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(countOps(p, dlam::Op::CLOSURE), 0u) << listing;
  EXPECT_EQ(backJumps(p), 1u) << listing;
  dlam::evalSource(vm,
                   "(define (f n) (+ 1 (do ((i 0 (+ i 1)) (s '() (cons i s))) ((= i n) (length "
                   "s)) (car (list i)))))",
                   "<codegen>");
  EXPECT_EQ(show("(list (f 0) (f 5) (f 1000000))"), "(1 6 1000001)");

  // Self-calls in several branches, and nested loops (the inner one's value an argument).
  p = protoOf(vm,
              "(lambda (n) (let outer ((i 0) (s 0)) (cond ((= i n) s) ((even? i) (outer (+ i 1) "
              "(+ s (let inner ((j 0) (t 0)) (if (= j i) t (inner (+ j 1) (+ t j))))))) (else "
              "(outer (+ i 1) s)))))",
              listing);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(p->protos.empty()) << listing;
  EXPECT_EQ(backJumps(p), 3u) << listing;
  // sum over even i < 10 of i (i - 1) / 2: 0 + 1 + 6 + 15 + 28
  EXPECT_EQ(show("((lambda (n) (let outer ((i 0) (s 0)) (cond ((= i n) s) ((even? i) (outer (+ i "
                 "1) (+ s (let inner ((j 0) (t 0)) (if (= j i) t (inner (+ j 1) (+ t j))))))) "
                 "(else (outer (+ i 1) s))))) 10)"),
            "50");
}

// The instructions (f 2000) executes beyond those of (f 1000): a thousand iterations of
// f's loop.
uint64_t perThousandMore(dlam::VM& vm, const char* f) {
  uint64_t before = vm.instructionsExecuted();
  dlam::evalSource(vm, ("(" + std::string(f) + " 1000)").c_str(), "<codegen>");
  uint64_t thousand = vm.instructionsExecuted() - before;
  before = vm.instructionsExecuted();
  dlam::evalSource(vm, ("(" + std::string(f) + " 2000)").c_str(), "<codegen>");
  return vm.instructionsExecuted() - before - thousand;
}

// The arguments of a loop's self-call are one parallel assignment: computations put off
// to the jump (deferToJump) are ordered so that each parameter is read before it is
// written, and where the arguments wait on each other (a rotation, a swap) one is
// copied aside first. The values are those of the loop as a call.
TEST_F(Codegen, ALoopsSelfCallIsOneParallelAssignment) {
  const dlam::Proto* p =
      protoOf(vm,
              "(lambda (n) (let loop ((x 1) (y 10) (k n)) (if (= k 0) (list x y) "
              "(loop (+ y 1) (* x 2) (- k 1)))))",
              listing);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(backJumps(p), 1u) << listing;
  dlam::evalSource(vm,
                   "(define (swap2 n) (let loop ((x 1) (y 10) (k n)) (if (= k 0) (list x y) "
                   "(loop (+ y 1) (* x 2) (- k 1)))))"
                   "(define (fib n) (let loop ((a 0) (b 1) (k n)) (if (= k 0) a "
                   "(loop b (+ a b) (- k 1)))))"
                   "(define (rot n) (let loop ((a 1) (b 2) (c 3) (k n)) (if (= k 0) (list a b c) "
                   "(loop (+ b 0) (* c 1) (- a 0) (- k 1)))))"
                   "(define (mixed n) (let loop ((i 0) (s 0) (t 1)) (if (= i n) (list s t) "
                   "(loop (+ i 1) (+ s (* i t)) (- t s)))))",
                   "<codegen>");
  EXPECT_EQ(show("(list (swap2 1) (swap2 2) (swap2 3))"), "((11 2) (3 22) (23 6))");
  EXPECT_EQ(show("(list (fib 10) (fib 50))"), "(55 12586269025)");
  EXPECT_EQ(show("(list (rot 1) (rot 2) (rot 3) (rot 4))"), "((2 3 1) (3 1 2) (1 2 3) (2 3 1))");
  // s, t: (0 1) (0 1) (1 1) (3 0) (3 -3)
  EXPECT_EQ(show("(mixed 4)"), "(3 -3)");
  // x and y each read the other: one copy aside, the rest computed in place, so five
  // instructions an iteration: k - 1, the copy, y + 1, x' * 2, the test repeated.
  EXPECT_EQ(perThousandMore(vm, "swap2"), 5000u);
}

// A loop whose body starts with its test (a compare-and-jump) repeats the test at its
// end, jumping back into the body where the test leads: the test is dispatched once
// per iteration, not a JMP and the test; where it leads out, a JMP goes.
TEST_F(Codegen, ALoopRepeatsItsTestAtItsEnd) {
  using dlam::Op;
  namespace in = dlam::instr;
  const dlam::Proto* p = protoOf(
      vm, "(lambda (n) (let loop ((i 0) (acc 0)) (if (< i n) (loop (+ i 1) (+ acc i)) acc)))",
      listing);
  ASSERT_NE(p, nullptr);
  // LOADK i 0; LOADK acc 0; 2: JNLT i n -> 7; ADD acc acc i; ADDK i i 1;
  // JLT i n -> 3; JMP -> 7; 7: RETURN acc
  ASSERT_EQ(p->code.size(), 8u) << listing;
  dlam::Instr test = p->code[2], repeat = p->code[5], exit = p->code[6];
  EXPECT_EQ(in::op(test), Op::JNLT) << listing;
  EXPECT_EQ(in::op(repeat), Op::JNLT) << listing;
  EXPECT_TRUE(in::jumpsIfHolds(repeat)) << listing;
  EXPECT_FALSE(in::jumpsIfHolds(test)) << listing;
  EXPECT_EQ(in::a(repeat), in::a(test)) << listing;
  EXPECT_EQ(in::b(repeat), in::b(test)) << listing;
  EXPECT_EQ(6 + in::sC(repeat), 3) << listing;  // back to the instruction after the test
  EXPECT_EQ(in::op(exit), Op::JMP) << listing;
  EXPECT_EQ(7 + in::sBx(exit), 3 + in::sC(test)) << listing;  // where the test goes
  EXPECT_EQ(in::op(p->code[7]), Op::RETURN) << listing;
  EXPECT_EQ(p->locs[5].col, p->locs[2].col) << listing;  // the test's location
  // Three instructions per iteration (four with a MOVE, five with a JMP back to the test).
  dlam::evalSource(vm,
                   "(define (sum-below n) (let loop ((i 0) (acc 0)) (if (< i n) (loop (+ i 1) "
                   "(+ acc i)) acc)))",
                   "<codegen>");
  EXPECT_EQ(show("(sum-below 2000)"), "1999000");
  EXPECT_EQ(perThousandMore(vm, "sum-below"), 3000u);

  // A do: the self-call is in the branch the test jumps to, which the test repeated as
  // it is jumps back to; the JMP after it leads to the branch after the test.
  p = protoOf(vm, "(lambda (v) (do ((i 0 (+ i 1)) (s 0 (+ s (vector-ref v i)))) ((= i 3) s)))",
              listing);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(countOps(p, Op::JNNUMEQK), 2u) << listing;  // neither with h
  EXPECT_EQ(listing.find("JNUMEQK"), std::string::npos) << listing;
  EXPECT_EQ(backJumps(p), 1u) << listing;
  EXPECT_EQ(show("((lambda (v) (do ((i 0 (+ i 1)) (s 0 (+ s (vector-ref v i)))) ((= i 3) s))) "
                 "(vector 1 2 4))"),
            "7");
  // Self-calls in two branches of a cond: each repeats the test.
  p = protoOf(vm,
              "(lambda (n) (let loop ((i 0) (e 0) (o 0)) (cond ((>= i n) (list e o)) ((even? i) "
              "(loop (+ i 1) (+ e i) o)) (else (loop (+ i 1) e (+ o i))))))",
              listing);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(countOps(p, Op::JNGE), 3u) << listing;
  EXPECT_EQ(backJumps(p), 2u) << listing;
  EXPECT_EQ(show("((lambda (n) (let loop ((i 0) (e 0) (o 0)) (cond ((>= i n) (list e o)) ((even? "
                 "i) (loop (+ i 1) (+ e i) o)) (else (loop (+ i 1) e (+ o i)))))) 10)"),
            "(20 25)");
  // NaN fails the test at the end as at the start.
  EXPECT_EQ(show("(let loop ((x 0) (k 0)) (if (< x 1) (loop (if (= k 2) +nan.0 (+ x 0.25)) (+ k "
                 "1)) (list x k)))"),
            "(+nan.0 3)");
  // A test that fails comparing (not numbers) at the end is located at the test.
  dlam::Error e = errorOf(
      "(define unused 0)\n(let loop ((i 0)) (if (< i 3) (loop (if (= i 1) 'a (+ i 1))) i))");
  EXPECT_EQ(e.message, "<: expected number as argument 1, got a");
  EXPECT_EQ(e.loc.line, 2u);
  EXPECT_EQ(e.loc.col, 23u);
}

TEST_F(Codegen, ALoopInPlaceAssignsItsVariablesInParallel) {
  // Swaps, and a Fibonacci step reading both old values.
  EXPECT_EQ(show("(let loop ((i 0) (a 1) (b 2)) (if (= i 3) (list a b) (loop (+ i 1) b a)))"),
            "(2 1)");
  EXPECT_EQ(show("(let loop ((i 0) (a 0) (b 1)) (if (= i 30) a (loop (+ i 1) b (+ a b))))"),
            "832040");
  EXPECT_EQ(show("(let loop ((i 0) (a 1) (b 2) (c 3)) (if (= i 4) (list a b c) (loop (+ i 1) c a "
                 "b)))"),
            "(3 1 2)");
  // A closure made in an iteration keeps that iteration's values.
  EXPECT_EQ(show("(let loop ((i 0) (fs '())) (if (= i 3) (map (lambda (f) (f 10)) fs) (loop (+ "
                 "i 1) (cons (lambda (y) (* y i)) fs))))"),
            "(20 10 0)");
  // A value computed for one variable while another variable's old value is still
  // read after it (here by a later argument) waits in a register of its own.
  EXPECT_EQ(show("(let loop ((i 0) (a 1) (b 0)) (if (= i 5) (list a b) (loop (+ i 1) (* a 2) (+ "
                 "b a))))"),
            "(32 31)");
  EXPECT_EQ(show("(let loop ((i 0) (a 1)) (if (= i 3) a (loop (+ i 1) (let ((j i)) (+ a j)))))"),
            "4");
}

TEST_F(Codegen, ALoopWhoseTestMustJumpFarIsCompiledAgainInPlace) {
  // The loop's body is too long for its test's 16-bit jump: the chain is compiled
  // again with the comparison computed (the loop's variables named anew), still in
  // place.
  std::string body;
  for (int i = 0; i < 12000; ++i) body += " (car (list " + std::to_string(i) + "))";
  const dlam::Proto* p = protoOf(vm,
                                 "(lambda (n) (let loop ((i 0) (s 0)) (if (< i n) (begin" + body +
                                     " (loop (+ i 1) (+ s i))) s)))",
                                 listing);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(countOps(p, dlam::Op::CLOSURE), 0u);
  EXPECT_EQ(countOps(p, dlam::Op::JMPIFNOT), 1u);
  EXPECT_EQ(backJumps(p), 1u);
  dlam::evalSource(vm,
                   "(define (big n) (let loop ((i 0) (s 0)) (if (< i n) (begin" + body +
                       " (loop (+ i 1) (+ s i))) s)))",
                   "<codegen>");
  EXPECT_EQ(show("(big 5)"), "10");
}

TEST_F(Codegen, ALoopWhoseNameEscapesOrIsCalledOtherwiseStaysAProcedure) {
  // Captured by a lambda, passed as a value, called not in tail position: a closure.
  for (const char* code :
       {"(lambda (n) (let loop ((i 0)) (if (< i n) (loop (+ i 1)) (lambda () loop))))",
        "(lambda (n) (let loop ((i 0)) (if (< i n) (loop (+ i 1)) (map loop '()))))",
        "(lambda (n) (let f ((n n)) (if (= n 0) 1 (* n (f (- n 1))))))"}) {
    const dlam::Proto* p = protoOf(vm, code, listing);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(countOps(p, dlam::Op::CLOSURE), 1u) << code << "\n" << listing;
  }
  EXPECT_EQ(show("((lambda (n) (let f ((n n)) (if (= n 0) 1 (* n (f (- n 1)))))) 5)"), "120");
  // A self-call with the wrong number of arguments is an error at that call, as before.
  dlam::Error e = errorOf("(define unused 0)\n(let loop ((i 0)) (if (< i 1) (loop) i))");
  EXPECT_EQ(e.message, "loop: expected 1 argument, got 0");
  EXPECT_EQ(e.loc.line, 2u);
  // An error in a loop in place is located at the failing call; the VM goes on.
  e = errorOf("(define unused 0)\n(let loop ((i 0)) (if (< i 3) (loop (+ i 1)) (car i)))");
  EXPECT_EQ(e.message, "car: expected pair as argument 1, got 3");
  EXPECT_EQ(e.loc.line, 2u);
  EXPECT_EQ(e.loc.col, 46u);
  EXPECT_EQ(show("(do ((i 0 (+ i 1))) ((= i 3) i))"), "3");
}

// The source of (head a_0 ... a_{n-1}), each a_i = item(i).
template <class Item>
std::string callOf(const std::string& head, size_t n, Item item) {
  std::string s = "(" + head;
  for (size_t i = 0; i < n; ++i) s += " " + item(i);
  return s + ")";
}
std::string num(size_t i) { return std::to_string(i); }

// A call of any number of arguments compiles (past kMaxCallArgs the expander makes it
// apply over a list built in pieces, or for + - * / a left fold of calls): data
// written as (list ...), a rest-parameter closure given 70000 arguments, a sum of 10^5
// terms, under a derivative too. Before, more than 65533 failed to compile.
TEST_F(Codegen, ACallOfAnyNumberOfArgumentsCompiles) {
  const std::string big = callOf("list", 100000, [](size_t i) { return "(+ " + num(i) + " 1)"; });
  EXPECT_EQ(show("(let ((l " + big + ")) (list (length l) (car l) (list-ref l 99999)))"),
            "(100000 1 100000)");
  EXPECT_EQ(show("(equal? " + callOf("list", 70000, num) + " (iota 70000))"), "#t");
  EXPECT_EQ(show(callOf("(lambda xs (length xs))", 70000, num)), "70000");
  EXPECT_EQ(show(callOf("+", 100000, num)), "4999950000");
  EXPECT_EQ(show(callOf("-", 5000, num)), "-12497500");
  // The same operations in the same order as the call written out: a product of 5000
  // inexact factors equals fold-left's, bit for bit.
  auto factor = [](size_t i) { return "1.0000001" + num(i); };
  EXPECT_EQ(show("(= " + callOf("*", 5000, factor) + " (fold-left * 1 " +
                 callOf("list", 5000, factor) + "))"),
            "#t");
  // Under a derivative: the list and the sum are made by the transformed code.
  EXPECT_EQ(show("((gradient (lambda (x) (fold-left + 0 (map (lambda (c) (* x c)) " +
                 callOf("list", 100000, num) + ")))) 1)"),
            "4999950000");
  EXPECT_EQ(show("((gradient (lambda (x) " +
                 callOf("+", 3000, [](size_t i) { return "(* x x " + num(i) + ")"; }) + ")) 2)"),
            "17994000");
  // Arguments are evaluated in order, across the pieces.
  std::string out;
  vm.output = [&](std::string_view s) { out += s; };
  show(callOf("list", 5000, [](size_t i) {
    return i % 2000 == 0 ? "(begin (display " + num(i / 2000) + ") 1)" : num(i);
  }));
  EXPECT_EQ(out, "012");
  // A wrong argument count is still an error at the call.
  dlam::Error e = errorOf("(define unused 0)\n" + callOf("(lambda (a b c) a)", 2000, num));
  EXPECT_EQ(e.message, "#<procedure>: expected 3 arguments, got 2000");
  EXPECT_EQ(e.loc.line, 2u);
}

}  // namespace
