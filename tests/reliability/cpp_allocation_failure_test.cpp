// cpp_allocation_failure_test.cpp — reliability for the C++ side of the VM: every
// std::vector, std::string and hash-map growth of the reader, expander, ANF, code
// generator, reverse transform, interpreter, natives, printer and C API may fail, and
// each failure must end the run with the same clean error the GC heap gives ("out of
// memory", a limit error), after which the same VM works — never a crash, a std::bad_alloc
// escaping, a wrong answer, or a leak.
//
// alloc_hook.cpp replaces the global operator new of this binary; armed, it fails the
// N-th allocation of the run. For each script the sweep first counts the allocations of
// a whole run, then fails each of them in turn (a spread of them for long scripts;
// DLAM_RELIABILITY_EXHAUSTIVE=1 tries all) in a fresh VM with the standard library
// loaded. After each failure it checks that the outcome is the script's own or "out of
// memory", that the VM then runs a new program and the script itself, and that once the
// VM is freed every block allocated since its creation has been given back (the count
// of live blocks; under ASan LeakSanitizer checks too). A second sweep makes every
// allocation from the N-th on fail (memory that stays exhausted: the error paths' own
// allocations fail too). The same through the C API (dlam_eval, dlam_call,
// dlam_value_and_gradient, a host function calling back, and dlam_new), and two tests
// aimed at the collector and the symbol table. DLAM_OOM_TRACE=1 prints each point tried.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "alloc_hook.h"
#include "dlam.h"
#include "dlam/compiler.h"
#include "dlam/error.h"
#include "dlam/stdlib.h"
#include "dlam/vm.h"
#include "failure_points.h"

namespace {

using dlam::Error;
using dlam::ErrorKind;
using dlam::Value;
using dlam::VM;

// DLAM_OOM_TRACE=1: print each failure point before trying it (to find the one that crashes).
bool tracing() {
  const char* v = std::getenv("DLAM_OOM_TRACE");
  return v && *v && *v != '0';
}

// The failure points of a run of `total` allocations: all of them if there are at most
// `budget`, else the first budget/2 and then a strided spread up to the last one.
std::vector<uint64_t> failurePoints(uint64_t total, uint64_t budget) {
  return dlam::test::failurePoints(budget / 2, budget - budget / 2, total);
}

dlam::Config testConfig() {
  dlam::Config cfg;
  cfg.heapLimitMb = 64;
  cfg.stackLimit = 100000;
  cfg.sandbox = true;
  return cfg;
}

// What a run ended with: a value (shown) or an error, and what it displayed.
struct Outcome {
  enum Kind { Value, Error, Escaped } kind = Escaped;
  std::string text;  // the value's written form, the formatted error, or what escaped
  ErrorKind errorKind = ErrorKind::Runtime;
  std::string message;
  std::string output;
  bool badAlloc = false;  // escaped: std::bad_alloc

