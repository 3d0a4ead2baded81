// blas_test.cpp — dot's OpenBLAS, loaded when a product first needs it
// (stdlib/src/blas.cpp): nothing is loaded before, a VM with blas_threads 1 loads the
// serial build and one with more the threaded build, both compute the same products,
// a library that does not load is a runtime error naming it (and the VM goes on), and
// the configuration key's bad values are errors. ctest runs each test in a process of
// its own, so "not loaded yet" holds at a test's start; run all in one process (the
// executable alone), a test that needs it skips.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>

#include "config_loader.h"
#include "dlam/compiler.h"
#include "dlam/error.h"
#include "dlam/stdlib.h"
#include "dlam/vm.h"

namespace {

using dlam::Value;
using dlam::VM;

dlam::Config withThreads(uint32_t threads) {
  dlam::Config cfg;
  cfg.blasThreads = threads;
  return cfg;
}

std::string eval(VM& vm, const std::string& src) {
  return vm.show(dlam::evalSource(vm, src, "<test>"), true);
}

// A product large enough for dgemm (100 x 60 times 60 x 80), of exact values: A_ij =
// (i + 2j) mod 7, B_jk = (3j + k) mod 5, so that both builds give the same numbers.
const char* kProduct =
    "(define a (build-array '(100 60) (lambda (i j) (modulo (+ i (* 2 j)) 7))))"
    "(define b (build-array '(60 80) (lambda (j k) (modulo (+ (* 3 j) k) 5))))"
    "(define c (dot a b))"
    "(list (array-shape c) (array-ref c 0 0) (array-ref c 99 79) (sum c) (sum (* c c)))";

TEST(Blas, NothingIsLoadedBeforeAProductNeedsIt) {
  if (dlam::blasLoaded(false) || dlam::blasLoaded(true)) GTEST_SKIP() << "loaded by another test";
  VM vm;
  dlam::openStdlib(vm);
  // A small product is a loop: no library.
  EXPECT_EQ(eval(vm, "(sum (dot (make-array '(4 4) 1) (make-array '(4 4) 2)))"), "128");
  EXPECT_FALSE(dlam::blasLoaded(false));
  EXPECT_FALSE(dlam::blasLoaded(true));
  eval(vm, kProduct);
  EXPECT_TRUE(dlam::blasLoaded(false));
  EXPECT_FALSE(dlam::blasLoaded(true)) << "blas_threads 1: the serial build only";
}

// The same product on one thread and on two: the threaded build is loaded for the
// VM that asks for two, and the numbers agree with a loop's (computed here).
TEST(Blas, TwoThreadsComputeTheSameProductAsOne) {
  VM one(withThreads(1)), two(withThreads(2));
  dlam::openStdlib(one);
  dlam::openStdlib(two);
  double c00 = 0, c9979 = 0, total = 0, squares = 0;
  for (int i = 0; i < 100; ++i)
    for (int k = 0; k < 80; ++k) {
      double s = 0;
      for (int j = 0; j < 60; ++j) s += ((i + 2 * j) % 7) * ((3 * j + k) % 5);
      if (i == 0 && k == 0) c00 = s;
      if (i == 99 && k == 79) c9979 = s;
      total += s;
      squares += s * s;
    }
  auto num = [](double x) { return std::to_string(static_cast<long long>(x)); };
  std::string expected =
      "((100 80) " + num(c00) + " " + num(c9979) + " " + num(total) + " " + num(squares) + ")";
  EXPECT_EQ(eval(one, kProduct), expected);
  EXPECT_EQ(eval(two, kProduct), expected);
  EXPECT_TRUE(dlam::blasLoaded(true));
  // and its reverse (two products with a transposed operand, dgemm's flags)
  std::string grad = "(sum ((gradient (lambda (a) (sum (dot a b)))) a))";
  EXPECT_EQ(eval(two, grad), eval(one, grad));
}

// A library that does not load: a runtime error naming it and its Debian package, at
// the product; the VM goes on (small products are loops), and the serial build is
// not affected.
TEST(Blas, ALibraryThatDoesNotLoadIsARuntimeError) {
  if (dlam::blasLoaded(true)) GTEST_SKIP() << "the threaded build is loaded already";
  dlam::setBlasLibraryPaths(nullptr, "/nonexistent/openblas-pthread/libopenblas.so.0");
  VM vm(withThreads(4));
  dlam::openStdlib(vm);
  try {
    eval(vm, kProduct);
    ADD_FAILURE() << "no error";
  } catch (const dlam::Error& e) {
    EXPECT_EQ(e.kind, dlam::ErrorKind::Runtime);
    EXPECT_NE(e.message.find("dot: cannot load OpenBLAS /nonexistent/openblas-pthread/"
                             "libopenblas.so.0 (Debian package libopenblas0-pthread): "),
              std::string::npos)
        << e.message;
    EXPECT_EQ(e.loc.line, 1u);
  }
  vm.recover();
  EXPECT_FALSE(dlam::blasLoaded(true));
  EXPECT_EQ(eval(vm, "(sum (dot (make-array '(4 4) 1) (make-array '(4 4) 2)))"), "128");
  VM serial;
  dlam::openStdlib(serial);
  EXPECT_EQ(eval(serial, "(sum (dot (make-array '(30 30) 1) (make-array '(30 30) 2)))"), "54000");
}

dlam::Error configError(const std::string& text) {
  char path[] = "/tmp/dlam_blas_test_XXXXXX";
  int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  close(fd);
  dlam::Config cfg;
  try {
    dlam::loadConfigFile(path, cfg);
  } catch (const dlam::Error& e) {
    unlink(path);
    EXPECT_EQ(e.kind, dlam::ErrorKind::Config);
    return e;
  }
  unlink(path);
  ADD_FAILURE() << "no error for " << text;
  return dlam::Error(dlam::ErrorKind::Api, "no error");
}

TEST(Blas, TheConfigurationKeysBadValuesAreErrors) {
  EXPECT_EQ(configError("blas_threads = 0").message,
            "'blas_threads' must be an integer from 1 to 256, got 0");
  EXPECT_EQ(configError("blas_threads = 257").message,
            "'blas_threads' is too large (at most 256), got 257");
  EXPECT_EQ(configError("blas_threads = 1.5").message,
            "'blas_threads' must be an integer from 1 to 256, got 1.5");
  EXPECT_EQ(configError("\n blas_threads = '2'").message,
            "'blas_threads' must be an integer from 1 to 256, got string");
  EXPECT_EQ(configError("\n blas_threads = '2'").loc.line, 2u);
}

}  // namespace
