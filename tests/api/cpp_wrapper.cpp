// cpp_wrapper.cpp — the C++ wrapper (dlam.hpp): RAII handles, exceptions, calls, gradients.
#include "dlam.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

static int failures = 0;
#define EXPECT(cond)                                                                 \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "%s:%d: EXPECT failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                                    \
    }                                                                                \
  } while (0)

template <class F>
static dlam_status statusOf(F&& f) {
  try {
    f();
  } catch (const dlam::Exception& e) {
    return e.status();
  }
  return DLAM_OK;
}

static double square(const double* x, void*) { return x[0] * x[0]; }
static void squareVjp(const double* x, double ybar, double* xbar, void*) {
  xbar[0] = 2 * x[0] * ybar;
}

// (scaled a b ...): the sum of its arguments times *ud; a non-number fails.
static dlam_status scaled(dlam_vm* vm, int argc, const dlam_val* argv, dlam_val* result, void* ud) {
  double sum = 0;
  for (int i = 0; i < argc; ++i) {
    double x = 0;
    if (dlam_to_number(vm, argv[i], &x) != DLAM_OK) {
      dlam_set_error(vm, "scaled: expected numbers");
      return DLAM_ERR_RUNTIME;
    }
    sum += x;
  }
  *result = dlam_number(vm, sum * *static_cast<double*>(ud));
  return DLAM_OK;
}

// Host functions that let C++ exceptions out: a std::exception, a dlam::Exception from a
// nested call through the wrapper, something that is no std::exception at all, one thrown
// after storing a result, and from a numeric function and from its vjp.
static dlam_status throwsStd(dlam_vm*, int, const dlam_val*, dlam_val*, void*) {
  throw std::runtime_error("disk on fire");
}
static dlam_status throwsNested(dlam_vm* vm, int, const dlam_val*, dlam_val*, void*) {
  dlam::detail::check(vm, dlam_eval(vm, "(car 5)", "nested.dlam", nullptr));
  return DLAM_OK;
}
static dlam_status throwsInt(dlam_vm*, int, const dlam_val*, dlam_val*, void*) { throw 42; }
static dlam_status throwsAfterResult(dlam_vm* vm, int, const dlam_val*, dlam_val* result, void*) {
  *result = dlam_number(vm, 1);
  throw std::logic_error("changed my mind");
}
static double throwingNumeric(const double* x, void*) {
  if (x[0] < 0) throw std::domain_error("negative");
  return x[0];
}
static void throwingVjp(const double*, double, double*, void*) {
  throw std::runtime_error("no derivative today");
}

static void testForeignExceptions() {
  dlam::Vm vm;
  vm.registerFunction("throws-std", -1, throwsStd);
  vm.registerFunction("throws-nested", 0, throwsNested);
  vm.registerFunction("throws-int", 0, throwsInt);
  vm.registerFunction("throws-after-result", 0, throwsAfterResult);
  vm.registerNumeric("checked", 1, throwingNumeric, throwingVjp);
  struct Case {
    const char* source;
    const char* message;
  } cases[] = {
      {"(+ 1 (throws-std 2))",
       "t.dlam:1:6: error: throws-std: the host function threw an exception: disk on fire"},
      {"(throws-nested)",
       "t.dlam:1:1: error: throws-nested: the host function threw an exception: "
       "nested.dlam:1:1: error: car: expected pair as argument 1, got 5"},
      {"(throws-int)", "t.dlam:1:1: error: throws-int: the host function threw an exception\n"},
      {"(throws-after-result)",
       "t.dlam:1:1: error: throws-after-result: the host function threw an exception: changed"},
      {"(checked -1)",
       "t.dlam:1:1: error: checked: the host function threw an exception: negative"},
      {"((gradient checked) 2)",
       "error: checked: the host function threw an exception: no derivative today"},
  };
  for (const Case& c : cases) {
    try {
      vm.eval(c.source, "t.dlam");
      std::fprintf(stderr, "%s did not fail\n", c.source);
      ++failures;
    } catch (const dlam::Exception& e) {
      EXPECT(e.status() == DLAM_ERR_RUNTIME);
      if (!std::strstr(e.what(), c.message)) {
        std::fprintf(stderr, "%s: expected \"%s\" in: %s\n", c.source, c.message, e.what());
        ++failures;
      }
    }
    EXPECT(vm.eval("(+ 1 2)").number() == 3);  // usable after each
  }
  // a dlam guard catches it like any error; the numeric function still works for good input
  EXPECT(vm.eval("(guard (e (#t 7)) (throws-std))").number() == 7);
  EXPECT(vm.eval("(checked 5)").number() == 5);
}

