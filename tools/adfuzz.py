#!/usr/bin/env python3
"""adfuzz.py — differential fuzzing of dlam's derivatives against central differences.

Generates random small dlam programs (arithmetic, transcendental functions, let, lambda,
closures capturing the differentiated variables, named-let loops, list functions, apply,
vectors,
rest arguments, nested derivatives that capture each other's variables, custom-vjp,
custom-vjp*, fixed-point*, map*), runs them in batches through a dlam binary, and checks
every derivative against a central difference computed in dlam itself at two step sizes
(a point where the two differences disagree, or for gradients where the one-sided
differences do, is at or near a kink and is skipped). Second order: Hessians are
symmetric, and Hessian-vector products (reverse over reverse) agree with the Hessian and
with central differences of gradients. Memoization: (*j f) twice is one object, and a
gradient taken again, inside another derivative, or after a directional derivative
through f, is unchanged. Reports any mismatch, error or crash with the program that
caused it.

Forward against reverse (fz-fwd-rev, fz-second): for each function of numbers or arrays,
jvp's value and tangent have the shapes of f's value; vjp's sensitivities have the
arguments' shapes; <ybar, J v> (forward) equals <J^T ybar, v> (reverse) for a fixed ybar;
for a real f the gradient along v equals jvp's tangent (and derivative, for one real);
Hessian-vector products by forward over reverse (hvp), reverse over reverse and reverse
over forward agree with each other and with differences of the gradient, and forward over
forward gives <v, H v>. Scalar programs also nest jvp, gradient, vjp,
value-and-gradient and custom-jvp inside each other, capturing the outer variables, and
run custom-vjp, custom-vjp*, fixed-point* and map* under forward mode.

Array programs (ArrGen): functions of one or two arrays (rank 0 to 2, size-1 axes), built
type-directed so every shape is right by construction: broadcasting + - * /, smooth
unary functions, dot (vector-vector, matrix-vector, vector-matrix, matrix-matrix),
sum/mean/logsumexp with and without an axis, transpose, reshape, slice, concat, stack,
vector, outer, array-ref/vector-ref, vector-map/array-map of closures capturing the
differentiated arrays, branches, derivative/gradient/jvp inside, custom-vjp, custom-vjp*
and custom-jvp on arrays. Checked: the gradient elementwise against central differences
(fz-agrad), jvp against differences along v (fz-jvp-fd) and forward against reverse.

Each check runs under guard (fz-try): an error prints (ERR name message) and the batch
goes on; errors of known open bugs (KNOWN) are counted apart.

Usage: python3 tools/adfuzz.py --dlam build/dlam [--seed S] [--batches N] [--per-batch K]
       [--jobs J] [--out DIR]   (failing batches are written to DIR, default /tmp/adfuzz)
Exit status 1 when something failed.
"""

import argparse
import os
import random
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

