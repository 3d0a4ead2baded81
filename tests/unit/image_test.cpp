// image_test.cpp — the start-up image (compiler/src/image.cpp): the embedded one is
// used, a stale one (another prelude text, another format) is refused and the prelude
// compiled from source instead, and a VM loaded from the image behaves as one loaded
// from source: library gradients of every order, guard, errors, disassembly; a library
// function's code is decoded from the image only when it first runs.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "dlam/compiler.h"
#include "dlam/image.h"
#include "dlam/stdlib.h"
#include "dlam/vm.h"

namespace {

double num(dlam::VM& vm, const char* src) {
  dlam::Value v = dlam::evalSource(vm, src, "test.dlam");
  EXPECT_TRUE(v.isNumber()) << src << " gave " << vm.show(v);
  return v.isNumber() ? v.asNumber() : NAN;
}

// A copy of the embedded image with the byte at `at` changed (static: a VM keeps
// reading the image it loaded, for the IR its transform decodes later).
std::string_view altered(size_t at) {
  static std::vector<std::string> kept;
  std::string& s = kept.emplace_back(dlam::embeddedStdlibImage());
  s[at] ^= 0x5a;
  return s;
}

TEST(Image, TheEmbeddedImageIsUsed) {
  ASSERT_FALSE(dlam::embeddedStdlibImage().empty());
  dlam::VM vm;
  EXPECT_TRUE(dlam::openStdlibFrom(vm, dlam::embeddedStdlibImage()));
  EXPECT_EQ(vm.show(dlam::evalSource(vm, "(map (lambda (x) (* x x)) '(1 2 3))", "t.dlam")),
            "(1 4 9)");
}

// The header's key (bytes 12 to 19) or format version (8 to 11) not this build's: the
// image is not loaded, the prelude is compiled from source, and works.
TEST(Image, AnImageWithAnotherKeyOrVersionIsRefused) {
  for (size_t at : {8u, 12u, 19u}) {
    dlam::VM vm;
    EXPECT_FALSE(dlam::openStdlibFrom(vm, altered(at))) << at;
    EXPECT_EQ(vm.show(dlam::evalSource(vm, "(fold-left + 0 (map abs '(-1 2 -3)))", "t.dlam")), "6");
    EXPECT_DOUBLE_EQ(num(vm, "((gradient (lambda (x) (* x x x))) 2)"), 12);
  }
}

// An image made from another prelude text (a stale one: the prelude changed since) is
// refused: nothing it holds is loaded, and the real prelude is.
TEST(Image, AnImageOfAnotherPreludeTextIsRefused) {
  static std::string stale;
  {
    dlam::VM writer;
    dlam::openPrimitives(writer);
    writer.beginLibrary();
    std::string text(dlam::preludeSource());
    text += "\n(define image-test-stale 42)\n";
    stale = dlam::writeImage(writer, text, "<prelude>");
    writer.sealLibrary();
    EXPECT_EQ(writer.show(writer.libraryValue("image-test-stale")), "42");
  }
  dlam::VM vm;
  EXPECT_FALSE(dlam::openStdlibFrom(vm, stale));
  EXPECT_TRUE(vm.global("image-test-stale").isUndefined());
  EXPECT_EQ(vm.show(dlam::evalSource(vm, "(reverse (iota 3))", "t.dlam")), "(2 1 0)");
  EXPECT_NE(dlam::imageKey(dlam::preludeSource()),
            dlam::imageKey(std::string(dlam::preludeSource()) + " "));
}

// f(x) = sum over k = 1, 2, 3 of sin(k x), through the library's fold-left and map in a
// closure that captures x: f' = sum k cos(k x), f'' = -sum k^2 sin(k x).
TEST(Image, LibraryGradientsOfEveryOrderFromTheImage) {
  dlam::VM vm;
  ASSERT_TRUE(dlam::openStdlibFrom(vm, dlam::embeddedStdlibImage()));
  dlam::evalSource(vm, R"(
    (define (f x) (fold-left + 0 (map (lambda (k) (sin (* k x))) '(1 2 3))))
    (define f1 (derivative f))
    (define f2 (derivative (derivative f)))
    (define (g x) ((gradient (lambda (y) (* y (f1 x)))) 1)))",
                   "t.dlam");
  for (double x : {0.3, 1.1, -2.0}) {
    double d1 = 0, d2 = 0, fx = 0;
    for (int k = 1; k <= 3; ++k) {
      fx += std::sin(k * x);
      d1 += k * std::cos(k * x);
      d2 -= k * k * std::sin(k * x);
    }
    std::string at = std::to_string(x);
    EXPECT_NEAR(num(vm, ("(f " + at + ")").c_str()), fx, 1e-12);
    EXPECT_NEAR(num(vm, ("(f1 " + at + ")").c_str()), d1, 1e-12);
    EXPECT_NEAR(num(vm, ("(f2 " + at + ")").c_str()), d2, 1e-11);
    EXPECT_NEAR(num(vm, ("(g " + at + ")").c_str()), d1, 1e-12);
    const double h = 1e-5;
    auto central = [&](const char* fn) {
      std::string plus = "(" + std::string(fn) + " " + std::to_string(x + h) + ")";
      std::string minus = "(" + std::string(fn) + " " + std::to_string(x - h) + ")";
      return (num(vm, plus.c_str()) - num(vm, minus.c_str())) / (2 * h);
    };
    EXPECT_NEAR(central("f"), d1, 1e-6);
    EXPECT_NEAR(central("f1"), d2, 1e-6);
  }
}

// Loading the image decodes the code of the forms it runs, not of the functions they
// define: those are decoded when first called (Proto::lazyBody), also after collections
// that freed everything the loaded forms made and no longer need, and then run as code
// loaded from source does.
TEST(Image, LibraryCodeIsDecodedWhenFirstRun) {
  dlam::VM vm;
  ASSERT_TRUE(dlam::openStdlibFrom(vm, dlam::embeddedStdlibImage()));
  auto protoOf = [&](const char* name) {
    dlam::Value v = dlam::unwrapAttached(vm.libraryValue(name));
    EXPECT_TRUE(dlam::isClosure(v)) << name;
    return dlam::asClosure(v)->proto;
  };
  size_t lazy = 0, closures = 0;
  for (const auto& [name, sym] : vm.symbolTable()) {
    dlam::Value v = dlam::unwrapAttached(vm.libraryValue(name));
    if (!dlam::isClosure(v)) continue;
    ++closures;
    lazy += dlam::asClosure(v)->proto->lazyBody != 0;
  }
  EXPECT_GT(closures, 200u);
  EXPECT_GT(lazy, closures / 2) << lazy << " of " << closures;
  dlam::Proto* filter = protoOf("filter");
  dlam::Proto* dedup = protoOf("delete-duplicates");
  EXPECT_NE(filter->lazyBody, 0u);
  EXPECT_EQ(filter->callKey, dlam::kLazyCallKey);
  EXPECT_TRUE(filter->code.empty());
  dlam::evalSource(vm, "(define junk (length (map (lambda (i) (list i i)) (iota 200000))))",
                   "t.dlam");
  vm.collectGarbage(dlam::VM::GcKind::Major);
  vm.collectGarbage(dlam::VM::GcKind::Major);
  EXPECT_EQ(vm.show(dlam::evalSource(vm, "(filter odd? '(1 2 3 4 5))", "t.dlam")), "(1 3 5)");
  EXPECT_EQ(filter->lazyBody, 0u);
  EXPECT_EQ(filter->callKey, 2u);
  EXPECT_FALSE(filter->code.empty());
  // decoded by the transform, never called plain
  EXPECT_DOUBLE_EQ(
      num(vm, "((gradient (lambda (x) (apply + (delete-duplicates (list x (* x x) x))))) 3)"), 7);
  EXPECT_EQ(dedup->lazyBody, 0u);
  EXPECT_EQ(vm.show(dlam::evalSource(vm, "(delete-duplicates '(1 2 1 3 2))", "t.dlam")), "(1 2 3)");
}

TEST(Image, GuardFromTheImageServesUserCode) {
  dlam::VM vm;
  ASSERT_TRUE(dlam::openStdlibFrom(vm, dlam::embeddedStdlibImage()));
  EXPECT_EQ(
      vm.show(dlam::evalSource(
          vm, R"((guard (e ((string? e) (string-append "caught " e))) (raise "boom")))", "t.dlam")),
      "\"caught boom\"");
  EXPECT_EQ(vm.show(dlam::evalSource(vm, "(guard (e (#f 0)) (+ 1 2))", "t.dlam")), "3");
}

// What a program sees of the library — values, errors with their locations in the
// prelude, the disassembly of a library function — is the same from the image as from
// the source.
TEST(Image, AVmFromTheImageBehavesAsOneFromTheSource) {
  dlam::VM fromImage, fromSource;
  ASSERT_TRUE(dlam::openStdlibFrom(fromImage, dlam::embeddedStdlibImage()));
  ASSERT_FALSE(dlam::openStdlibFrom(fromSource, altered(12)));
  const char* programs[] = {
      "(map + '(1 2) '(10 20))",
      "((hessian (lambda (l) (* (car l) (car l) (cadr l)))) '(1 2))",
      "(jvp (lambda (l) (list (* (car l) (cadr l)))) '(2 3) '(1 0))",
      "(sort '(3 1 2) <)",
      "(map car 5)",
      "(fold-left 1 0 '(1 2))",
      "((gradient (lambda (v) (vector-sum (vector-map sin v)))) (vector 0 1))",
  };
  for (const char* p : programs) {
    auto run = [&](dlam::VM& vm) {
      try {
        return vm.show(dlam::evalSource(vm, p, "t.dlam"));
      } catch (const dlam::Error& e) {
        return "error " + e.message + " at " + e.file + ":" + std::to_string(e.loc.line) + ":" +
               std::to_string(e.loc.col);
      }
    };
    EXPECT_EQ(run(fromImage), run(fromSource)) << p;
  }
  for (const char* name : {"gradient", "sort", "filter", "hessian", "jacobian"}) {
    auto code = [&](dlam::VM& vm) {
      dlam::Value v = dlam::unwrapAttached(vm.libraryValue(name));
      EXPECT_TRUE(dlam::isClosure(v)) << name;
      return dlam::isClosure(v) ? vm.disassemble(dlam::asClosure(v)->proto) : vm.show(v);
    };
    std::string image = code(fromImage);
    EXPECT_EQ(image, code(fromSource)) << name;
    EXPECT_NE(image.find("<prelude>"), std::string::npos) << image;
  }
}

}  // namespace
