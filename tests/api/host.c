/* host.c — host functions: dlam_register (arguments, results, errors, re-entrant calls,
** handle ownership) and dlam_register_numeric with and without a vjp, in and out of
** differentiated code, checked against analytic derivatives. */
#include "check.h"

/* ---- generic host functions ---- */

/* (host-sum x ...) */
static dlam_status host_sum(dlam_vm* vm, int argc, const dlam_val* argv, dlam_val* result,
                            void* ud) {
  int* calls = ud;
  ++*calls;
  double sum = 0;
  for (int i = 0; i < argc; ++i) {
    double x;
    if (dlam_to_number(vm, argv[i], &x) != DLAM_OK) {
      dlam_set_error(vm, "arguments must be numbers");
      return DLAM_ERR_RUNTIME;
    }
    sum += x;
  }
  *result = dlam_number(vm, sum);
  return DLAM_OK;
}

/* (host-apply f x ...) = (f x ...), through dlam_call; an inner error makes it fail */
static dlam_status host_apply(dlam_vm* vm, int argc, const dlam_val* argv, dlam_val* result,
                              void* ud) {
  (void)ud;
  return dlam_call(vm, argv[0], argc - 1, argv + 1, result);
}

static dlam_status host_identity(dlam_vm* vm, int argc, const dlam_val* argv, dlam_val* result,
                                 void* ud) {
  (void)vm, (void)argc, (void)ud;
  *result = argv[0]; /* an argument handle may be returned */
  return DLAM_OK;
}

static dlam_status host_void(dlam_vm* vm, int argc, const dlam_val* argv, dlam_val* result,
                             void* ud) {
  (void)vm, (void)argc, (void)argv, (void)result, (void)ud;
  return DLAM_OK;
}

static dlam_status host_fail(dlam_vm* vm, int argc, const dlam_val* argv, dlam_val* result,
                             void* ud) {
  (void)argc, (void)argv, (void)result;
  const char* how = ud;
  if (strcmp(how, "message") == 0) {
    dlam_set_error(vm, "the sensor is unplugged");
    return DLAM_ERR_RUNTIME;
  }
  if (strcmp(how, "limit") == 0) {
    dlam_set_error(vm, "out of budget");
    return DLAM_ERR_LIMIT;
  }
  if (strcmp(how, "bad-result") == 0) {
    dlam_val h = dlam_number(vm, 1);
    dlam_release(vm, h);
    *result = h; /* released: invalid */
    return DLAM_OK;
  }
  return DLAM_ERR_RUNTIME; /* no message */
}

static dlam_val kept = NULL;
/* (host-keep x): keeps x beyond the call with dlam_dup */
static dlam_status host_keep(dlam_vm* vm, int argc, const dlam_val* argv, dlam_val* result,
                             void* ud) {
  (void)argc, (void)result, (void)ud;
  if (kept) dlam_release(vm, kept);
  kept = dlam_dup(vm, argv[0]);
  return kept ? DLAM_OK : DLAM_ERR_API;
}

static dlam_val stale = NULL;
/* (host-steal x): keeps the argument handle itself, which dies after the call */
static dlam_status host_steal(dlam_vm* vm, int argc, const dlam_val* argv, dlam_val* result,
                              void* ud) {
  (void)vm, (void)argc, (void)result, (void)ud;
  stale = argv[0];
  return DLAM_OK;
}

