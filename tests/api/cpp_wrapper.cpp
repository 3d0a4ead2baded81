// cpp_wrapper.cpp — the C++ wrapper (dlam.hpp): RAII handles, exceptions, calls, gradients.
#include "dlam.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
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

int main() {
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