PRELUDE = r"""
(define (fz-h x) (* 1e-5 (max 1 (abs x))))
(define (fz-d f x h) (/ (- (f (+ x h)) (f (- x h))) (* 2 h)))
(define (fz-replace l i v) (if (= i 0) (cons v (cdr l)) (cons (car l) (fz-replace (cdr l) (- i 1) v))))
(define (fz-partial f args i h)
  (let ((x (list-ref args i)))
    (/ (- (apply f (fz-replace args i (+ x (* h (max 1 (abs x))))))
          (apply f (fz-replace args i (- x (* h (max 1 (abs x)))))))
       (* 2 (* h (max 1 (abs x)))))))
(define (fz-num-close? a b tol) (<= (abs (- a b)) (* tol (max 1 (abs a) (abs b)))))
(define (fz-close? a b tol)
  (cond ((and (number? a) (number? b)) (fz-num-close? a b tol))
        ((and (null? a) (null? b)) #t)
        ((and (array? a) (array? b)) (fz-same? a b tol))
        ((and (pair? a) (pair? b)) (and (fz-close? (car a) (car b) tol) (fz-close? (cdr a) (cdr b) tol)))
        (else #f)))
(define (fz-bad? v)
  (cond ((number? v) (or (nan? v) (> (abs v) 1e8)))
        ((pair? v) (or (fz-bad? (car v)) (fz-bad? (cdr v))))
        ((array? v) (fz-bad? (fz-flat v)))
        (else #f)))
;; ad: the derivative by AD; f1, f2: the central differences at steps h and h/10
(define (fz-report name ad f1 f2 tol)
  (cond ((or (fz-bad? f1) (fz-bad? f2)) (print (list 'skip name)))
        ((not (fz-close? f1 f2 (* 100 tol))) (print (list 'skip name)))
        ((fz-close? ad f2 tol) (print (list 'ok name)))
        (else (print (list 'BAD name ad f2)))))
;; Whether f has a kink at args in some argument: its one-sided differences there
;; disagree (a kink where the slope jumps, as at a tie of min or max, which central
;; differences at two steps do not see: both give the average of the two slopes).
(define (fz-one-sided f args i s)
  (let* ((x (list-ref args i)) (h (* s 1e-6 (max 1 (abs x)))))
    (/ (- (apply f (fz-replace args i (+ x h))) (apply f args)) h)))
(define (fz-kink? f args)
  (let loop ((i 0))
    (and (< i (length args))
         (or (not (fz-num-close? (fz-one-sided f args i 1) (fz-one-sided f args i -1) 1e-3))
             (loop (+ i 1))))))
;; f: R^n -> R, checked with gradient at the point args (a list)
(define (fz-grad name f args tol)
  (let ((ad (apply (gradient f) args))
        (fd (lambda (h) (let ((g (map (lambda (i) (fz-partial f args i h)) (iota (length args)))))
                          (if (null? (cdr g)) (car g) g)))))
    (if (fz-kink? f args)
        (print (list 'skip name))
        (fz-report name ad (fd 1e-4) (fd 1e-5) tol))))
;; f: R -> R, its k-th derivative by nested AD against the difference of the (k-1)-th
(define (fz-nth-derivative f k) (if (= k 0) f (derivative (fz-nth-derivative f (- k 1)))))
(define (fz-dk name f k x tol)
  (let ((lower (fz-nth-derivative f (- k 1))))
    (fz-report name ((fz-nth-derivative f k) x)
               (fz-d lower x (* 1e-3 (max 1 (abs x)))) (fz-d lower x (* 1e-4 (max 1 (abs x)))) tol)))
;; f: list -> R: gradient by AD against differences, and its Hessian row sums against
;; differences of the gradient
(define (fz-list-grad name f l tol)
  (let ((g (lambda (h) (map (lambda (i) (fz-partial (lambda ys (f ys)) l i h)) (iota (length l))))))
    (if (fz-kink? (lambda ys (f ys)) l)
        (print (list 'skip name))
        (fz-report name ((gradient f) l) (g 1e-4) (g 1e-5) tol))))
(define (fz-hessian name f l tol)
  (let* ((gf (gradient f))
         (col (lambda (i h) (let* ((x (list-ref l i)) (s (* h (max 1 (abs x)))))
                              (map (lambda (a b) (/ (- a b) (* 2 s)))
                                   (gf (fz-replace l i (+ x s))) (gf (fz-replace l i (- x s)))))))
         (fd (lambda (h) (map (lambda (i) (col i h)) (iota (length l))))))
    (fz-report name ((hessian f) l) (fd 1e-3) (fd 1e-4) tol)))
;; Second order: the Hessian is symmetric (to rounding), and a Hessian-vector product by
;; reverse over reverse (the gradient of <grad f, v>) agrees with the Hessian times v
;; and with central differences of the gradient along v.
(define (fz-dot a b) (apply + (map * a b)))
(define (fz-hessian-sym name f l tol)
  (let* ((h ((hessian f) l))
         (n (length l))
         (bad (let loop ((i 0) (j 0))
                (cond ((= i n) #f)
                      ((= j n) (loop (+ i 1) 0))
                      ((not (fz-num-close? (list-ref (list-ref h i) j) (list-ref (list-ref h j) i) tol))
                       (list i j (list-ref (list-ref h i) j) (list-ref (list-ref h j) i)))
                      (else (loop i (+ j 1)))))))
    (if (or (fz-bad? h) (not bad)) (print (list 'ok name)) (print (list 'BAD name bad)))))
(define (fz-hvp name f l v tol)
  (let* ((gf (gradient f))
         (hv ((gradient (lambda (x) (fz-dot (gf x) v))) l))
         (hm (map (lambda (row) (fz-dot row v)) ((hessian f) l)))
         (fd (lambda (h) (map (lambda (a b) (/ (- a b) (* 2 h)))
                              (gf (map (lambda (x d) (+ x (* h d))) l v))
                              (gf (map (lambda (x d) (- x (* h d))) l v))))))
    (if (fz-close? hv hm 1e-9)
        (fz-report name hv (fd 1e-3) (fd 1e-4) tol)
        (print (list 'BAD name 'hvp-vs-hessian hv hm)))))
;; Memoization: (*j f) twice is the same object; the gradient computed again, after
;; *j of f was taken, and inside the derivative of another function, is the same; the
;; directional derivative of f along l, with f's gradient taken inside, is <grad f, l>.
(define (fz-memo name f l)
  (let* ((g1 ((gradient f) l))
         (j1 (*j f)) (j2 (*j f))
         (g2 ((gradient f) l))
         (outer (car ((gradient (lambda (ys) (* (car ys) (apply + ((gradient f) l))))) (list 2.5))))
         (g3 ((gradient f) l))
         (dd (car ((gradient (lambda (ys) (f (map (lambda (a) (+ a (* (car ys) a))) l)))) (list 0.0))))
         (g4 ((gradient f) l)))
    (cond ((fz-bad? g1) (print (list 'skip name)))
          ((not (eq? j1 j2)) (print (list 'BAD name '*j-not-memoized)))
          ((not (and (equal? g1 g2) (equal? g1 g3) (equal? g1 g4)))
           (print (list 'BAD name 'gradient-changed g1 g2 g3 g4)))
          ((not (fz-num-close? outer (apply + g1) 1e-12)) (print (list 'BAD name 'outer outer g1)))
          ((not (fz-num-close? dd (fz-dot g1 l) 1e-9)) (print (list 'BAD name 'directional dd g1)))
          (else (print (list 'ok name))))))
(define (make-list3 y) (list y y y))
;; jacobian of f: list -> list by central differences: a list of rows
(define (fz-jac f l h)
  (let ((cols (map (lambda (i) (let* ((x (list-ref l i)) (s (* h (max 1 (abs x)))))
                                 (map (lambda (a b) (/ (- a b) (* 2 s)))
                                      (f (fz-replace l i (+ x s))) (f (fz-replace l i (- x s))))))
                   (iota (length l)))))
    (map (lambda (r) (map (lambda (c) (list-ref c r)) cols)) (iota (length (car cols))))))
(define (fz-close-enough? a b) (< (abs (- a b)) 1e-13))
;; ---- values of any shape: numbers, arrays (vectors included), lists and pairs of them
(define (fz-flat v)
  (cond ((number? v) (list v))
        ((array? v) (vector->list (reshape v (list (array-size v)))))
        ((pair? v) (append (fz-flat (car v)) (fz-flat (cdr v))))
        (else '())))
(define (fz-shape v)
  (cond ((number? v) 'r)
        ((array? v) (array-shape v))
        ((pair? v) (cons (fz-shape (car v)) (fz-shape (cdr v))))
        (else v)))
(define (fz-inner a b) (apply + (map * (fz-flat a) (fz-flat b))))
(define (fz-inner-abs a b) (apply + (map (lambda (x y) (abs (* x y))) (fz-flat a) (fz-flat b))))
;; a fixed output sensitivity of y's shape (computed outside any derivative)
(define (fz-cot y)
  (cond ((or (number? y) (array? y)) (+ 0.3 (cos (* 1.7 y))))
        ((pair? y) (cons (fz-cot (car y)) (fz-cot (cdr y))))
        (else y)))
(define (fz-axpy t v x)
  (cond ((or (number? x) (array? x)) (+ x (* t v)))
        ((pair? x) (cons (fz-axpy t (car v) (car x)) (fz-axpy t (cdr v) (cdr x))))
        (else x)))
;; a and b of one shape and close elementwise
(define (fz-same? a b tol)
  (and (equal? (fz-shape a) (fz-shape b)) (fz-close? (fz-flat a) (fz-flat b) tol)))
(define (fz-unit x i)
  (if (number? x) 1 (reshape (build (array-size x) (lambda (j) (if (= j i) 1 0))) (array-shape x))))
(define (fz-elt x i) (if (number? x) x (list-ref (fz-flat x) i)))
(define (fz-size x) (if (number? x) 1 (array-size x)))
(define (fz-bump args c s)
  (fz-replace args (car c) (let ((x (list-ref args (car c)))) (+ x (* s (fz-unit x (cdr c)))))))
(define (fz-coords args)
  (apply append (map (lambda (a) (map (lambda (i) (cons a i)) (iota (fz-size (list-ref args a)))))
                     (iota (length args)))))
(define (fz-step args c h) (* h (max 1 (abs (fz-elt (list-ref args (car c)) (cdr c))))))
(define (fz-apartial f args c h)
  (let ((s (fz-step args c h)))
    (/ (- (apply f (fz-bump args c s)) (apply f (fz-bump args c (- s)))) (* 2 s))))
(define (fz-akink? f args)
  (let ((f0 (apply f args)))
    (let loop ((cs (fz-coords args)))
      (and (pair? cs)
           (let* ((c (car cs)) (s (fz-step args c 1e-6))
                  (up (/ (- (apply f (fz-bump args c s)) f0) s))
                  (dn (/ (- f0 (apply f (fz-bump args c (- s)))) s)))
             (or (not (fz-num-close? up dn 1e-3)) (loop (cdr cs))))))))
;; Run a check; an error in it is reported as (ERR name message) and the batch goes on.
(define (fz-try name thunk)
  (guard (e (#t (print (list 'ERR name (if (error-object? e) (error-object-message e) e)))))
    (thunk)))
;; f of several arguments (numbers or arrays) -> real: the gradient has the arguments'
;; shapes and agrees with central differences in every element
(define (fz-agrad name f args tol)
  (let* ((g (apply (gradient f) args))
         (gl (if (null? (cdr args)) (list g) g))
         (fd (lambda (h) (map (lambda (c) (fz-apartial f args c h)) (fz-coords args)))))
    (cond ((fz-bad? (apply f args)) (print (list 'skip name)))
          ((not (equal? (fz-shape gl) (fz-shape args)))
           (print (list 'BAD name 'gradient-shape (fz-shape gl) (fz-shape args))))
          ((fz-akink? f args) (print (list 'skip name)))
          (else (fz-report name (fz-flat gl) (fd 1e-4) (fd 1e-5) tol)))))
;; Forward against reverse, f of several arguments (numbers or arrays) to a value y of
;; any shape: jvp gives y and a tangent of y's shape; vjp gives sensitivities of the
;; arguments' shapes; <ybar, J v> = <J^T ybar, v>. For a real y also the gradient
;; (and for one real argument the forward derivative) along v.
(define (fz-fwd-rev name f args v tol)
  (let* ((y (apply f args))
         (jv (jvp (lambda (l) (apply f l)) args v))
         (yb (fz-cot y))
         (p (apply vjp f args))
         (xb ((cdr p) yb))
         (xbl (if (null? (cdr args)) (list xb) xb))
         (lhs (fz-inner yb (cdr jv)))
         (rhs (fz-inner xbl v))
         (mag (max 1 (fz-inner-abs yb (cdr jv)) (fz-inner-abs xbl v))))
    (cond ((fz-bad? y) (print (list 'skip name)))
          ((not (equal? (fz-shape (cdr jv)) (fz-shape y)))
           (print (list 'BAD name 'tangent-shape (fz-shape (cdr jv)) (fz-shape y))))
          ((not (equal? (fz-shape xbl) (fz-shape args)))
           (print (list 'BAD name 'vjp-shape (fz-shape xbl) (fz-shape args))))
          ((not (fz-same? (car jv) y 1e-12)) (print (list 'BAD name 'jvp-value (car jv) y)))
          ((not (fz-same? (car p) y 1e-12)) (print (list 'BAD name 'vjp-value (car p) y)))
          ((fz-bad? (list lhs rhs)) (print (list 'skip name)))
          ((> (abs (- lhs rhs)) (* tol mag)) (print (list 'BAD name 'fwd-vs-rev lhs rhs)))
          ((not (number? y)) (print (list 'ok name)))
          (else
           (let* ((g (apply (gradient f) args))
                  (gl (if (null? (cdr args)) (list g) g))
                  (gv (fz-inner gl v)))
             (cond ((> (abs (- gv (cdr jv))) (* tol mag)) (print (list 'BAD name 'gradient-vs-jvp gv (cdr jv))))
                   ((and (null? (cdr args)) (number? (car args))
                         (not (fz-num-close? (* (car v) ((derivative f) (car args))) gv (* 10 tol))))
                    (print (list 'BAD name 'derivative-vs-gradient ((derivative f) (car args)) g)))
                   (else (print (list 'ok name)))))))))
;; J v by jvp against central differences of f along v (the primal function alone)
(define (fz-jvp-fd name f args v tol)
  (let* ((F (lambda (t) (apply f (fz-axpy t v args))))
         (jv (cdr (jvp (lambda (l) (apply f l)) args v)))
         (fd (lambda (h) (map (lambda (a b) (/ (- a b) (* 2 h))) (fz-flat (F h)) (fz-flat (F (- h))))))
         (one (lambda (s) (map (lambda (a b) (/ (- a b) s)) (fz-flat (F s)) (fz-flat (F 0))))))
    (if (not (fz-close? (one 1e-6) (one -1e-6) 1e-3))
        (print (list 'skip name))
        (fz-report name (fz-flat jv) (fd 1e-4) (fd 1e-5) tol))))
;; Second order, f of several arguments to a real: Hessian-vector products four ways:
;; forward over reverse (hvp), reverse over reverse (the gradient of <grad f, v>),
;; reverse over forward (the gradient of jvp's tangent) agree with each other and with
;; differences of the gradient along v, and forward over forward gives <v, H v>.
(define (fz-second name f args v tol)
  (let* ((F (lambda (l) (apply f l)))
         (gF (gradient F))
         (fr (hvp F args v))
         (rr ((gradient (lambda (x) (fz-inner (gF x) v))) args))
         (rf ((gradient (lambda (x) (cdr (jvp F x v)))) args))
         (ff (cdr (jvp (lambda (t) (cdr (jvp F (fz-axpy t v args) v))) 0 1)))
         (fd (lambda (h) (map (lambda (a b) (/ (- a b) (* 2 h)))
                              (fz-flat (gF (fz-axpy h v args))) (fz-flat (gF (fz-axpy (- h) v args))))))
         (vhv (fz-inner fr v)))
    (cond ((fz-bad? (list fr rr rf ff)) (print (list 'skip name)))
          ((not (equal? (fz-shape fr) (fz-shape args)))
           (print (list 'BAD name 'hvp-shape (fz-shape fr) (fz-shape args))))
          ((not (fz-same? rr fr tol)) (print (list 'BAD name 'rev-rev-vs-fwd-rev rr fr)))
          ((not (fz-same? rf fr tol)) (print (list 'BAD name 'rev-fwd-vs-fwd-rev rf fr)))
          ((> (abs (- ff vhv)) (* tol (max 1 (fz-inner-abs fr v)))) (print (list 'BAD name 'fwd-fwd ff vhv)))
          ((fz-akink? f args) (print (list 'skip name)))
          (else (fz-report name (fz-flat fr) (fd 1e-3) (fd 1e-4) 1e-3)))))
"""