static void test_generic(dlam_vm* vm) {
  int calls = 0;
  CHECK_OK(vm, dlam_register(vm, "host-sum", -1, host_sum, &calls));
  CHECK_OK(vm, dlam_register(vm, "host-apply", -1, host_apply, NULL));
  CHECK_OK(vm, dlam_register(vm, "host-identity", 1, host_identity, NULL));
  CHECK_OK(vm, dlam_register(vm, "host-void", 0, host_void, NULL));
  CHECK_OK(vm, dlam_register(vm, "host-fail", 0, host_fail, "message"));
  CHECK_OK(vm, dlam_register(vm, "host-fail-quiet", 0, host_fail, "quiet"));
  CHECK_OK(vm, dlam_register(vm, "host-fail-limit", 0, host_fail, "limit"));
  CHECK_OK(vm, dlam_register(vm, "host-bad-result", 0, host_fail, "bad-result"));
  CHECK_OK(vm, dlam_register(vm, "host-keep", 1, host_keep, NULL));
  CHECK_OK(vm, dlam_register(vm, "host-steal", 1, host_steal, NULL));
  CHECK_OK(vm, dlam_register(vm, "host-two", 2, host_sum, &calls));

  CHECK(eval_number(vm, "(host-sum 1 2 3.5)") == 6.5);
  CHECK(eval_number(vm, "(host-sum)") == 0);
  CHECK(calls == 2);
  /* first-class: passed to map, applied */
  CHECK(eval_number(vm, "(fold-left + 0 (map host-sum '(1 2) '(10 20)))") == 33);
  CHECK(eval_number(vm, "(apply host-sum '(4 5))") == 9);
  CHECK(eval_number(vm, "(host-two 1 2)") == 3);
  CHECK_EVAL_ERROR(vm, "(host-two 1 2 3)", "arity", DLAM_ERR_RUNTIME,
                   "host-two: wrong number of arguments (3)");

  /* re-entrant: host -> dlam -> host */
  CHECK(eval_number(vm, "(host-apply (lambda (x y) (* x y)) 6 7)") == 42);
  CHECK(eval_number(vm, "(host-apply host-apply host-sum 1 2)") == 3);
  CHECK(
      eval_number(vm,
                  "(host-apply (lambda (n) (let loop ((i 0) (acc 0)) (if (= i n) acc (loop (+ i 1) "
                  "(+ acc (host-sum i 0)))))) 100)") == 4950);

  /* returning an argument handle, void */
  CHECK(eval_number(vm, "(let ((l (list 1 2))) (if (eq? l (host-identity l)) 1 0))") == 1);
  CHECK(eval_number(vm, "(if (eq? (host-void) (if #f #f)) 1 0)") == 1);

  /* errors: the host's message, at the script's call site, with a trace */
  const char* src =
      "(define (read-sensor) (+ 1 (host-fail)))\n"
      "(read-sensor)\n";
  CHECK_EVAL_ERROR(vm, src, "sensor.dlam", DLAM_ERR_RUNTIME, "sensor.dlam:1:");
  CHECK_CONTAINS(dlam_last_error(vm), "error: host-fail: the sensor is unplugged");
  CHECK_CONTAINS(dlam_last_error(vm), "at read-sensor (sensor.dlam:1:");
  CHECK_EVAL_ERROR(vm, "(host-fail-quiet)", "quiet", DLAM_ERR_RUNTIME,
                   "host-fail-quiet: host function failed (DLAM_ERR_RUNTIME)");
  CHECK_EVAL_ERROR(vm, "(host-fail-limit)", "limit", DLAM_ERR_LIMIT,
                   "host-fail-limit: out of budget");
  CHECK_EVAL_ERROR(vm, "(host-bad-result)", "bad", DLAM_ERR_RUNTIME,
                   "host-bad-result: the host function returned a handle that is a released");
  CHECK_EVAL_ERROR(vm, "(host-sum 1 'x)", "type", DLAM_ERR_RUNTIME,
                   "host-sum: arguments must be numbers");
  /* an error inside a nested call: its message goes through the host function */
  CHECK_EVAL_ERROR(vm, "(host-apply (lambda (x) (car x)) 5)", "nested", DLAM_ERR_RUNTIME,
                   "nested:1:");
  CHECK_CONTAINS(dlam_last_error(vm), "host-apply: car: expected pair");
  /* caught errors inside host functions do not disturb the outer run */
  CHECK(eval_number(vm, "(+ (host-sum 1) (host-apply host-sum 2))") == 3);

  /* argument handles die with the call; dlam_dup keeps them */
  CHECK_OK(vm, dlam_eval(vm, "(host-keep (list 7 8 9)) (host-steal (list 1))", "keep", NULL));
  double out[3];
  size_t count = 0;
  CHECK_OK(vm,
           dlam_eval(vm,
                     "(define (churn n acc) (if (= n 0) (length acc) (churn (- n 1) (cons n acc))))"
                     "(churn 300000 '())",
                     "churn", NULL));
  CHECK_OK(vm, dlam_to_numbers(vm, kept, out, 3, &count));
  CHECK(count == 3 && out[0] == 7 && out[2] == 9);
  CHECK_STATUS(vm, dlam_to_numbers(vm, stale, out, 3, &count), DLAM_ERR_API);
  dlam_release(vm, kept);

  /* no derivative: differentiated code that calls a generic host function is an error naming it */
  CHECK_EVAL_ERROR(vm, "((gradient (lambda (x) (* x (host-sum x 1)))) 2)", "grad", DLAM_ERR_RUNTIME,
                   "host-sum");
  CHECK(eval_number(vm, "(host-sum 1 1)") == 2);

  /* registration errors */
  CHECK_STATUS(vm, dlam_register(vm, NULL, 0, host_void, NULL), DLAM_ERR_API);
  CHECK_STATUS(vm, dlam_register(vm, "f", 0, NULL, NULL), DLAM_ERR_API);
  CHECK_STATUS(vm, dlam_register(vm, "f", -2, host_void, NULL), DLAM_ERR_API);
  CHECK_STATUS(vm, dlam_register(vm, "f", 256, host_void, NULL), DLAM_ERR_API);
  CHECK_CONTAINS(dlam_last_error(vm), "arity");
}

