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

Usage: python3 tools/adfuzz.py --dlam build/dlam [--seed S] [--batches N] [--per-batch K]
       [--out DIR]   (failing programs are written to DIR, default /tmp/adfuzz)
Exit status 1 when something failed.
"""

import argparse
import os
import random
import subprocess
import sys

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
        ((and (pair? a) (pair? b)) (and (fz-close? (car a) (car b) tol) (fz-close? (cdr a) (cdr b) tol)))
        (else #f)))
(define (fz-bad? v)
  (cond ((number? v) (or (nan? v) (> (abs v) 1e8)))
        ((pair? v) (or (fz-bad? (car v)) (fz-bad? (cdr v))))
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
        k = rng.randrange(32)
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


def program(gen, idx):
    """One check: returns dlam text defining and checking one function."""
    rng = gen.rng
    kind = rng.randrange(9)
    name = f"p{idx}"
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


def run_batch(dlam, text, timeout):
    try:
        p = subprocess.run([dlam, "-"], input=text, capture_output=True, text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired:
        return None, "", "timeout"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dlam", default="build/dlam")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--per-batch", type=int, default=40)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--out", default="/tmp/adfuzz")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    counts = {"ok": 0, "skip": 0, "BAD": 0}
    failed = 0
    for b in range(a.batches):
        rng = random.Random(a.seed * 100003 + b)
        gen = Gen(rng)
        progs = [program(gen, i) for i in range(a.per_batch)]
        text = PRELUDE + "".join(progs)
        rc, out, err = run_batch(a.dlam, text, a.timeout)
        bads = [ln for ln in out.splitlines() if ln.startswith("(BAD")]
        for ln in out.splitlines():
            for key in counts:
                if ln.startswith("(" + key + " "):
                    counts[key] += 1
        done = sum(1 for ln in out.splitlines() if ln.startswith(("(ok", "(skip", "(BAD")))
        if rc != 0 or bads or err.strip():
            failed += 1
            path = os.path.join(a.out, f"seed{a.seed}_batch{b}.dlam")
            with open(path, "w") as f:
                f.write(text)
            print(f"batch {b}: rc={rc} checks={done} bad={len(bads)} -> {path}")
            for ln in bads[:5]:
                print("  ", ln)
            if err.strip():
                print("   stderr:", err.strip().splitlines()[-3:])
    print(f"seed {a.seed}: {a.batches} batches, ok {counts['ok']}, skipped {counts['skip']}, "
          f"bad {counts['BAD']}, failing batches {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