UNARY = [
    "(sin {})", "(cos {})", "(tanh {})", "(atan {})", "(exp (sin {}))",
    "(sqrt (+ 1 (* {0} {0})))", "(log (+ 2 (sin {})))", "(expt (+ 2 (cos {})) 1.5)",
    "(log1p (* {0} {0}))", "(expm1 (sin {}))", "(sinh (sin {}))", "(cosh (sin {}))",
    "(asin (* 0.5 (sin {})))", "(acos (* 0.5 (cos {})))", "(- {})", "(* {0} {0})",
    "(abs {})", "(/ 1 (+ 2 (cos {})))", "(expt (sin {}) 2)", "(sqrt (+ 3 (sin {})))",
]


class Gen:
    def __init__(self, rng):
        self.rng = rng
        self.n = 0

    def fresh(self, base="v"):
        self.n += 1
        return f"{base}{self.n}"

    def const(self):
        r = self.rng.random()
        if r < 0.3:
            return str(self.rng.choice([0, 1, 2, -1, 3, 0.5]))
        return f"{self.rng.uniform(-2, 2):.3g}"

    def num(self, env, d):
        """A numeric expression over the variables env (all numbers)."""
        rng = self.rng
        if d <= 0 or rng.random() < 0.15:
            return rng.choice(env) if env and rng.random() < 0.8 else self.const()
        k = rng.randrange(36)
        E = lambda e=env: self.num(e, d - 1)
        if k < 4:
            return f"({rng.choice('+-*')} {E()} {E()})"
        if k < 7:
            return rng.choice(UNARY).format(E())
        if k == 7:
            q = self.fresh("q")  # a denominator of at least 2 (0 * (1/0) = NaN is not a bug)
            return f"(let (({q} {E()})) (/ {E()} (+ 2 (* {q} {q}))))"
        if k == 8:
            return f"(atan {E()} (+ 2 (cos {E()})))"
        if k == 9:
            a, b = E(), E()
            return f"(if ({rng.choice(['<', '>', '<=', '>='])} {a} {b}) {E()} {E()})"
        if k == 10:
            v = self.fresh()
            return f"(let (({v} {E()})) {self.num(env + [v], d - 1)})"
        if k == 11:
            v = self.fresh()
            return f"((lambda ({v}) {self.num(env + [v], d - 1)}) {E()})"
        if k == 12:
            g, v = self.fresh("g"), self.fresh()
            body = self.num(env + [v], d - 1)
            return f"(let (({g} (lambda ({v}) {body}))) (+ ({g} {E()}) ({g} {E()})))"
        if k == 13:
            i, s = self.fresh("i"), self.fresh("s")
            step = self.num(env + [s], d - 1)
            return (f"(let loop (({i} 0) ({s} {E()})) (if (= {i} {rng.randint(1, 4)}) {s} "
                     f"(loop (+ {i} 1) (* 0.5 {step}))))")
        if k == 14:
            a, v = self.fresh("a"), self.fresh()
            body = self.num(env + [a, v], d - 1)
            return f"(fold-left (lambda ({a} {v}) {body}) {E()} (list {E()} {E()} {E()}))"
        if k == 15:
            v = self.fresh()
            return f"(apply + (map (lambda ({v}) {self.num(env + [v], d - 1)}) (list {E()} {E()})))"
        if k == 16:
            a, b = self.fresh(), self.fresh()
            return (f"(fold-right + 0 (map (lambda ({a} {b}) {self.num(env + [a, b], d - 1)}) "
                     f"(list {E()} {E()}) (list {E()} {E()})))")
        if k == 17:
            return rng.choice([
                f"(car (reverse (list {E()} {E()})))",
                f"(list-ref (list {E()} {E()} {E()}) {rng.randint(0, 2)})",
                f"(cadr (append (list {E()}) (list {E()} {E()})))",
                f"(* (length (list {E()} {E()})) {E()})",
                f"(car (list-tail (list {E()} {E()} {E()}) {rng.randint(0, 2)}))",
                f"(apply max (list {E()} {E()}))",
                f"(min {E()} {E()} {E()})",
                f"(car (filter (lambda (q) (> q -1e9)) (list {E()} {E()})))",
                f"(cdr (cons {E()} {E()}))",
                f"(caddr (list {E()} {E()} {E()}))",
            ])
        if k == 18:
            a, b = self.fresh(), self.fresh()
            return f"(apply (lambda ({a} {b}) {self.num(env + [a, b], d - 1)}) (list {E()} {E()}))"
        if k == 19:
            r = self.fresh("r")
            return f"((lambda {r} (apply * (cons 0.5 {r}))) {E()} {E()})"
        if k == 20:
            # a nested derivative whose function captures the outer variables
            v = self.fresh()
            return f"((derivative (lambda ({v}) {self.num(env + [v], d - 1)})) {E()})"
        if k == 21:
            # a closure made by a function, returned, then applied (captures env)
            mk, v, w = self.fresh("mk"), self.fresh(), self.fresh()
            inner = self.num(env + [v, w], d - 1)
            return f"(let (({mk} (lambda ({v}) (lambda ({w}) {inner})))) (({mk} {E()}) {E()}))"
        if k == 22:
            return self.custom(env, d)
        if k == 24:
            # non-tail recursion: a product over a counted loop
            i = self.fresh("i")
            body = self.num(env + [i], d - 1)
            return (f"(let rec (({i} 0)) (if (= {i} {rng.randint(1, 3)}) {E()} "
                     f"(* (+ 0.5 (* 0.25 (sin {body}))) (rec (+ {i} 1)))))")
        if k == 25:
            # closures kept in a list, taken out and called
            v, w = self.fresh(), self.fresh()
            return (f"(let ((fs (list (lambda ({v}) {self.num(env + [v], d - 1)}) "
                     f"(lambda ({w}) {self.num(env + [w], d - 1)})))) "
                     f"(+ ((car fs) {E()}) ((cadr fs) {E()})))")
        if k == 26:
            # a function passed to a function that calls it twice
            tw, g, v = self.fresh("tw"), self.fresh("g"), self.fresh()
            return (f"(let (({tw} (lambda ({g} z) ({g} ({g} z))))) "
                     f"({tw} (lambda ({v}) (* 0.5 {self.num(env + [v], d - 1)})) {E()}))")
        if k == 27:
            return f"(expt (+ 2 (sin {E()})) (cos {E()}))"
        if k == 28:
            a, b, c = self.fresh(), self.fresh(), self.fresh()
            return (f"(apply + (map (lambda ({a} {b} {c}) {self.num(env + [a, b, c], d - 1)}) "
                     f"(list {E()} {E()}) (list {E()} {E()}) (list {E()} {E()})))")
        if k == 29:
            # a list built, walked by a recursive function, summed with weights
            l, w = self.fresh("l"), self.fresh("w")
            return (f"(let walk (({l} (list {E()} {E()} {E()})) ({w} 1)) "
                     f"(if (null? {l}) 0 (+ (* {w} (car {l})) (walk (cdr {l}) (* {w} 0.5)))))")
        if k == 30:
            # vectors: whole-vector operations, indexing, build, conversions
            a, b, i = self.fresh(), self.fresh(), self.fresh("i")
            return rng.choice([
                f"(vector-sum (vector-map (lambda ({a}) {self.num(env + [a], d - 1)}) (vector {E()} {E()} {E()})))",
                f"(vector-dot (vector {E()} {E()}) (vector {E()} {E()}))",
                f"(vector-ref (build 3 (lambda ({i}) {self.num(env + [i], d - 1)})) {rng.randint(0, 2)})",
                f"(vector-sum (vector-map2 (lambda ({a} {b}) {self.num(env + [a, b], d - 1)}) "
                f"(vector {E()} {E()}) (vector {E()} {E()})))",
                f"(vector-sum (make-vector 2 {E()}))",
                f"(cadr (vector->list (list->vector (list {E()} {E()}))))",
                f"(vector-ref (vector {E()} {E()} {E()}) {rng.randint(0, 2)})",
                f"(vector-prod (vector {E()} {E()} {E()}))",
                # a loop over indices: the sensitivities of the vector-refs are sparse,
                # summed with each other and with the dense ones of vector-sum
                f"(let ((vv (vector {E()} {E()} {E()}))) (let lp (({i} 0) ({a} {rng.choice(['0', '(vector-sum vv)'])})) "
                f"(if (= {i} 3) {a} (lp (+ {i} 1) (+ {a} (* (vector-ref vv {i}) (vector-ref vv (- 2 {i}))))))))",
            ])
        if k == 31:
            # a power series whose exponent is a loop counter: a variable exponent that
            # is an integer at run time, of a base that may be negative or 0
            i, acc = self.fresh("i"), self.fresh("acc")
            base = rng.choice([E(), "0", f"(- {E()} {E()})"])
            return (f"(let ((b {base})) (let pw (({i} 0) ({acc} 0)) (if (= {i} {rng.randint(2, 4)}) {acc} "
                     f"(pw (+ {i} 1) (+ {acc} (* {E()} (expt b {i})))))))")
        if k == 32:
            # forward mode inside, capturing env: a directional derivative by jvp
            v = self.fresh()
            return f"(cdr (jvp (lambda ({v}) {self.num(env + [v], d - 1)}) {E()} {E()}))"
        if k == 33:
            # reverse mode inside, capturing env (under an outer jvp: reverse in forward)
            v = self.fresh()
            return f"((gradient (lambda ({v}) {self.num(env + [v], d - 1)})) {E()})"
        if k == 34:
            a, b = self.fresh(), self.fresh()
            body = self.num(env + [a, b], d - 1)
            return rng.choice([
                f"(car ((cdr (vjp (lambda ({a} {b}) {body}) {E()} {E()})) {E()}))",
                f"(cadr (cdr ((value-and-gradient (lambda ({a} {b}) {body})) {E()} {E()})))",
            ])
        if k == 35:
            # custom-jvp: its rule under forward mode, transposed under reverse mode
            return rng.choice([
                f"((custom-jvp (lambda (q) (sin q)) (lambda (q t) (cons (sin q) (* (cos q) t)))) {E()})",
                # of two arguments (a closure's captured variables would be constants to
                # the rule: custom-jvp has no tangent for them)
                f"((custom-jvp (lambda (c q) (* c (tanh q))) (lambda (c q ct t) (cons (* c (tanh q)) "
                f"(+ (* ct (tanh q)) (* c t (- 1 (square (tanh q)))))))) {E()} {E()})",
            ])
        # k == 23
        v = self.fresh()
        return f"(apply + (map* (lambda ({v}) {self.num([v], d - 1)}) (list {E()} {E()} {E()})))"

    def custom(self, env, d):
        rng = self.rng
        E = lambda: self.num(env, d - 1)
        c = rng.choice(env) if env else self.const()
        k = rng.randrange(4)
        if k == 0:
            # custom-vjp of a function capturing nothing: the derivative of sin written by hand
            return (f"((custom-vjp (lambda (q) (sin q)) (lambda (q) (cons (sin q) "
                     f"(lambda (qb) (* qb (cos q)))))) {E()})")
        if k == 1:
            # custom-vjp* of a closure capturing c: fbar is the sensitivity of c
            return (f"(let ((cc {c})) ((custom-vjp* (lambda (q) (* cc (sin q))) "
                     f"(lambda (q) (cons (* cc (sin q)) (lambda (qb) (cons (list (* qb (sin q))) "
                     f"(* qb cc (cos q))))))) {E()}))")
        if k == 2:
            # square root of a positive number by a fixed point (implicit derivative)
            return (f"(let* ((ab {E()}) (aa (+ 1 (* ab ab)))) "
                     f"(fixed-point* fz-close-enough? (lambda (z) (/ (+ z (/ aa z)) 2)) aa))")
        return f"(log1pexp {E()})"