  bool outOfMemory() const {
    return kind == Error && errorKind == ErrorKind::Limit && message == "out of memory";
  }
  bool sameAs(const Outcome& o) const {
    return kind == o.kind && text == o.text && output == o.output;
  }
  std::string describe() const {
    std::string s = kind == Value ? "value " : kind == Error ? "error " : "escaped: ";
    s += text;
    if (!output.empty()) s += " (output \"" + output + "\")";
    return s;
  }
};

// Evaluates src in vm with the n-th allocation failing (0: none), *counted getting how
// many allocations the run made. Only the run is armed: the outcome is recorded after.
Outcome run(VM& vm, const std::string& src, uint64_t n, uint64_t* counted = nullptr,
            bool andAllAfter = false) {
  Outcome o;
  std::string out;
  out.reserve(256);
  vm.output = [&out](std::string_view s) { out.append(s); };
  Value v;
  alloc_hook::arm(n ? n : UINT64_MAX, andAllAfter);
  try {
    v = dlam::evalSource(vm, src, "<oom>");
    uint64_t c = alloc_hook::disarm();
    if (counted) *counted = c;
    o.kind = Outcome::Value;
    o.text = vm.show(v, true);
  } catch (const Error& e) {
    uint64_t c = alloc_hook::disarm();
    if (counted) *counted = c;
    o.kind = Outcome::Error;
    o.errorKind = e.kind;
    o.message = e.message;
    o.text = e.format();
  } catch (const std::bad_alloc&) {
    alloc_hook::disarm();
    o.kind = Outcome::Escaped;
    o.badAlloc = true;
    o.text = "std::bad_alloc";
  } catch (const std::exception& e) {
    alloc_hook::disarm();
    o.kind = Outcome::Escaped;
    o.text = std::string(typeid(e).name()) + ": " + e.what();
  } catch (...) {
    alloc_hook::disarm();
    o.kind = Outcome::Escaped;
    o.text = "an exception that is not a std::exception";
  }
  vm.output = [](std::string_view) {};
  o.output = out;
  return o;
}

std::string eval(VM& vm, const std::string& src) {
  try {
    return vm.show(dlam::evalSource(vm, src, "<check>"), true);
  } catch (const Error& e) {
    std::string s = "error: " + e.format();
    return s.size() > 400 ? s.substr(0, 400) + "..." : s;
  }
}

struct Script {
  const char* name;
  const char* setup;  // evaluated before the hook is armed (nullptr: none)
  const char* source;
  const char* expected;  // the written form of the value, or the start of the error message
  const char* output;    // what it displays
  uint64_t budget;       // failure points tried (per build type, see budgetScale)
};

const Script kScripts[] = {
    {"closures and lists", nullptr,
     "(define (make-adder n) (lambda (k) (+ n k)))\n"
     "(define adders (map make-adder (iota 6)))\n"
     "(define (compose f g) (lambda (x) (f (g x))))\n"
     "(define (sum l) (fold-left + 0 l))\n"
     "(let loop ((fs adders) (acc '()))\n"
     "  (if (null? fs)\n"
     "      (list (reverse acc) (sum (map (compose (car adders) (lambda (x) (* x x))) '(1 2 3)))\n"
     "            (apply + 1 2 '(3 4)) (filter (lambda (x) (> x 2)) (append '(1 2) (list 3 4))))\n"
     "      (begin (collect-garbage) (loop (cdr fs) (cons ((car fs) 10) acc)))))",
     "((10 11 12 13 14 15) 14 10 (3 4))", "", 600},
    {"gradient through a conditional and recursion", nullptr,
     "(define (pow x n) (if (= n 0) 1 (* x (pow x (- n 1)))))\n"
     "(define (f x) (if (> x 0) (+ (pow x 3) (* 2 x)) (- (* x x) x)))\n"
     "(list ((gradient f) 2) (begin (collect-garbage) ((gradient f) -1)))",
     "(14 -3)", "", 600},
    {"nested gradient (hessian)", nullptr,
     "(define (g v) (let ((x (car v)) (y (cadr v))) (+ (* x x y) (* 3 y y))))\n"
     "(list ((hessian g) '(1 2)) (begin (collect-garbage) ((gradient (gradient (lambda (x) (* x x "
     "x)))) 2)))",
     "(((4 2) (2 6)) 12)", "", 600},
    {"printing a structure", nullptr,
     "(define t (list 1 2.5 -0.125 \"a \\\"q\\\"\\n\" 'sym '(nested (list (1 . 2))) (cons 1 2) #t "
     "'() car))\n"
     "(collect-garbage)\n"
     "(display t) (newline) (write t) (newline) (print (number->string 1e21))\n"
     "(string-append \"x\" (number->string 42))",
     "\"x42\"",
     "(1 2.5 -0.125 a \"q\"\n sym (nested (list (1 . 2))) (1 . 2) #t () #<procedure car>)\n"
     "(1 2.5 -0.125 \"a \\\"q\\\"\\n\" sym (nested (list (1 . 2))) (1 . 2) #t () #<procedure "
     "car>)\n"
     "1e+21\n",
     400},
    {"a reader error", nullptr,
     "(define (f x) (let loop ((i 0) (acc '())) (if (= i x) acc (loop (+ i 1) (cons \"item\" "
     "acc)))))\n"
     "(define x (length (f 10)))\n(display (list x 2 \"a string\" 'a-symbol))\n(+ x (car '(1 . 2 "
     "3)))",
     "<oom>:4:", "", 600},
    // Functions defined before the run: their reverse transforms and the *j of the
    // closures they capture are cached on them, and the run after a failure reuses
    // whatever the failed run left there.
    {"gradients of functions defined before the run",
     "(define k 3)\n"
     "(define c (let ((l (list 1 2)) (m (lambda (y) (* y k)))) (lambda (x) (* x (m (car l)) (cadr "
     "l)))))\n"
     "(define (h x) (let loop ((i 0) (acc 0)) (if (= i 3) acc (loop (+ i 1) (+ acc (* x (c "
     "x)))))))\n"
     "(define (u x) (let ((f (lambda (y) (* x y y)))) (f (f x))))\n",
     "(list ((gradient c) 2) ((gradient h) 1) ((gradient (gradient u)) 1) ((gradient (lambda (x) "
     "(c (h x)))) 1))",
     "(6 36 42 216)", "", 600},
};

void PrintTo(const Script& s, std::ostream* os) { *os << s.name; }

void setUp(VM& vm, const Script& sc) {
  if (sc.setup) dlam::evalSource(vm, sc.setup, "<setup>");
}

// Under sanitizers every allocation costs several times more, and with GC stress every
// call collects: fewer points there.
uint64_t budgetScale(uint64_t budget) {
#if defined(DLAM_GC_STRESS)
  return budget / 3;
#elif defined(__SANITIZE_ADDRESS__)
  return budget / 4;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return budget / 4;
#else
  return budget;
#endif
#else
  return budget;
#endif
}

class CppAllocationFailure : public ::testing::TestWithParam<Script> {
 protected:
  // The run without failures: what the script gives, and how many allocations it makes.
  void SetUp() override {
    const Script& sc = GetParam();
    for (int warm = 0; warm < 2; ++warm) {  // the first run also initialises lazy statics
      uint64_t before = alloc_hook::liveBlocks();
      {
        VM vm(testConfig());
        dlam::openStdlib(vm);
        setUp(vm, sc);
        want_ = run(vm, sc.source, 0, &total_);
      }
      if (warm == 1) {
        EXPECT_EQ(alloc_hook::liveBlocks(), before) << "a run without failures leaks";
      }
    }
    if (want_.kind == Outcome::Value) {
      ASSERT_EQ(want_.text, sc.expected);
    } else {
      ASSERT_EQ(want_.kind, Outcome::Error) << want_.describe();
      ASSERT_EQ(want_.text.rfind(sc.expected, 0), 0u) << want_.describe();
    }
    ASSERT_EQ(want_.output, sc.output);
    ASSERT_GT(total_, 50u) << "the hook counts the run's allocations";
  }