int main() {
  try {
    testForeignExceptions();
  } catch (const dlam::Exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    ++failures;
  }
  try {
    dlam::Vm vm;
    vm.eval("(define (f x y) (* x (sin y)))");
    dlam::Val f = vm.global("f");
    EXPECT(f);
    std::vector<double> g;
    double y = vm.valueAndGradient(f, {2, 0}, g);
    EXPECT(y == 0 && g.size() == 2 && g[0] == 0 && g[1] == 2);
    EXPECT(f(3.0, 0.5).number() == 3 * std::sin(0.5));
    EXPECT(vm.eval("(+ 1 2)").number() == 3);
    EXPECT(!vm.global("no-such-thing"));

    // copies duplicate the handle, moves transfer it
    dlam::Val a = vm.number(4);
    dlam::Val b = a;
    a.reset();
    EXPECT(!a && b.number() == 4);
    dlam::Val c = std::move(b);
    EXPECT(!b && c.number() == 4);
    dlam::Val d;
    d = c;
    EXPECT(d.number() == 4 && c.number() == 4);

    // lists
    dlam::Val l = vm.list({1, 2, 3});
    vm.setGlobal("l", l);
    EXPECT(vm.eval("(fold-left + 0 l)").number() == 6);
    std::vector<double> sq = vm.eval("(map (lambda (x) (* x x)) l)").numbers();
    EXPECT((sq == std::vector<double>{1, 4, 9}));
    EXPECT(vm.eval("'()").numbers().empty());

    // host functions
    vm.registerNumeric("square", 1, square, squareVjp);
    EXPECT(vm.eval("((gradient (lambda (x) (* x (square x)))) 2)").number() == 12);
    double factor = 10;
    vm.registerFunction("scaled", -1, scaled, &factor);
    EXPECT(vm.eval("(scaled 1 2 3.5)").number() == 65);
    EXPECT(vm.eval("(scaled)").number() == 0);
    EXPECT(statusOf([&] { vm.eval("(scaled 1 'x)"); }) == DLAM_ERR_RUNTIME);
    EXPECT(statusOf([&] { vm.registerFunction("bad", 300, scaled); }) == DLAM_ERR_API);

    // errors become exceptions with the status and message
    EXPECT(statusOf([&] { vm.eval("(car 1)", "bad.dlam"); }) == DLAM_ERR_RUNTIME);
    // so does an exit, with its status in exitCode()
    EXPECT(statusOf([&] { vm.eval("(+ 1 (exit 3))"); }) == DLAM_EXIT);
    EXPECT(vm.exitCode() == 3);
    try {
      vm.eval("(+ 1", "syntax.dlam");
      EXPECT(false);
    } catch (const dlam::Exception& e) {
      EXPECT(e.status() == DLAM_ERR_SYNTAX);
      EXPECT(std::strstr(e.what(), "syntax.dlam:1:") != nullptr);
    }
    EXPECT(statusOf([&] { vm.eval("\"text\"").number(); }) == DLAM_ERR_RUNTIME);
    EXPECT(statusOf([&] { f(1.0); }) == DLAM_ERR_RUNTIME);
    EXPECT(vm.eval("(* 6 7)").number() == 42);
  } catch (const dlam::Exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    ++failures;
  }

  // a VM is movable (Vals must not outlive their Vm: this one has none left)
  try {
    dlam::Vm one;
    one.eval("(define z 5)");
    dlam::Vm two = std::move(one);
    EXPECT(two.eval("z").number() == 5);
    one = std::move(two);
    EXPECT(one.eval("(+ z 1)").number() == 6);
  } catch (const dlam::Exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    ++failures;
  }

  // a bad configuration throws from the constructor
  EXPECT(statusOf([] { dlam::Vm bad("/nonexistent/config.lua"); }) == DLAM_ERR_CONFIG);

  if (failures) {
    std::fprintf(stderr, "%d failure(s)\n", failures);
    return 1;
  }
  std::puts("ok");
  return 0;
}
