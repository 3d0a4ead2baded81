// library_immunity_test.cpp — a program that defines its own version of any name the
// standard library uses (map, reverse, length, fold-left, car, * ...: Scheme code brought
// from elsewhere often does) does not change what the library computes: the prelude's
// code calls its own definitions (vm/src/library.cpp).
#include <gtest/gtest.h>

#include <string>

#include "dlam/compiler.h"
#include "dlam/stdlib.h"
#include "dlam/vm.h"

namespace {

// Library calls whose results must not change. The battery's own names are let-bound
// before anything is redefined, so it sees the library's values whatever the program
// defines afterwards.
const char* kBattery = R"(
(define battery
  (let ((gradient gradient) (hessian hessian) (jacobian jacobian) (jvp jvp) (vjp vjp)
        (derivative derivative) (value-and-gradient value-and-gradient)
        (sort sort) (filter filter) (take take) (drop drop) (partition partition)
        (delete-duplicates delete-duplicates) (list-tabulate list-tabulate)
        (fixed-point* fixed-point*) (map* map*) (custom-vjp custom-vjp) (log1pexp log1pexp)
        (assoc assoc) (append-map append-map) (reduce reduce) (vector-map vector-map)
        (vector-sum vector-sum) (vector vector) (iota iota) (apply apply) (mapf map)
        (foldl fold-left) (revf reverse) (lenf length) (listf list)
        (car car) (cadr cadr) (cdr cdr) (mul *) (add +) (sub -) (div /) (absf abs) (lt <)
        (sinf sin) (odd odd?))
    (lambda ()
      (listf
        ((gradient (lambda (x) (mul x x x))) 2)
        ((gradient (lambda (l) (foldl add 0 (mapf (lambda (x) (mul x x)) l)))) '(1 2 3))
        ((gradient (lambda (x y) (mul x (sinf y)))) 2 0)
        ((hessian (lambda (l) (mul (car l) (car l) (cadr l)))) '(1 2))
        ((jacobian (lambda (l) (listf (mul (car l) (cadr l)) (car l)))) '(1 2))
        (jvp (lambda (l) (listf (mul (car l) (cadr l)))) '(2 3) '(1 0))
        ((cdr (vjp (lambda (x) (mul x x)) 3)) 1)
        ((derivative (derivative (derivative sinf))) 0)
        ((value-and-gradient (lambda (l) (apply mul l))) '(2 3 4))
        ((gradient (lambda (x) (mul x ((gradient (lambda (y) (add x y))) 1)))) 2)
        (sort '(3 1 2) lt) (filter odd '(1 2 3)) (take '(1 2 3) 2) (drop '(1 2 3) 2)
        (partition odd '(1 2 3)) (delete-duplicates '(1 2 1)) (list-tabulate 3 (lambda (i) i))
        (revf '(1 2 3)) (lenf '(1 2 3)) (assoc 2 '((1 . a) (2 . b))) (reduce add 0 '(1 2 3))
        (append-map (lambda (x) (listf x x)) '(1 2))
        ((gradient (lambda (a) (fixed-point* (lambda (p q) (lt (absf (sub p q)) 1e-12))
                                             (lambda (x) (div (add x (div a x)) 2)) a))) 4)
        ((gradient (lambda (l) (foldl add 0 (map* (lambda (x) (mul 3 x)) l)))) '(1 2 3))
        ((gradient log1pexp) 1000)
        ((gradient (custom-vjp (lambda (x) (mul x x)) (lambda (x) (cons (mul x x) (lambda (b) (mul 7 b)))))) 1)
        ((gradient (lambda (v) (vector-sum (vector-map sinf v)))) (vector 0 1))
        (iota 3 1 2)))))
)";

TEST(LibraryImmunity, RedefiningAnyNameTheLibraryUsesChangesNoLibraryResult) {
  dlam::VM vm;
  vm.output = [](std::string_view) {};
  dlam::openStdlib(vm);
  dlam::evalSource(vm, kBattery, "battery.dlam");
  std::string before = vm.show(dlam::evalSource(vm, "(battery)", "run.dlam"));
  EXPECT_NE(before.find("(2 4 6)"), std::string::npos) << before;

  // Every name the library's code refers to, except the reserved %-names.
  std::string redefine;
  size_t count = 0;
  for (const auto& [pub, twin] : vm.libraryTwins()) {
    if (pub->name.empty() || pub->name[0] == '%') continue;
    redefine += "(define (" + pub->name + " . args) 'user)\n";
    ++count;
  }
  EXPECT_GT(count, 80u);  // map, fold-left, reverse, length, car, +, apply, error ...
  dlam::evalSource(vm, redefine, "user.dlam");
  EXPECT_EQ(vm.show(dlam::evalSource(vm, "(map 1 2)", "user.dlam")), "user");
  EXPECT_EQ(vm.show(dlam::evalSource(vm, "(battery)", "run.dlam")), before);
}

TEST(LibraryImmunity, RedefinitionsStillApplyToTheProgramItself) {
  dlam::VM vm;
  vm.output = [](std::string_view) {};
  dlam::openStdlib(vm);
  // A program's own map is the one its code calls, also under a derivative.
  dlam::evalSource(vm,
                   "(define (map f l) (if (null? l) '() (cons (* 2 (f (car l))) (map f (cdr l)))))",
                   "user.dlam");
  EXPECT_EQ(vm.show(dlam::evalSource(vm, "(map (lambda (x) x) '(1 2))", "user.dlam")), "(2 4)");
  EXPECT_EQ(vm.show(dlam::evalSource(
                vm, "((gradient (lambda (l) (apply + (map (lambda (x) (* x x)) l)))) '(1 3))",
                "user.dlam")),
            "(4 12)");
}

}  // namespace