# ---- array programs -------------------------------------------------------------------
# Shapes are tuples: () is a number, (n,) a vector, (m, n) a matrix. Small sizes, with
# size-1 axes for broadcasting.
ARR_SHAPES = [(), (1,), (2,), (3,), (1, 1), (1, 2), (2, 1), (2, 2), (2, 3), (3, 2), (1, 3)]

# elementwise unary functions that are defined and smooth everywhere (abs aside, whose
# kink the checks detect)
ARR_UNARY = [
    "(sin {})", "(cos {})", "(tanh {})", "(atan {})", "(exp (sin {}))",
    "(sqrt (+ 1 (* {0} {0})))", "(log (+ 2 (sin {})))", "(expt (+ 2 (cos {})) 1.5)",
    "(log1p (* {0} {0}))", "(expm1 (sin {}))", "(- {})", "(* {0} {0})", "(abs {})",
    "(/ 1 (+ 2 (cos {})))", "(sinh (sin {}))", "(asin (* 0.5 (sin {})))",
]


def size(shape):
    n = 1
    for k in shape:
        n *= k
    return n


class ArrGen:
    """Expressions over arrays of known shapes; env is a list of (name, shape)."""

    def __init__(self, gen):
        self.g = gen
        self.rng = gen.rng

    def lit(self, shape, lo=-1.5, hi=1.5):
        rng = self.rng
        if shape == ():
            return f"{rng.uniform(lo, hi):.3f}"
        if len(shape) == 1:
            return "#(" + " ".join(f"{rng.uniform(lo, hi):.3f}" for _ in range(shape[0])) + ")"
        rows = ["(" + " ".join(f"{rng.uniform(lo, hi):.3f}" for _ in range(shape[1])) + ")"
                for _ in range(shape[0])]
        return "(list->array '(" + " ".join(rows) + "))"

    def bshape(self, s):
        """A shape that broadcasts to s (leading axes dropped, some sizes made 1)."""
        rng = self.rng
        k = rng.randint(0, len(s))
        return tuple(1 if rng.random() < 0.3 else n for n in s[k:])

    def leaf(self, env, s):
        rng = self.rng
        exact = [v for v, sh in env if sh == s]
        if exact and rng.random() < 0.75:
            return rng.choice(exact)
        if env and rng.random() < 0.85:
            v, sh = rng.choice(env)
            if sh == s:
                return v
            if len(sh) <= len(s) and all(a in (1, b) for a, b in zip(sh[::-1], s[::-1])):
                return f"({rng.choice('+*')} {v} {self.lit(s)})"  # broadcast up
            r = f"({rng.choice(['sum', 'mean'])} {v})"  # reduce to a number
            return r if s == () else f"(* {r} {self.lit(s)})"
        return self.lit(s)

    def scalar(self, env, d):
        return self.arr(env, d, ())

    def arr(self, env, d, s):
        """An expression whose value has shape s."""
        rng = self.rng
        g = self.g
        if d <= 0 or rng.random() < 0.12:
            return self.leaf(env, s)
        A = lambda sh, e=env: self.arr(e, d - 1, sh)
        r = len(s)
        k = rng.randrange(22)
        if k < 4:
            a, b = A(s), A(self.bshape(s))
            if rng.random() < 0.5:
                a, b = b, a
            return f"({rng.choice('+-*')} {a} {b})"
        if k == 4:
            return f"(/ {A(s)} (+ 2 (* {A(self.bshape(s))} {A(self.bshape(s))})))"
        if k < 7:
            return rng.choice(ARR_UNARY).format(A(s))
        if k == 7:
            t = g.fresh("t")
            s2 = rng.choice(ARR_SHAPES)
            return f"(let (({t} {A(s2)})) {self.arr(env + [(t, s2)], d - 1, s)})"
        if k == 8:  # dot
            n = rng.randint(1, 3)
            if r == 0:
                return f"(dot {A((n,))} {A((n,))})"
            if r == 1:
                if rng.random() < 0.5:
                    return f"(dot {A((s[0], n))} {A((n,))})"
                return f"(dot {A((n,))} {A((n, s[0]))})"
            return f"(dot {A((s[0], n))} {A((n, s[1]))})"
        if k == 9:  # reductions
            op = rng.choice(["sum", "mean", "logsumexp"])
            n = rng.randint(1, 3)
            if r == 0:
                src = rng.choice([(n,), (n, rng.randint(1, 3))])
                if rng.random() < 0.3 and len(src) == 1:
                    return f"({op} {A(src)} 0)"
                return f"({op} {A(src)})"
            if r == 1:
                if rng.random() < 0.5:
                    return f"({op} {A((n, s[0]))} 0)"
                return f"({op} {A((s[0], n))} 1)"
            return f"(* {A(s)} ({op} {A((n,))}))"
        if k == 10:  # transpose
            if r == 0:
                return f"(array-ref (transpose {A((2, 1))}) 0 1)"
            return f"(transpose {A(s[::-1])})"
        if k == 11:  # reshape
            if r == 0:
                return f"(array-ref (reshape {A((2, 2))} '(4)) {rng.randint(0, 3)})"
            n = size(s)
            cands = [(n,), (1, n), (n, 1)] + [(a, n // a) for a in (2, 3) if n % a == 0]
            cands = [c for c in cands if c != s]
            src = rng.choice(cands)
            return f"(reshape {A(src)} '({' '.join(map(str, s))}))"
        if k == 12:  # slice
            if r == 0:
                return f"(vector-ref (slice {A((3,))} 1 3) {rng.randint(0, 1)})"
            ax = rng.randrange(r)
            extra = rng.randint(1, 2)
            start = rng.randint(0, extra)
            src = list(s)
            src[ax] += extra
            return f"(slice {A(tuple(src))} {start} {start + s[ax]} {ax})"
        if k == 13:  # concat
            if r == 0:
                return f"(vector-ref (concat {A((1,))} {A((2,))}) {rng.randint(0, 2)})"
            axes = [i for i in range(r) if s[i] >= 2]
            if not axes:
                return self.leaf(env, s)
            ax = rng.choice(axes)
            a = rng.randint(1, s[ax] - 1)
            sa, sb = list(s), list(s)
            sa[ax], sb[ax] = a, s[ax] - a
            return f"(concat {A(tuple(sa))} {A(tuple(sb))} {ax})"
        if k == 14:  # stack, vector
            if r == 0:
                return f"(array-ref (stack (list {A((2,))} {A((2,))})) {rng.randint(0, 1)} {rng.randint(0, 1)})"
            parts = " ".join(A(s[1:]) for _ in range(s[0]))
            if r == 1 and rng.random() < 0.3:
                return f"(vector {parts})"
            return f"(stack (list {parts}))"
        if k == 15:  # outer
            if r == 2:
                return f"(outer {A((s[0],))} {A((s[1],))})"
            if r == 1:
                return f"(dot (outer {A(s)} {A((2,))}) {A((2,))})"
            return f"(sum (outer {A((2,))} {A((1,))}))"
        if k == 16:  # element access
            src = rng.choice([(2,), (3,), (2, 2), (1, 3), (3, 2)])
            idx = " ".join(str(rng.randrange(n)) for n in src)
            ref = "vector-ref" if len(src) == 1 and rng.random() < 0.5 else "array-ref"
            e = f"({ref} {A(src)} {idx})"
            return e if r == 0 else f"(* {e} {A(s)})"
        if k == 17:  # vector-map / array-map with closures capturing env
            if r == 1 and rng.random() < 0.5:
                e = g.fresh("e")
                body = self.scalar(env + [(e, ())], d - 1)
                return f"(vector-map (lambda ({e}) {body}) {A(s)})"
            if r == 0:
                e = g.fresh("e")
                body = self.scalar(env + [(e, ())], d - 1)
                return f"(vector-sum (vector-map (lambda ({e}) {body}) {A((2,))}))"
            a, b = g.fresh("e"), g.fresh("e")
            body = self.scalar(env + [(a, ()), (b, ())], d - 1)
            return f"(array-map (lambda ({a} {b}) {body}) {A(s)} {A(s)})"
        if k == 18:  # a branch (a jump where the condition flips: the checks skip it)
            return f"(if (< {self.scalar(env, d - 1)} {self.scalar(env, d - 1)}) {A(s)} {A(s)})"
        if k == 19:  # forward derivative inside, capturing env
            t = g.fresh("t")
            return f"((derivative (lambda ({t}) {self.arr(env + [(t, ())], d - 1, s)})) {A(())})"
        if k == 20:  # reverse derivative inside, capturing env: gradient has shape s
            t = g.fresh("t")
            body = self.scalar(env + [(t, s)], d - 1)
            if rng.random() < 0.5:
                return f"((gradient (lambda ({t}) {body})) {A(s)})"
            w = g.fresh("w")
            body = self.arr(env + [(w, ())], d - 1, s)
            return f"(cdr (jvp (lambda ({w}) {body}) {A(())} {A(())}))"
        # k == 21: custom derivatives on arrays
        kk = rng.randrange(3)
        if kk == 0:
            return (f"((custom-vjp (lambda (q) (sin q)) (lambda (q) (cons (sin q) "
                    f"(lambda (qb) (* qb (cos q)))))) {A(s)})")
        if kk == 1:
            return (f"(let ((cc {A(s)})) ((custom-vjp* (lambda (q) (* cc (sin q))) "
                    f"(lambda (q) (cons (* cc (sin q)) (lambda (qb) (cons (list (* qb (sin q))) "
                    f"(* qb cc (cos q))))))) {A(s)}))")
        return (f"((custom-jvp (lambda (q) (tanh q)) (lambda (q qd) (cons (tanh q) "
                f"(* qd (- 1 (* (tanh q) (tanh q))))))) {A(s)})")


def array_program(gen, name):
    rng = gen.rng
    ag = ArrGen(gen)
    n = rng.randint(1, 2)
    shapes = [rng.choice(ARR_SHAPES) for _ in range(n)]
    vs = [gen.fresh("x") for _ in range(n)]
    env = list(zip(vs, shapes))
    scalar_out = rng.random() < 0.6
    out = () if scalar_out else rng.choice(ARR_SHAPES[1:])
    body = ag.arr(env, rng.randint(2, 4), out)
    if rng.random() < 0.3 and not scalar_out:
        body = f"(list {body} {ag.scalar(env, 2)})"
    args = " ".join(ag.lit(sh) for sh in shapes)
    dirs = " ".join(ag.lit(sh) for sh in shapes)
    text = f"(define ({name} {' '.join(vs)}) {body})\n"
    checks = [f"(fz-fwd-rev '{name}f {name} (list {args}) (list {dirs}) 1e-8)"]
    if scalar_out:
        checks.append(f"(fz-agrad '{name} {name} (list {args}) 1e-5)")
        if rng.random() < 0.5:
            checks.append(f"(fz-second '{name}s {name} (list {args}) (list {dirs}) 1e-7)")
    else:
        checks.append(f"(fz-jvp-fd '{name}j {name} (list {args}) (list {dirs}) 1e-5)")
    return text + "".join(c + "\n" for c in checks)


def fwdrev_program(gen, name):
    """A scalar program (the existing generator) checked forward against reverse."""
    rng = gen.rng
    n = rng.randint(1, 3)
    vs = [gen.fresh("x") for _ in range(n)]
    pt = lambda: f"{rng.uniform(-1.5, 1.5):.3f}"
    if rng.random() < 0.6:
        body = gen.num(vs, rng.randint(2, 4))
        second = rng.random() < 0.5
    else:  # vector-valued: a list or a vector of results
        parts = " ".join(gen.num(vs, rng.randint(1, 3)) for _ in range(rng.randint(2, 3)))
        body = f"({rng.choice(['list', 'list', 'vector'])} {parts})"
        second = False
    args = " ".join(pt() for _ in vs)
    dirs = " ".join(pt() for _ in vs)
    text = f"(define ({name} {' '.join(vs)}) {body})\n"
    checks = [f"(fz-fwd-rev '{name}f {name} (list {args}) (list {dirs}) 1e-8)"]
    if second:
        checks.append(f"(fz-second '{name}s {name} (list {args}) (list {dirs}) 1e-7)")
    return text + "".join(c + "\n" for c in checks)


def program(gen, idx):
    """One program: dlam text defining one function and checking it, each check run
    under fz-try so that an error is reported and the batch goes on."""
    lines = program_text(gen, idx).splitlines()
    out = []
    for ln in lines:
        if ln.startswith("(define"):
            out.append(ln + "\n")
        else:  # named as the check names itself (its first quoted symbol)
            m = re.search(r"'(p[0-9]+[a-z0-9]*)", ln)
            out.append(f"(fz-try '{m.group(1) if m else 'p' + str(idx)} (lambda () {ln}))\n")
    return "".join(out)


def program_text(gen, idx):
    rng = gen.rng
    kind = rng.randrange(12)
    name = f"p{idx}"
    if kind == 9:
        return fwdrev_program(gen, name)
    if kind >= 10:
        return array_program(gen, name)
    pt = lambda: f"{rng.uniform(-1.5, 1.5):.3f}"
    if kind == 0:  # several arguments, gradient
        n = rng.randint(1, 3)
        vs = [gen.fresh("x") for _ in range(n)]
        body = gen.num(vs, rng.randint(2, 4))
        return (f"(define ({name} {' '.join(vs)}) {body})\n"
                f"(fz-grad '{name} {name} (list {' '.join(pt() for _ in vs)}) 1e-5)\n")
    if kind == 1:  # one argument, second or third derivative
        x = gen.fresh("x")
        body = gen.num([x], rng.randint(2, 3))
        k = rng.choice([2, 2, 3])
        return f"(define ({name} {x}) {body})\n(fz-dk '{name} {name} {k} {pt()} 1e-4)\n"
    if kind == 2:  # a list argument: gradient and hessian
        l = gen.fresh("l")
        n = rng.randint(2, 3)
        parts = [f"(list-ref {l} {i})" for i in range(n)]
        x = gen.fresh("x")
        body = gen.num([x] + parts[1:], rng.randint(2, 3))
        text = f"(define ({name} {l}) (let (({x} (car {l}))) {body}))\n"
        pts = ' '.join(pt() for _ in range(n))
        text += f"(fz-list-grad '{name} {name} (list {pts}) 1e-5)\n"
        if rng.random() < 0.5:
            text += f"(fz-hessian '{name}h {name} (list {pts}) 1e-3)\n"
        if rng.random() < 0.5:
            text += f"(fz-hessian-sym '{name}s {name} (list {pts}) 1e-8)\n"
        if rng.random() < 0.5:
            vs = ' '.join(pt() for _ in range(n))
            text += f"(fz-hvp '{name}v {name} (list {pts}) (list {vs}) 1e-3)\n"
        if rng.random() < 0.5:
            text += f"(fz-memo '{name}m {name} (list {pts}))\n"
        return text
    if kind == 3:  # a gradient with respect to a closure's captured variable, through a call
        x, y, g = gen.fresh("x"), gen.fresh("y"), gen.fresh("g")
        inner = gen.num([x, y], rng.randint(2, 3))
        outer = gen.num([x, g + "v"], 2).replace(g + "v", f"({g} {x})")
        return (f"(define ({name} {x}) (let (({g} (lambda ({y}) {inner}))) {outer}))\n"
                f"(fz-grad '{name} {name} (list {pt()}) 1e-5)\n")
    if kind == 5:  # jvp and vjp against the gradient, on two arguments
        a, b = gen.fresh("x"), gen.fresh("x")
        body = gen.num([a, b], rng.randint(2, 3))
        p1, p2, v1, v2 = pt(), pt(), pt(), pt()
        return (f"(define ({name} {a} {b}) {body})\n"
                f"(let ((g ((gradient {name}) {p1} {p2})) "
                f"(j (jvp (lambda (l) ({name} (car l) (cadr l))) (list {p1} {p2}) (list {v1} {v2}))) "
                f"(vj (vjp {name} {p1} {p2})) (vg ((value-and-gradient {name}) {p1} {p2}))) "
                f"(fz-report '{name}j (cdr j) (+ (* {v1} (car g)) (* {v2} (cadr g))) "
                f"(+ (* {v1} (car g)) (* {v2} (cadr g))) 1e-9) "
                f"(fz-report '{name}v ((cdr vj) 2) (map (lambda (q) (* 2 q)) g) (map (lambda (q) (* 2 q)) g) 1e-9) "
                f"(fz-report '{name}y (list (car j) (car vj) (car vg)) (make-list3 ({name} {p1} {p2})) "
                f"(make-list3 ({name} {p1} {p2})) 1e-12) "
                f"(fz-report '{name}g (cdr vg) g g 1e-12))\n")
    if kind == 6:  # a jacobian of R^2 -> R^2 against differences
        l = gen.fresh("l")
        a, b = gen.fresh("x"), gen.fresh("x")
        e1, e2 = gen.num([a, b], rng.randint(2, 3)), gen.num([a, b], rng.randint(2, 3))
        p1, p2 = pt(), pt()
        return (f"(define ({name} {l}) (let (({a} (car {l})) ({b} (cadr {l}))) (list {e1} {e2})))\n"
                f"(fz-report '{name} ((jacobian {name}) (list {p1} {p2})) "
                f"(fz-jac {name} (list {p1} {p2}) 1e-4) (fz-jac {name} (list {p1} {p2}) 1e-5) 1e-5)\n")
    if kind == 7:  # the gradient with respect to a closure: the sensitivity of what it captured
        c, y = gen.fresh("c"), gen.fresh("y")
        body = gen.num([c, y], rng.randint(2, 3))
        p1, p2 = pt(), pt()
        return (f"(define ({name} {c}) (lambda ({y}) (* {c} {body})))\n"
                f"(let ((s ((gradient (lambda (g) (g {p2}))) ({name} {p1}))) "
                f"(fd (lambda (h) (fz-partial (lambda (c) (({name} c) {p2})) (list {p1}) 0 h)))) "
                f"(fz-report '{name} (car s) (fd 1e-4) (fd 1e-5) 1e-5))\n")
    if kind == 8:  # a fourth derivative
        x = gen.fresh("x")
        body = gen.num([x], 2)
        return f"(define ({name} {x}) {body})\n(fz-dk '{name} {name} 4 {pt()} 1e-3)\n"
    # kind 4: perturbation confusion: d/dx of an expression using d/dy of a function of x and y
    x, y = gen.fresh("x"), gen.fresh("y")
    inner = gen.num([x, y], rng.randint(1, 3))
    at = gen.num([x], 1)
    outer = gen.num([x, "DD"], 2).replace("DD", f"((derivative (lambda ({y}) {inner})) {at})")
    return (f"(define ({name} {x}) {outer})\n"
            f"(fz-grad '{name} {name} (list {pt()}) 1e-4)\n"
            f"(fz-dk '{name}d2 {name} 2 {pt()} 1e-3)\n")


# Errors of known, open dlam bugs, counted apart so that a long run goes on finding new
# ones; any other error fails the batch. An entry is (family, text of the error[,
# predicate on the line and the batch's text]). None is open: the last families (#30: a
# custom rule given a sensitivity of the wrong shape under forward mode, a cobundle
# reaching an array primitive, reverse three times over forward through a custom rule)
# were fixed, and seeds 1012 to 1015 (96 000 programs) run clean.
KNOWN = []


def known(line, text=""):
    for name, pat, *needs in KNOWN:
        if pat in line and (not needs or needs[0](line, text)):
            return name
    return None


def run_batch(dlam, text, timeout):
    try:
        p = subprocess.run([dlam, "-"], input=text, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return None, "", "timeout"


def batch(a, b):
    rng = random.Random(a.seed * 100003 + b)
    gen = Gen(rng)
    text = PRELUDE + "".join(program(gen, i) for i in range(a.per_batch))
    return (text,) + run_batch(a.dlam, text, a.timeout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlam", default="build/dlam")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--per-batch", type=int, default=40)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--jobs", type=int, default=1, help="batches run at once")
    ap.add_argument("--out", default="/tmp/adfuzz")
    ap.add_argument("--keep-known", action="store_true",
                    help="also write out (and list) batches whose only errors are known bugs")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    counts = {"ok": 0, "skip": 0, "BAD": 0, "ERR": 0}
    known_counts = {}
    failed = 0
    with ThreadPoolExecutor(max_workers=max(1, a.jobs)) as pool:
        results = pool.map(lambda b: batch(a, b), range(a.batches))
        for b, (text, rc, out, err) in enumerate(results):
            lines = out.splitlines()
            bads, knowns = [], []
            for ln in lines:
                for key in counts:
                    if ln.startswith("(" + key + " "):
                        k = known(ln, text) if key == "ERR" else None
                        if k:
                            known_counts[k] = known_counts.get(k, 0) + 1
                            knowns.append(f"[{k}] {ln}")
                        else:
                            counts[key] += 1
                            if key in ("BAD", "ERR"):
                                bads.append(ln)
            done = sum(1 for ln in lines if ln.startswith(("(ok", "(skip", "(BAD", "(ERR")))
            if rc != 0 or bads or err.strip() or (a.keep_known and knowns):
                failed += 1 if (rc != 0 or bads or err.strip()) else 0
                path = os.path.join(a.out, f"seed{a.seed}_batch{b}.dlam")
                with open(path, "w") as f:
                    f.write(text)
                print(f"batch {b}: rc={rc} checks={done} bad={len(bads)} -> {path}")
                for ln in (bads + (knowns if a.keep_known else []))[:5]:
                    print("  ", ln[:400])
                if err.strip():
                    print("   stderr:", err.strip().splitlines()[-3:])
    print(f"seed {a.seed}: {a.batches} batches of {a.per_batch} programs, ok {counts['ok']}, "
          f"skipped {counts['skip']}, bad {counts['BAD']}, errors {counts['ERR']}, "
          f"known bugs {known_counts or 0}, failing batches {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
