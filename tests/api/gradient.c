/* gradient.c — dlam_value_and_gradient against analytic gradients, against the
** language's own value-and-gradient, and its error paths. */
#include "check.h"

/* fn = (eval source); checks value and gradient at x against the expected ones. */
static void check_vg(dlam_vm* vm, const char* source, size_t n, const double* x, double value,
                     const double* gradient, double tol) {
  dlam_val fn = NULL;
  if (dlam_eval(vm, source, "fn", &fn) != DLAM_OK) {
    fprintf(stderr, "eval of %s failed: %s\n", source, dlam_last_error(vm));
    ++check_failures;
    return;
  }
  double y = NAN, g[8];
  for (size_t i = 0; i < 8; ++i) g[i] = NAN;
  dlam_status s = dlam_value_and_gradient(vm, fn, n, x, &y, g);
  if (s != DLAM_OK) {
    fprintf(stderr, "value_and_gradient of %s failed: %s\n", source, dlam_last_error(vm));
    ++check_failures;
  } else {
    CHECK_NEAR(y, value, tol);
    for (size_t i = 0; i < n; ++i) CHECK_NEAR(g[i], gradient[i], tol);
  }
  dlam_release(vm, fn);
}

/* The same numbers as the prelude's value-and-gradient. */
static void check_against_language(dlam_vm* vm, const char* source, size_t n, const double* x) {
  char buf[1024];
  dlam_val fn = NULL, vg = NULL, r = NULL;
  CHECK_OK(vm, dlam_eval(vm, source, "fn", &fn));
  snprintf(buf, sizeof buf,
           "(lambda (f . xs) (let ((r (apply (value-and-gradient f) xs))) "
           "(cons (car r) (let ((g (cdr r))) (if (pair? g) g (list g))))))");
  CHECK_OK(vm, dlam_eval(vm, buf, "vg", &vg));
  dlam_val args[9];
  args[0] = fn;
  for (size_t i = 0; i < n; ++i) args[i + 1] = dlam_number(vm, x[i]);
  CHECK_OK(vm, dlam_call(vm, vg, (int)n + 1, args, &r));
  double expect[9];
  size_t count = 0;
  CHECK_OK(vm, dlam_to_numbers(vm, r, expect, 9, &count));
  CHECK(count == n + 1);
  double y = 0, g[8];
  CHECK_OK(vm, dlam_value_and_gradient(vm, fn, n, x, &y, g));
  CHECK(y == expect[0]);
  for (size_t i = 0; i < n; ++i) CHECK(g[i] == expect[i + 1]);
  for (size_t i = 0; i < n; ++i) dlam_release(vm, args[i + 1]);
  dlam_release(vm, r);
  dlam_release(vm, vg);
  dlam_release(vm, fn);
}

/* Collections over 2 * 10^4 gradients of a small function taken from C, back to back (no dlam
** code runs between two calls), against the same gradients taken in a dlam loop: the C entry
** point collects no more often. The end of a gradient asks for a collection when the nursery
** is nearly full; it must run before the next gradient starts, not inside it, where it traced
** the half-built tape and made it old (once a full collection ran there, it counted the whole
** heap as tape and asked for another at the end, and so on: 8 988 collections in these
** 2 * 10^4 calls before the fix). */
static void collections_of_back_to_back_gradients(void) {
  dlam_vm* vm = dlam_new(NULL);
  CHECK_OK(
      vm,
      dlam_eval(vm,
                "(define (f x y) (+ (* x (sin y)) (* y y)))\n"
                "(define (grad-loop n) (let loop ((i 0) (acc 0))\n"
                "  (if (= i n) acc\n"
                "      (loop (+ i 1) (+ acc (car ((value-and-gradient f) 1.5 (* i 1e-6))))))))\n",
                "setup", NULL));
  dlam_val f = dlam_get_global(vm, "f"), vg = NULL;
  CHECK_OK(vm, dlam_eval(vm, "(value-and-gradient f)", "vg", &vg));
  dlam_val args[2] = {dlam_number(vm, 1.5), dlam_number(vm, 0.25)};
  double x[2] = {1.5, 0.25}, y = 0, g[2] = {0, 0};
  int failed = 0;
  /* a host that also called (value-and-gradient f) through dlam_call */
  for (int i = 0; i < 1000; ++i) {
    dlam_val r = NULL;
    if (dlam_value_and_gradient(vm, f, 2, x, &y, g) != DLAM_OK) ++failed;
    if (dlam_call(vm, vg, 2, args, &r) != DLAM_OK) ++failed;
    dlam_release(vm, r);
  }
  double before = eval_number(vm, "(caddr (gc-stats))");
  for (int i = 0; i < 20000; ++i) {
    x[1] = i * 1e-6;
    if (dlam_value_and_gradient(vm, f, 2, x, &y, g) != DLAM_OK) ++failed;
  }
  CHECK(failed == 0);
  CHECK_NEAR(y, 1.5 * sin(x[1]) + x[1] * x[1], 1e-15);
  CHECK_NEAR(g[0], sin(x[1]), 1e-15);
  CHECK_NEAR(g[1], 1.5 * cos(x[1]) + 2 * x[1], 1e-15);
  double api = eval_number(vm, "(caddr (gc-stats))") - before;
  double sum = 0;
  for (int i = 0; i < 20000; ++i) sum += 1.5 * sin(i * 1e-6) + (i * 1e-6) * (i * 1e-6);
  CHECK_NEAR(eval_number(vm, "(grad-loop 20000)"), sum, 1e-12);
  before = eval_number(vm, "(caddr (gc-stats))");
  CHECK_NEAR(eval_number(vm, "(grad-loop 20000)"), sum, 1e-12);
  double in_language = eval_number(vm, "(caddr (gc-stats))") - before;
  fprintf(stderr, "collections over 2 * 10^4 gradients: %g from C, %g in a dlam loop\n", api,
          in_language);
  CHECK(api <= in_language + 1);
  CHECK(api <= 2);
  dlam_release(vm, f);
  dlam_release(vm, vg);
  dlam_release(vm, args[0]);
  dlam_release(vm, args[1]);
  dlam_free(vm);
}