  // Runs the script in a fresh VM with allocation n failing (and with `andAllAfter`, every
  // one after it), checks the outcome, and that the VM then runs a new program and the
  // script itself, and that nothing leaked once it is freed.
  void tryFailure(uint64_t n, bool andAllAfter) {
    const Script& sc = GetParam();
    if (tracing())
      std::fprintf(stderr, "%s: allocation %llu\n", sc.name, static_cast<unsigned long long>(n));
    uint64_t before = alloc_hook::liveBlocks();
    {
      VM vm(testConfig());
      dlam::openStdlib(vm);
      setUp(vm, sc);
      Outcome got = run(vm, sc.source, n, nullptr, andAllAfter);
      bool injected = alloc_hook::failed();
      if (n > total_) {
        EXPECT_FALSE(injected) << "the run made more allocations than counted (" << total_ << ")";
        EXPECT_TRUE(got.sameAs(want_)) << "allocation " << n << ": " << got.describe();
      } else if (got.outOfMemory() || (andAllAfter && got.badAlloc)) {
        // (With no memory left, not even the error can be made: std::bad_alloc itself
        // leaves evalSource, and the entry points report it as "out of memory".)
        ++outOfMemory_;
      } else {
        // The failure was absorbed (say a cache that is simply not filled): the result
        // must then be the right one.
        EXPECT_TRUE(got.sameAs(want_))
            << "allocation " << n << " of " << total_ << ": got " << got.describe() << "; want "
            << want_.describe() << " or \"out of memory\"";
        ++absorbed_;
      }
      vm.recover();
      EXPECT_EQ(eval(vm,
                     "(let loop ((i 0) (acc '())) (if (= i 100) (length acc) (loop (+ i 1) (cons i "
                     "acc))))"),
                "100")
          << "allocation " << n << ": a new program after the failure";
      EXPECT_EQ(eval(vm, "((gradient (lambda (x) (* x x x))) 2)"), "12")
          << "allocation " << n << ": a gradient after the failure";
      Outcome again = run(vm, sc.source, 0);
      EXPECT_TRUE(again.sameAs(want_))
          << "allocation " << n << ": the script again after the failure: " << again.describe();
    }
    EXPECT_EQ(alloc_hook::liveBlocks(), before) << "allocation " << n << ": blocks leaked";
  }