/* ---- numeric host functions ---- */

typedef struct {
  long calls, vjps;
} Counts;

/* h(x, y) = x^2 sin(y) + 3 */
static double h_fn(const double* x, void* ud) {
  ((Counts*)ud)->calls++;
  return x[0] * x[0] * sin(x[1]) + 3;
}
static void h_vjp(const double* x, double ybar, double* xbar, void* ud) {
  ((Counts*)ud)->vjps++;
  xbar[0] = ybar * 2 * x[0] * sin(x[1]);
  xbar[1] = ybar * x[0] * x[0] * cos(x[1]);
}
static double cube_fn(const double* x, void* ud) {
  (void)ud;
  return x[0] * x[0] * x[0];
}
static double nan_fn(const double* x, void* ud) {
  (void)x, (void)ud;
  return NAN;
}
static double zero_args(const double* x, void* ud) {
  (void)x, (void)ud;
  return 42;
}

static void test_numeric(dlam_vm* vm) {
  Counts c = {0, 0};
  CHECK_OK(vm, dlam_register_numeric(vm, "h", 2, h_fn, h_vjp, &c));
  CHECK_OK(vm, dlam_register_numeric(vm, "cube", 1, cube_fn, NULL, NULL));
  CHECK_OK(vm, dlam_register_numeric(vm, "host-nan", 0, nan_fn, NULL, NULL));
  CHECK_OK(vm, dlam_register_numeric(vm, "answer", 0, zero_args, NULL, NULL));

  double x = 1.5, y = 0.7;
  CHECK_NEAR(eval_number(vm, "(h 1.5 0.7)"), x * x * sin(y) + 3, 1e-15);
  CHECK(eval_number(vm, "(cube 3)") == 27);
  CHECK(eval_number(vm, "(answer)") == 42);
  CHECK(eval_number(vm, "(if (nan? (host-nan)) 1 0)") == 1);
  CHECK_EVAL_ERROR(vm, "(h 1 \"two\")", "type", DLAM_ERR_RUNTIME,
                   "h: expected number as argument 2");
  CHECK_EVAL_ERROR(vm, "(h 1)", "arity", DLAM_ERR_RUNTIME, "h: wrong number of arguments (1)");

  /* gradients through the vjp, in the language */
  CHECK_NEAR(eval_number(vm, "(car ((gradient h) 1.5 0.7))"), 2 * x * sin(y), 1e-14);
  CHECK_NEAR(eval_number(vm, "(cadr ((gradient h) 1.5 0.7))"), x * x * cos(y), 1e-14);
  CHECK(c.vjps == 2);
  /* composed: d/dx [x * h(x, 2x)] = h + x (2x sin 2x + 2 x^2 cos 2x) */
  double composed = x * x * sin(2 * x) + 3 + x * (2 * x * sin(2 * x) + 2 * x * x * cos(2 * x));
  CHECK_NEAR(eval_number(vm, "((gradient (lambda (x) (* x (h x (* 2 x))))) 1.5)"), composed, 1e-13);
  /* passed as a value (map), inside a closure that captures the differentiated variable */
  CHECK_NEAR(
      eval_number(
          vm, "((gradient (lambda (y) (fold-left + 0 (map (lambda (x) (h x y)) '(1 2 3))))) 0.7)"),
      (1 + 4 + 9) * cos(y), 1e-13);
  CHECK_NEAR(
      eval_number(vm,
                  "(fold-left + 0 ((gradient (lambda (l) (fold-left + 0 (map h l '(0.7 0.7))))) "
                  "'(1 2)))"),
      2 * 1 * sin(y) + 2 * 2 * sin(y), 1e-13);

  /* forward mode: the vjp transposed, d/dx h(x, 2x) = h_x + 2 h_y, and a function with
     no vjp is the error reverse mode gives */
  CHECK_NEAR(eval_number(vm, "((derivative (lambda (x) (h x (* 2 x)))) 1.5)"),
             2 * x * sin(2 * x) + 2 * x * x * cos(2 * x), 1e-13);
  CHECK_NEAR(eval_number(vm, "(cdr (jvp (lambda (l) (h (car l) (cadr l))) '(1.5 0.7) '(0 1)))"),
             x * x * cos(y), 1e-14);
  CHECK_EVAL_ERROR(vm, "((derivative (lambda (x) (+ x (cube x)))) 2)", "novjp-fwd",
                   DLAM_ERR_RUNTIME, "cube: has no derivative");

  /* dlam_value_and_gradient of the host function itself and of a script using it */
  dlam_val hv = dlam_get_global(vm, "h");
  double xs[2] = {x, y}, value = 0, g[2] = {0, 0};
  CHECK_OK(vm, dlam_value_and_gradient(vm, hv, 2, xs, &value, g));
  CHECK_NEAR(value, x * x * sin(y) + 3, 1e-15);
  CHECK_NEAR(g[0], 2 * x * sin(y), 1e-14);
  CHECK_NEAR(g[1], x * x * cos(y), 1e-14);
  dlam_release(vm, hv);
  dlam_val f = NULL;
  CHECK_OK(vm, dlam_eval(vm, "(lambda (a b) (* (h a b) (h b a)))", "f", &f));
  CHECK_OK(vm, dlam_value_and_gradient(vm, f, 2, xs, &value, g));
  double h1 = x * x * sin(y) + 3, h2 = y * y * sin(x) + 3;
  CHECK_NEAR(value, h1 * h2, 1e-14);
  CHECK_NEAR(g[0], 2 * x * sin(y) * h2 + h1 * y * y * cos(x), 1e-13);
  CHECK_NEAR(g[1], x * x * cos(y) * h2 + h1 * 2 * y * sin(x), 1e-13);
  dlam_release(vm, f);

  /* second derivatives through a first-order vjp: an error that says so */
  CHECK_EVAL_ERROR(vm, "((gradient (gradient (lambda (x) (h x 1)))) 2)", "nested", DLAM_ERR_RUNTIME,
                   "h: nested derivatives");
  CHECK_EVAL_ERROR(vm, "((derivative (derivative (lambda (x) (* x (h x x))))) 2)", "nested2",
                   DLAM_ERR_RUNTIME, "nested derivatives");

  /* no vjp: fine outside differentiated code, an error naming it inside */
  CHECK_EVAL_ERROR(vm, "((gradient (lambda (x) (+ x (cube x)))) 2)", "novjp", DLAM_ERR_RUNTIME,
                   "cube");
  CHECK_CONTAINS(dlam_last_error(vm), "derivative");
  dlam_val cube = dlam_get_global(vm, "cube");
  CHECK_STATUS(vm, dlam_value_and_gradient(vm, cube, 1, &x, &value, g), DLAM_ERR_RUNTIME);
  CHECK_CONTAINS(dlam_last_error(vm), "cube");
  dlam_release(vm, cube);
  CHECK(eval_number(vm, "(cube 2)") == 8);
  /* ... unless given one in the language with custom-vjp */
  CHECK_NEAR(
      eval_number(
          vm,
          "((gradient (custom-vjp cube (lambda (x) (cons (cube x) (lambda (g) (* g 3 x x)))))) 2)"),
      12, 1e-15);

  /* the vjp is only ever called with the function's arity (here misused on purpose) */
  CHECK_EVAL_ERROR(vm, "(%call-vjp h 1 2)", "vjp", DLAM_ERR_RUNTIME,
                   "h: its vjp takes 2 arguments");
  CHECK(eval_number(vm, "(cadr (%call-vjp h 1.5 0.7 2))") == 2 * x * x * cos(y));

  /* registration errors */
  CHECK_STATUS(vm, dlam_register_numeric(vm, "g", -1, cube_fn, NULL, NULL), DLAM_ERR_API);
  CHECK_STATUS(vm, dlam_register_numeric(vm, "g", 1, NULL, NULL, NULL), DLAM_ERR_API);
  CHECK_STATUS(vm, dlam_register_numeric(vm, NULL, 1, cube_fn, NULL, NULL), DLAM_ERR_API);

  /* a redefinition replaces the global */
  CHECK_OK(vm, dlam_register_numeric(vm, "cube", 1, zero_args, NULL, NULL));
  CHECK(eval_number(vm, "(cube 2)") == 42);
}

int main(void) {
  dlam_vm* vm = dlam_new(NULL);
  test_generic(vm);
  test_numeric(vm);
  dlam_free(vm);
  return check_done();
}
