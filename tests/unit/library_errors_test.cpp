// library_errors_test.cpp — the errors of the differentiation library (stdlib/prelude.dlam:
// gradient, derivative, value-and-gradient, vjp, jvp, jacobian, hessian) name the
// function the user called and say what was wrong, located at the user's call; and the
// VM goes on working after each.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "dlam/compiler.h"
#include "dlam/stdlib.h"
#include "dlam/vm.h"

namespace {

struct Case {
  const char* code;
  const char* message;  // the whole message
};

// Each on line 2 of its source, at column 1 (the call that fails).
const Case kCases[] = {
    {"((gradient 5) 1)", "gradient: expected a procedure, got 5"},
    {"((derivative \"f\") 1)", "derivative: expected a procedure, got \"f\""},
    {"((value-and-gradient '(1)) 1)", "value-and-gradient: expected a procedure, got (1)"},
    {"(vjp 5 1)", "vjp: expected a procedure, got 5"},
    {"(jvp 5 1 1)", "jvp: expected a procedure, got 5"},
    {"((jacobian 5) '(1))", "jacobian: expected a procedure, got 5"},
    {"((hessian 5) '(1))", "hessian: expected a procedure, got 5"},
    {"((gradient (lambda (x) (list x x))) 1)",
     "gradient: the function must return a real number, got (1 1)"},
    {"((derivative-forward (lambda (x) x)) '(1 2))",
     "derivative-forward: expected a real argument, got (1 2)"},
    {"((hessian (lambda (v) 1)) \"s\")",
     "hessian: expected a list of reals, a vector or real arguments, got \"s\""},
    {"((jacobian-forward (lambda (v) v)) 1 'a)",
     "jacobian-forward: expected a list of reals, a vector or real arguments, got (1 a)"},
    {"(hvp (lambda (v) (list v)) 1 1)", "hvp: the function must return a real number, got (1)"},
    {"((value-and-gradient (lambda (x) \"s\")) 1)",
     "value-and-gradient: the function must return a real number, got \"s\""},
    {"((hessian (lambda (v) v)) '(1 2))",
     "hessian: the function must return a real number, got (1 2)"},
    {"((jacobian (lambda (v) (car v))) '(1 2))",
     "jacobian: the function must return a list of reals or a vector, got 1"},
};

TEST(LibraryErrors, NameTheFunctionCalledAndTheProblem) {
  dlam::VM vm;
  vm.output = [](std::string_view) {};
  dlam::openStdlib(vm);
  for (const Case& c : kCases) {
    try {
      dlam::evalSource(vm, std::string("(define unused 0)\n") + c.code, "lib.dlam");
      ADD_FAILURE() << "no error from " << c.code;
    } catch (const dlam::Error& e) {
      EXPECT_EQ(e.message, c.message) << c.code;
      EXPECT_EQ(e.file, "lib.dlam") << c.code;
      EXPECT_EQ(e.loc.line, 2u) << c.code;
    }
    vm.recover();
    // The same functions still work.
    EXPECT_EQ(vm.show(dlam::evalSource(vm, "((gradient (lambda (x) (* x x x))) 2)", "ok.dlam")),
              "12");
  }
  EXPECT_EQ(vm.show(dlam::evalSource(
                vm, "((hessian (lambda (v) (* (car v) (car v) (cadr v)))) '(1 2))", "ok.dlam")),
            "((4 2) (2 0))");
  EXPECT_EQ(
      vm.show(dlam::evalSource(
          vm, "((jacobian (lambda (v) (list (* (car v) (cadr v)) (car v)))) '(1 2))", "ok.dlam")),
      "((2 1) (1 0))");
  EXPECT_EQ(vm.show(dlam::evalSource(vm, "((derivative (derivative cos)) 0)", "ok.dlam")), "-1");
}

}  // namespace

namespace {

// The trace of an error raised in a comparator that sort (written in the prelude) calls:
// the files of its entries, innermost first.
std::vector<std::string> traceFiles(bool fullTrace) {
  dlam::Config cfg;
  cfg.fullTrace = fullTrace;
  dlam::VM vm(cfg);
  vm.output = [](std::string_view) {};
  dlam::openStdlib(vm);
  std::vector<std::string> files;
  try {
    dlam::evalSource(vm,
                     "(define (f x) (car x))\n"
                     "(define (g l) (sort l (lambda (a b) (< (f a) b))))\n"
                     "(list (g '(3 1 2)))\n",
                     "sort.dlam");
    ADD_FAILURE() << "no error";
  } catch (const dlam::Error& e) {
    EXPECT_EQ(e.message, "car: expected pair as argument 1, got 1");
    EXPECT_EQ(e.file, "sort.dlam");
    EXPECT_EQ(e.loc.line, 1u);
    for (const dlam::TraceEntry& t : e.trace) files.push_back(t.file);
  }
  return files;
}

TEST(LibraryErrors, TracesFoldTheLibrarysFramesUnlessFullTrace) {
  // Folded: f, the comparator, then the program's call of g at the top level.
  std::vector<std::string> folded = traceFiles(false);
  EXPECT_EQ(folded, std::vector<std::string>(folded.size(), "sort.dlam"));
  EXPECT_EQ(folded.size(), 3u);
  // Full: sort's loops between the comparator and the top level.
  std::vector<std::string> full = traceFiles(true);
  EXPECT_GT(full.size(), folded.size());
  EXPECT_NE(std::find(full.begin(), full.end(), "<prelude>"), full.end());
  EXPECT_EQ(full.front(), "sort.dlam");
  EXPECT_EQ(full.back(), "sort.dlam");
}

}  // namespace