  void report(const char* what, size_t points, std::chrono::steady_clock::time_point start) {
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    RecordProperty("allocations", std::to_string(total_));
    RecordProperty("failure_points", std::to_string(points));
    std::printf(
        "  %s, %s: %llu allocations, %zu failure points (%zu out of memory, %zu absorbed), %.2f "
        "s\n",
        GetParam().name, what, static_cast<unsigned long long>(total_), points, outOfMemory_,
        absorbed_, seconds);
  }

  Outcome want_;
  uint64_t total_ = 0;
  size_t outOfMemory_ = 0, absorbed_ = 0;
};

TEST_P(CppAllocationFailure, EveryFailureIsOutOfMemoryAndTheVmGoesOn) {
  auto start = std::chrono::steady_clock::now();
  std::vector<uint64_t> points = failurePoints(total_, budgetScale(GetParam().budget));
  points.push_back(total_ + 1);  // past the last allocation: the run completes
  for (uint64_t n : points) {
    tryFailure(n, false);
    if (HasFailure()) break;  // the first broken point is the one to look at
  }
  report("one failure", points.size() - 1, start);
  EXPECT_GT(outOfMemory_, 0u);
}

// Memory that stays exhausted: from the n-th allocation on, every one fails, the error
// paths' own included. A spread of points.
TEST_P(CppAllocationFailure, MemoryThatStaysExhaustedIsOutOfMemoryToo) {
  auto start = std::chrono::steady_clock::now();
  std::vector<uint64_t> points;
  uint64_t count = budgetScale(60);
  for (uint64_t i = 0; i < count; ++i) points.push_back(1 + i * total_ / count);
  for (uint64_t n : points) {
    tryFailure(n, true);
    if (HasFailure()) break;
  }
  report("all failing from one on", points.size(), start);
  EXPECT_EQ(outOfMemory_, points.size());
}

INSTANTIATE_TEST_SUITE_P(Scripts, CppAllocationFailure, ::testing::ValuesIn(kScripts),
                         [](const ::testing::TestParamInfo<Script>& info) {
                           std::string s;
                           for (const char* p = info.param.name; *p; ++p)
                             s += std::isalnum(static_cast<unsigned char>(*p)) ? *p : '_';
                           return s;
                         });

// ---------------------------------------------------------------------------------------
// The same through the C API: a failure inside dlam_eval, dlam_call, dlam_value_and_gradient
// or a host function is DLAM_ERR_LIMIT with "out of memory" in dlam_last_error.

const char kApiSetup[] =
    "(define (pow x n) (if (= n 0) 1 (* x (pow x (- n 1)))))\n"
    "(define (f x y) (if (> x 0) (+ (pow x 3) (* x y)) (- (* y y) x)))\n";

// A host function: (host-scale x) = (* 2 (dlam-side x)), calling back into dlam.
dlam_status hostScale(dlam_vm* vm, int argc, const dlam_val* argv, dlam_val* result, void*) {
  dlam_val inner = dlam_get_global(vm, "pow");
  if (!inner) return DLAM_ERR_RUNTIME;
  dlam_val two = dlam_number(vm, 2);
  if (!two) {
    dlam_release(vm, inner);
    return DLAM_ERR_LIMIT;
  }
  dlam_val args[2] = {argv[0], two};
  dlam_val sq = nullptr;
  dlam_status st = dlam_call(vm, inner, 2, args, &sq);
  dlam_release(vm, inner);
  dlam_release(vm, two);
  if (st != DLAM_OK) return st;
  *result = sq;
  return DLAM_OK;
}

struct ApiOutcome {
  dlam_status status = DLAM_OK;
  std::string error;
  std::vector<double> numbers;
};

// One run through the API: an eval, a call, a gradient, and a host function calling back.
ApiOutcome apiRun(dlam_vm* vm, dlam_val f) {
  ApiOutcome o;
  double results[5] = {0, 0, 0, 0, 0};
  // The message of the first failure, copied at once (the next call clears it) and
  // without allocating (the hook is armed).
  char message[512] = "";
  auto step = [&](dlam_status st) {
    if (st != DLAM_OK && o.status == DLAM_OK) {
      o.status = st;
      std::snprintf(message, sizeof message, "%s", dlam_last_error(vm));
    }
    return st == DLAM_OK;
  };
  dlam_val r = nullptr;
  if (step(dlam_eval(vm, "((gradient f) 2 3)", "<api>", &r))) {
    size_t count = 0;
    step(dlam_to_numbers(vm, r, results, 2, &count));
    dlam_release(vm, r);
  }
  if (o.status == DLAM_OK) {
    dlam_val args[2] = {dlam_number(vm, 1.5), dlam_number(vm, -2)};
    if (!args[0] || !args[1]) step(DLAM_ERR_LIMIT);
    dlam_val y = nullptr;
    if (o.status == DLAM_OK && step(dlam_call(vm, f, 2, args, &y))) {
      step(dlam_to_number(vm, y, &results[2]));
      dlam_release(vm, y);
    }
    dlam_release(vm, args[0]);
    dlam_release(vm, args[1]);
  }
  if (o.status == DLAM_OK) {
    double x[2] = {2, 3}, g[2];
    double value;
    if (step(dlam_value_and_gradient(vm, f, 2, x, &value, g)))
      results[3] = g[0] + 10 * g[1] + 100 * value;
  }
  if (o.status == DLAM_OK) {
    dlam_val h = nullptr;
    if (step(dlam_eval(vm, "(+ 1 (host-scale 3))", "<api>", &h))) {
      step(dlam_to_number(vm, h, &results[4]));
      dlam_release(vm, h);
    }
  }
  alloc_hook::disarm();
  if (o.status != DLAM_OK) o.error = message;
  o.numbers.assign(results, results + 5);
  return o;
}

dlam_vm* newApiVm(dlam_val* f) {
  dlam_vm* vm = dlam_new(nullptr);
  if (!vm) return nullptr;
  if (dlam_eval(vm, kApiSetup, "<setup>", nullptr) != DLAM_OK ||
      dlam_register(vm, "host-scale", 1, hostScale, nullptr) != DLAM_OK) {
    dlam_free(vm);
    return nullptr;
  }
  *f = dlam_get_global(vm, "f");
  return vm;
}

TEST(CppAllocationFailureThroughTheCApi, EveryFailureIsAnOutOfMemoryStatus) {
  auto start = std::chrono::steady_clock::now();
  ApiOutcome want;
  uint64_t total = 0;
  for (int warm = 0; warm < 2; ++warm) {
    dlam_val f = nullptr;
    dlam_vm* vm = newApiVm(&f);
    ASSERT_TRUE(vm && f);
    alloc_hook::arm(UINT64_MAX);
    want = apiRun(vm, f);
    total = alloc_hook::disarm();
    dlam_release(vm, f);
    dlam_free(vm);
  }
  ASSERT_EQ(want.status, DLAM_OK) << want.error;
  // ((gradient f) 2 3) = (3x² + y, x) = (15 2); f(1.5, -2) = 0.375; at (2, 3): 15 + 10·2 + 100·14;
  // (+ 1 (host-scale 3)) = 10.
  std::vector<double> expected{15, 2, 0.375, 15 + 20 + 1400, 10};
  ASSERT_EQ(want.numbers, expected);

  // One failure at each point; then memory that stays exhausted from a spread of points on.
  for (bool andAllAfter : {false, true}) {
    std::vector<uint64_t> points;
    if (!andAllAfter) {
      points = failurePoints(total, budgetScale(600));
      points.push_back(total + 1);
    } else {
      uint64_t count = budgetScale(60);
      for (uint64_t i = 0; i < count; ++i) points.push_back(1 + i * total / count);
    }
    size_t outOfMemory = 0;
    for (uint64_t n : points) {
      if (tracing())
        std::fprintf(stderr, "C API: allocation %llu\n", static_cast<unsigned long long>(n));
      uint64_t before = alloc_hook::liveBlocks();
      {
        dlam_val f = nullptr;
        dlam_vm* vm = newApiVm(&f);
        ASSERT_TRUE(vm && f);
        alloc_hook::arm(n, andAllAfter);
        ApiOutcome got = apiRun(vm, f);
        if (got.status == DLAM_OK) {
          // Past the last allocation, or the failure was absorbed (say by a collection
          // that frees the rest of the garbage next time): the right numbers.
          EXPECT_EQ(got.numbers, expected) << "allocation " << n << " of " << total;
        } else {
          ++outOfMemory;
          EXPECT_EQ(got.status, DLAM_ERR_LIMIT) << "allocation " << n << ": " << got.error;
          EXPECT_NE(got.error.find("out of memory"), std::string::npos)
              << "allocation " << n << ": " << got.error;
        }
        // The same VM, with the same handle, works again.
        ApiOutcome again = apiRun(vm, f);
        EXPECT_EQ(again.status, DLAM_OK)
            << "allocation " << n << ": after the failure: " << again.error;
        EXPECT_EQ(again.numbers, expected) << "allocation " << n << ": after the failure";
        dlam_release(vm, f);
        dlam_free(vm);
      }
      EXPECT_EQ(alloc_hook::liveBlocks(), before) << "allocation " << n << ": blocks leaked";
      if (HasFailure()) break;
    }
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("  C API, %s: %llu allocations, %zu failure points (%zu out of memory), %.2f s\n",
                andAllAfter ? "all failing from one on" : "one failure",
                static_cast<unsigned long long>(total), points.size(), outOfMemory, seconds);
    EXPECT_GT(outOfMemory, 0u);
    if (HasFailure()) break;
  }
}

// dlam_new (which loads the standard library) with one of its allocations failing: NULL,
// or, if the failure was absorbed, a VM that works.
TEST(CppAllocationFailureThroughTheCApi, CreatingAVmGivesNullOrAWorkingVm) {
  auto start = std::chrono::steady_clock::now();
  uint64_t total = 0;
  for (int warm = 0; warm < 2; ++warm) {
    alloc_hook::arm(UINT64_MAX);
    dlam_vm* vm = dlam_new(nullptr);
    total = alloc_hook::disarm();
    ASSERT_NE(vm, nullptr);
    dlam_free(vm);
  }
  std::vector<uint64_t> points = failurePoints(total, budgetScale(300));
  size_t nulls = 0;
  for (uint64_t n : points) {
    if (tracing())
      std::fprintf(stderr, "dlam_new: allocation %llu\n", static_cast<unsigned long long>(n));
    uint64_t before = alloc_hook::liveBlocks();
    alloc_hook::arm(n);
    dlam_vm* vm = dlam_new(nullptr);
    alloc_hook::disarm();
    if (!vm) {
      ++nulls;
    } else {
      dlam_val r = nullptr;
      double x = 0;
      EXPECT_EQ(dlam_eval(vm, "((gradient (lambda (x) (* x (sin x)))) 0)", "<check>", &r), DLAM_OK)
          << "allocation " << n << ": " << dlam_last_error(vm);
      EXPECT_EQ(dlam_to_number(vm, r, &x), DLAM_OK);
      EXPECT_EQ(x, 0.0);
      dlam_release(vm, r);
      dlam_free(vm);
    }
    EXPECT_EQ(alloc_hook::liveBlocks(), before) << "allocation " << n << ": blocks leaked";
    if (HasFailure()) break;
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("  dlam_new: %llu allocations, %zu failure points (%zu NULL), %.2f s\n",
              static_cast<unsigned long long>(total), points.size(), nulls, seconds);
  EXPECT_GT(nulls, 0u);
}

// Interning symbols whose names need memory of their own, with each allocation failing
// in turn (in a VM without the stdlib, whose table of objects to finalise still grows
// often): every name is freed with the VM.
TEST(CppAllocationFailureInTheVm, InterningLeaksNothing) {
  for (uint64_t n = 1; n <= 200; ++n) {
    uint64_t before = alloc_hook::liveBlocks();
    bool failed = false;
    {
      VM vm(testConfig());
      alloc_hook::arm(n);
      try {
        for (int i = 0; i < 40; ++i) vm.intern("a-symbol-with-a-long-name-" + std::to_string(i));
      } catch (const std::bad_alloc&) {
        failed = true;
      }
      alloc_hook::disarm();
      vm.collectGarbage();
      EXPECT_EQ(vm.intern("a-symbol-with-a-long-name-39")->name, "a-symbol-with-a-long-name-39");
    }
    EXPECT_EQ(alloc_hook::liveBlocks(), before) << "allocation " << n << ": blocks leaked";
    if (!failed || HasFailure()) break;
  }
}

// A collection whose own allocations fail (the mark stack, the list of the dead), each in
// turn. The next collection must keep every live object: after it, a program that
// allocates objects of every size (reusing whatever was freed) and then uses the live
// data and the prelude must still give the right answers.
TEST(CppAllocationFailureInTheVm, ACollectionThatFailsLeavesTheHeapWhole) {
#ifdef DLAM_GC_STRESS
  GTEST_SKIP() << "quadratic when every call collects (the sweeps fail collections there)";
#endif
  for (uint64_t n = 1; n <= 100; ++n) {
    uint64_t before = alloc_hook::liveBlocks();
    bool failed = false;
    {
      VM vm(testConfig());
      dlam::openStdlib(vm);
      dlam::evalSource(vm,
                       "(define keep (map (lambda (i) (cons i (lambda () (* 2 i)))) (iota 1000)))",
                       "<setup>");
      alloc_hook::arm(n);
      try {
        vm.collectGarbage();
      } catch (const std::bad_alloc&) {
        failed = true;
      }
      alloc_hook::disarm();
      vm.collectGarbage();
      EXPECT_EQ(eval(vm,
                     "(length (map (lambda (i) (list i (number->string i) (lambda () i) (let ((a "
                     "i) (b 2) (c 3)) "
                     "(lambda () (+ a b c))) (string-append \"s\" (number->string (* i i))))) "
                     "(iota 20000)))"),
                "20000")
          << "allocation " << n;
      EXPECT_EQ(eval(vm, "(fold-left + 0 (map (lambda (p) ((cdr p))) keep))"), "999000")
          << "allocation " << n;
      EXPECT_EQ(eval(vm, "((gradient (lambda (x) (* x x x))) 2)"), "12") << "allocation " << n;
    }
    EXPECT_EQ(alloc_hook::liveBlocks(), before) << "allocation " << n << ": blocks leaked";
    if (!failed || HasFailure()) break;
  }
}

// The hook itself: each variant of operator new fails when chosen, and nothrow gives NULL.
TEST(AllocHook, FailsTheChosenAllocation) {
  {
    // Called directly: clang may elide a new-expression whose result is unused, which
    // would shift the count.
    alloc_hook::Armed armed(2);
    void* a = ::operator new(sizeof(int));
    EXPECT_THROW((void)::operator new(sizeof(int)), std::bad_alloc);
    void* b = ::operator new[](4 * sizeof(int));
    ::operator delete(a);
    ::operator delete[](b);
  }
  EXPECT_TRUE(alloc_hook::failed());
  {
    alloc_hook::Armed armed(1);
    EXPECT_EQ(::operator new(64, std::nothrow), nullptr);
  }
  {
    alloc_hook::Armed armed(1);
    EXPECT_THROW((void)::operator new(64, std::align_val_t(64)), std::bad_alloc);
  }
  void* p = ::operator new(64, std::align_val_t(64));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  ::operator delete(p, std::align_val_t(64));
}

// A script file read with one of its allocations failing: the whole file runs, or
// nothing does and the run is "out of memory" -- never the part read so far (reading
// with `stream << rdbuf()` swallowed the failure and ran a truncated script). The file
// is 200 KB of comment (several read buffers, so the text grows while it is read)
// followed by two forms; the first failure points fall in the read.
TEST(CppAllocationFailureFiles, AScriptFileRunsWholeOrNotAtAll) {
  char path[] = "/tmp/dlam_oom_file_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  {
    std::ofstream out(path, std::ios::binary);
    std::string comment = "; " + std::string(97, 'x') + "\n";
    for (int i = 0; i < 2000; ++i) out << comment;
    out << "(define a 1)\n(list a 2)\n";
  }
  const std::string file = path;  // made before the hook is armed
  auto runFile = [&](uint64_t n, uint64_t* counted) {
    VM vm(testConfig());
    dlam::openStdlib(vm);
    std::string got;
    alloc_hook::arm(n ? n : UINT64_MAX);
    try {
      Value v = dlam::evalFile(vm, file);
      uint64_t c = alloc_hook::disarm();  // only the run is armed, not showing its value
      if (counted) *counted = c;
      got = vm.show(v, true);
    } catch (const Error& e) {
      alloc_hook::disarm();
      got = e.kind == ErrorKind::Limit && e.message == "out of memory" ? "out of memory"
                                                                       : "error: " + e.format();
    } catch (const std::bad_alloc&) {
      alloc_hook::disarm();
      got = "std::bad_alloc escaped";
    }
    return got;
  };
  uint64_t total = 0;
  ASSERT_EQ(runFile(0, &total), "(1 2)");
  size_t outOfMemory = 0;
  for (uint64_t n : failurePoints(total, budgetScale(200))) {
    std::string got = runFile(n, nullptr);
    if (got == "out of memory")
      ++outOfMemory;
    else
      EXPECT_EQ(got, "(1 2)") << "allocation " << n << " of " << total;
    if (HasFailure()) break;
  }
  EXPECT_GT(outOfMemory, 0u);
  std::remove(path);
}

}  // namespace