int main(void) {
  dlam_vm* vm = dlam_new(NULL);

  /* the examples of docs/differentiation.md */
  check_vg(vm, "(lambda (x) (* x x x))", 1, (double[]){2}, 8, (double[]){12}, 0);
  check_vg(vm, "(lambda (x y) (* x (sin y)))", 2, (double[]){2, 0}, 0, (double[]){0, 2}, 0);
  check_vg(vm, "(lambda (x) (if (> x 0) (* x x) (- x)))", 1, (double[]){-3}, 3, (double[]){-1}, 0);
  check_vg(vm, "(lambda (x) (* x ((gradient (lambda (y) (+ x y))) 1)))", 1, (double[]){2}, 2,
           (double[]){1}, 0);
  check_vg(vm, "log1pexp", 1, (double[]){1000}, 1000, (double[]){1}, 1e-15);
  check_vg(vm, "log1pexp", 1, (double[]){0}, log(2), (double[]){0.5}, 1e-15);

  /* several arguments, analytic */
  double a = 0.3, b = -1.2, c = 2.5;
  check_vg(vm, "(lambda (a b c) (+ (* a b c) (exp (* a b)) (/ c b)))", 3, (double[]){a, b, c},
           a * b * c + exp(a * b) + c / b,
           (double[]){b * c + b * exp(a * b), a * c + a * exp(a * b) - c / (b * b), a * b + 1 / b},
           1e-14);
  check_vg(vm, "(lambda (x y) (sqrt (+ (* x x) (* y y))))", 2, (double[]){3, 4}, 5,
           (double[]){0.6, 0.8}, 1e-15);
  /* an argument the value does not depend on: 0 (also when the whole sensitivity is a symbolic
   * zero) */
  check_vg(vm, "(lambda (x y) (* x x))", 2, (double[]){3, 4}, 9, (double[]){6, 0}, 0);
  check_vg(vm, "(lambda (x y) 7)", 2, (double[]){3, 4}, 7, (double[]){0, 0}, 0);
  check_vg(vm, "(lambda (x) 7)", 1, (double[]){3}, 7, (double[]){0}, 0);
  check_vg(vm, "(lambda (x y z) y)", 3, (double[]){1, 2, 3}, 2, (double[]){0, 1, 0}, 0);
  /* no arguments */
  check_vg(vm, "(lambda () 5)", 0, NULL, 5, NULL, 0);
  /* closures capturing values; loops; lists inside */
  check_vg(vm, "(let ((k 3)) (lambda (x) (* k x x)))", 1, (double[]){2}, 12, (double[]){12}, 0);
  check_vg(vm,
           "(lambda (x n) (let loop ((i 0) (acc 1)) (if (= i 5) acc (loop (+ i 1) (* acc x)))))", 2,
           (double[]){2, 0}, 32, (double[]){80, 0}, 0);
  check_vg(vm, "(lambda (x y) (fold-left + 0 (map (lambda (t) (* t t)) (list x y x))))", 2,
           (double[]){1, 2}, 6, (double[]){4, 4}, 0);
  /* primitives and custom derivatives as the function itself */
  check_vg(vm, "sin", 1, (double[]){0.5}, sin(0.5), (double[]){cos(0.5)}, 1e-15);
  check_vg(vm, "*", 2, (double[]){3, 5}, 15, (double[]){5, 3}, 0);
  check_vg(vm,
           "(custom-vjp (lambda (x) (* x x)) (lambda (x) (cons (* x x) (lambda (g) (* g 100)))))",
           1, (double[]){3}, 9, (double[]){100}, 0);
  /* the iterated-sine example against central differences */
  {
    const char* src =
        "(lambda (x) (let loop ((i 0) (acc x)) (if (= i 10) acc (loop (+ i 1) (sin acc)))))";
    double x0 = 0.5, h = 1e-6, acc = x0;
    for (int i = 0; i < 10; ++i) acc = sin(acc);
    double hi = x0 + h, lo = x0 - h;
    for (int i = 0; i < 10; ++i) hi = sin(hi), lo = sin(lo);
    check_vg(vm, src, 1, &x0, acc, (double[]){(hi - lo) / (2 * h)}, 1e-8);
  }

  /* the same numbers as the language */
  check_against_language(vm, "(lambda (x y) (* x (sin y)))", 2, (double[]){1.25, -0.5});
  check_against_language(vm, "(lambda (a b c) (/ (* a (exp b)) (+ 1 (* c c))))", 3,
                         (double[]){0.5, 0.25, 2});
  check_against_language(vm, "(lambda (x) (log (+ 1 (* x x))))", 1, (double[]){3});

  /* many calls: the transform is made once and the results stay right */
  {
    dlam_val fn = NULL;
    CHECK_OK(vm, dlam_eval(vm, "(lambda (x y) (+ (* x x y) (sin (* x y))))", "fn", &fn));
    for (int i = 0; i < 2000; ++i) {
      double x[2] = {0.001 * i, 1.5 - 0.0005 * i}, y = 0, g[2];
      if (dlam_value_and_gradient(vm, fn, 2, x, &y, g) != DLAM_OK) {
        CHECK(0);
        break;
      }
      double p = x[0] * x[1];
      CHECK_NEAR(g[0], 2 * x[0] * x[1] + x[1] * cos(p), 1e-13);
      CHECK_NEAR(g[1], x[0] * x[0] + x[0] * cos(p), 1e-13);
    }
    dlam_release(vm, fn);
  }

  /* the collector: a gradient whose tape (some 14 MB) outgrows the 4 MB nursery is followed
     by one collection, at its end, which traces almost nothing (VM::gradientBoundary) */
  {
    dlam_val fn = NULL;
    CHECK_OK(vm, dlam_eval(vm,
                           "(lambda (x) (let loop ((i 0) (acc x)) (if (= i 120000) acc (loop (+ i "
                           "1) (sin acc)))))",
                           "fn", &fn));
    double x = 0.5, y, g, g0 = 0;
    for (int i = 0; i < 5; ++i) {
      double collections = eval_number(vm, "(caddr (gc-stats))");
      CHECK_OK(vm, dlam_value_and_gradient(vm, fn, 1, &x, &y, &g));
      if (i == 0) g0 = g;
      CHECK(g == g0);
      /* the collection asked for at the end runs at the next safe point (gc-stats' call) */
      double after = eval_number(vm, "(caddr (gc-stats))");
      if (i > 0) CHECK(after == collections + 1);
    }
    dlam_release(vm, fn);
  }

  /* errors: not a number, not a procedure, wrong arity, an error inside; outputs untouched */
  {
    dlam_val fn = NULL;
    double y = -1, g[2] = {-1, -1}, x[2] = {1, 2};
    CHECK_OK(vm, dlam_eval(vm, "(lambda (x) (list x x))", "fn", &fn));
    CHECK_STATUS(vm, dlam_value_and_gradient(vm, fn, 1, x, &y, g), DLAM_ERR_RUNTIME);
    CHECK_CONTAINS(dlam_last_error(vm), "not a number");
    CHECK(y == -1 && g[0] == -1);
    dlam_release(vm, fn);
    CHECK_OK(vm, dlam_eval(vm, "(lambda (x) (car x))", "car.dlam", &fn));
    CHECK_STATUS(vm, dlam_value_and_gradient(vm, fn, 1, x, &y, g), DLAM_ERR_RUNTIME);
    CHECK_CONTAINS(dlam_last_error(vm), "car.dlam:1:");
    CHECK_STATUS(vm, dlam_value_and_gradient(vm, fn, 2, x, &y, g), DLAM_ERR_RUNTIME);
    CHECK_CONTAINS(dlam_last_error(vm), "expected 1 argument, got 2");
    dlam_release(vm, fn);
    fn = dlam_number(vm, 3);
    CHECK_STATUS(vm, dlam_value_and_gradient(vm, fn, 1, x, &y, g), DLAM_ERR_RUNTIME);
    CHECK_CONTAINS(dlam_last_error(vm), "expected a procedure");
    CHECK_STATUS(vm, dlam_value_and_gradient(vm, fn, 1, NULL, &y, g), DLAM_ERR_API);
    CHECK_STATUS(vm, dlam_value_and_gradient(vm, fn, 1, x, &y, NULL), DLAM_ERR_API);
    dlam_release(vm, fn);
    CHECK_STATUS(vm, dlam_value_and_gradient(vm, fn, 1, x, &y, g), DLAM_ERR_API);
    CHECK(y == -1 && g[0] == -1 && g[1] == -1);
    /* value may be NULL */
    CHECK_OK(vm, dlam_eval(vm, "(lambda (x) (* 3 x))", "fn", &fn));
    CHECK_OK(vm, dlam_value_and_gradient(vm, fn, 1, x, NULL, g));
    CHECK(g[0] == 3);
    dlam_release(vm, fn);
  }

  dlam_free(vm);
  collections_of_back_to_back_gradients();
  return check_done();
}
