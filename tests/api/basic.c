/* basic.c — the everyday C API: VMs, eval, files, globals, calls, numbers, lists, handles. */
#include "check.h"

static void test_eval(dlam_vm* vm) {
  dlam_val v = NULL;
  /* the value of the last top-level form */
  CHECK_OK(vm, dlam_eval(vm, "(define x 20) (+ x 1) (* x 2)", "chunk", &v));
  double d = 0;
  CHECK_OK(vm, dlam_to_number(vm, v, &d));
  CHECK(d == 40);
  CHECK(strcmp(dlam_last_error(vm), "") == 0);
  dlam_release(vm, v);

  /* result may be NULL; chunk_name may be NULL */
  CHECK_OK(vm, dlam_eval(vm, "(define y (+ x 2))", NULL, NULL));
  CHECK(eval_number(vm, "y") == 22);

  /* a define (or nothing) gives void, which is not a number */
  CHECK_OK(vm, dlam_eval(vm, "(define z 1)", "c", &v));
  CHECK(v != NULL);
  CHECK_STATUS(vm, dlam_to_number(vm, v, &d), DLAM_ERR_RUNTIME);
  CHECK_CONTAINS(dlam_last_error(vm), "dlam_to_number: expected a number");
  dlam_release(vm, v);
  CHECK_OK(vm, dlam_eval(vm, "", "empty", &v));
  CHECK(v != NULL);
  dlam_release(vm, v);

  /* the prelude is loaded */
  CHECK_NEAR(eval_number(vm, "((gradient (lambda (x) (* x x x))) 2)"), 12, 1e-12);
  CHECK_NEAR(eval_number(vm, "(fold-left + 0 (map (lambda (x) (* x x)) '(1 2 3)))"), 14, 0);
}

static void test_run_file(dlam_vm* vm) {
  char path[256];
  write_temp_file(path, sizeof path, ".dlam", "(define (sq x) (* x x))\n(sq 7)\n");
  dlam_val v = NULL;
  CHECK_OK(vm, dlam_run_file(vm, path, &v));
  double d = 0;
  CHECK_OK(vm, dlam_to_number(vm, v, &d));
  CHECK(d == 49);
  dlam_release(vm, v);
  CHECK(eval_number(vm, "(sq 3)") == 9);
  CHECK_OK(vm, dlam_run_file(vm, path, NULL));
  unlink(path);
}

static void test_globals(dlam_vm* vm) {
  dlam_val n = dlam_number(vm, 2.5);
  CHECK(n != NULL);
  CHECK_OK(vm, dlam_set_global(vm, "host-value", n));
  CHECK(eval_number(vm, "(* host-value 2)") == 5);
  dlam_release(vm, n);
  CHECK(eval_number(vm, "host-value") == 2.5); /* the global keeps its value */

  dlam_val g = dlam_get_global(vm, "host-value");
  CHECK(g != NULL);
  double d = 0;
  CHECK_OK(vm, dlam_to_number(vm, g, &d));
  CHECK(d == 2.5);
  dlam_release(vm, g);

  CHECK(dlam_get_global(vm, "no-such-global") == NULL);
  CHECK(strcmp(dlam_last_error(vm), "") == 0);
  CHECK(dlam_get_global(vm, "car") != NULL); /* leaks a handle: fine, freed with the VM */
}

static void test_call(dlam_vm* vm) {
  CHECK_OK(vm, dlam_eval(vm, "(define (add3 a b c) (+ a (* 10 b) (* 100 c)))", "defs", NULL));
  dlam_val f = dlam_get_global(vm, "add3");
  dlam_val args[3] = {dlam_number(vm, 1), dlam_number(vm, 2), dlam_number(vm, 3)};
  dlam_val r = NULL;
  CHECK_OK(vm, dlam_call(vm, f, 3, args, &r));
  double d = 0;
  CHECK_OK(vm, dlam_to_number(vm, r, &d));
  CHECK(d == 321);
  dlam_release(vm, r);
  /* result may be NULL */
  CHECK_OK(vm, dlam_call(vm, f, 3, args, NULL));
  for (int i = 0; i < 3; ++i) dlam_release(vm, args[i]);
  dlam_release(vm, f);

  /* primitives and closures made by scripts */
  dlam_val car = dlam_get_global(vm, "car");
  double xs[3] = {4, 5, 6};
  dlam_val l = dlam_list_of_numbers(vm, xs, 3);
  CHECK_OK(vm, dlam_call(vm, car, 1, &l, &r));
  CHECK_OK(vm, dlam_to_number(vm, r, &d));
  CHECK(d == 4);
  dlam_release(vm, r);
  dlam_release(vm, car);

  dlam_val adder = NULL;
  CHECK_OK(vm, dlam_eval(vm, "(lambda (k) (lambda (x) (+ x k)))", "adder", &adder));
  dlam_val k = dlam_number(vm, 100);
  dlam_val add100 = NULL;
  CHECK_OK(vm, dlam_call(vm, adder, 1, &k, &add100));
  dlam_val five = dlam_number(vm, 5);
  CHECK_OK(vm, dlam_call(vm, add100, 1, &five, &r));
  CHECK_OK(vm, dlam_to_number(vm, r, &d));
  CHECK(d == 105);
  dlam_release(vm, r);

  /* a list through map */
  CHECK_OK(vm, dlam_eval(vm, "(define (square-all l) (map (lambda (x) (* x x)) l))", "m", NULL));
  dlam_val sq = dlam_get_global(vm, "square-all");
  CHECK_OK(vm, dlam_call(vm, sq, 1, &l, &r));
  double out[3] = {0};
  size_t count = 0;
  CHECK_OK(vm, dlam_to_numbers(vm, r, out, 3, &count));
  CHECK(count == 3 && out[0] == 16 && out[1] == 25 && out[2] == 36);
  dlam_release(vm, r);
  dlam_release(vm, sq);
  dlam_release(vm, l);
  dlam_release(vm, five);
  dlam_release(vm, add100);
  dlam_release(vm, k);
  dlam_release(vm, adder);

  /* zero arguments; argv may be NULL */
  CHECK_OK(vm, dlam_eval(vm, "(define (seven) 7)", "z", NULL));
  dlam_val seven = dlam_get_global(vm, "seven");
  CHECK_OK(vm, dlam_call(vm, seven, 0, NULL, &r));
  CHECK_OK(vm, dlam_to_number(vm, r, &d));
  CHECK(d == 7);
  dlam_release(vm, r);
  dlam_release(vm, seven);
}

static void test_numbers(dlam_vm* vm) {
  double d = 0;
  dlam_val n = dlam_number(vm, -0.125);
  CHECK_OK(vm, dlam_to_number(vm, n, &d));
  CHECK(d == -0.125);
  dlam_release(vm, n);

  n = dlam_number(vm, NAN);
  CHECK_OK(vm, dlam_set_global(vm, "a-nan", n));
  dlam_val b = NULL;
  CHECK_OK(vm, dlam_eval(vm, "(if (nan? a-nan) 1 0)", "nan", &b));
  CHECK_OK(vm, dlam_to_number(vm, b, &d));
  CHECK(d == 1);
  dlam_release(vm, b);
  dlam_release(vm, n);
  n = dlam_number(vm, INFINITY);
  CHECK_OK(vm, dlam_to_number(vm, n, &d));
  CHECK(isinf(d) && d > 0);
  dlam_release(vm, n);

  /* lists */
  double xs[5] = {1, 2, 3, 4, 5}, out[5] = {0};
  size_t count = 99;
  dlam_val l = dlam_list_of_numbers(vm, xs, 5);
  CHECK(l != NULL);
  CHECK_OK(vm, dlam_to_numbers(vm, l, out, 5, &count));
  CHECK(count == 5);
  for (int i = 0; i < 5; ++i) CHECK(out[i] == xs[i]);
  CHECK_OK(vm, dlam_set_global(vm, "five", l));
  CHECK(eval_number(vm, "(fold-left + 0 five)") == 15);
  CHECK(eval_number(vm, "(length five)") == 5);

  /* capacity: ask for the length with capacity 0; too small a buffer fails and stores nothing */
  count = 0;
  CHECK_STATUS(vm, dlam_to_numbers(vm, l, NULL, 0, &count), DLAM_ERR_API);
  CHECK(count == 5);
  double small[2] = {-1, -1};
  CHECK_STATUS(vm, dlam_to_numbers(vm, l, small, 2, &count), DLAM_ERR_API);
  CHECK(count == 5 && small[0] == -1);
  CHECK_CONTAINS(dlam_last_error(vm), "capacity");
  CHECK_OK(vm, dlam_to_numbers(vm, l, out, 5, NULL));
  dlam_release(vm, l);

  /* the empty list */
  dlam_val empty = dlam_list_of_numbers(vm, NULL, 0);
  CHECK(empty != NULL);
  CHECK_OK(vm, dlam_to_numbers(vm, empty, NULL, 0, &count));
  CHECK(count == 0);
  CHECK_OK(vm, dlam_set_global(vm, "empty", empty));
  CHECK(eval_number(vm, "(if (null? empty) 1 0)") == 1);
  dlam_release(vm, empty);

  /* vectors: made by the host, read back, differentiated with respect to */
  double ws[3] = {1, -2, 0.5}, back[3] = {0};
  dlam_val w = dlam_vector_of_numbers(vm, ws, 3);
  CHECK(w != NULL);
  CHECK_OK(vm, dlam_to_numbers(vm, w, back, 3, &count));
  CHECK(count == 3 && back[0] == 1 && back[1] == -2 && back[2] == 0.5);
  CHECK_STATUS(vm, dlam_to_numbers(vm, w, back, 2, &count), DLAM_ERR_API);
  CHECK(count == 3);
  CHECK_OK(vm, dlam_set_global(vm, "w", w));
  CHECK(eval_number(vm, "(if (vector? w) (vector-dot w w) -1)") == 5.25);
  dlam_val grad = NULL, g = NULL;
  CHECK_OK(vm, dlam_eval(vm, "(gradient (lambda (v) (vector-dot v v)))", "vectors", &grad));
  CHECK_OK(vm, dlam_call(vm, grad, 1, &w, &g));
  CHECK_OK(vm, dlam_to_numbers(vm, g, back, 3, &count));
  CHECK(count == 3 && back[0] == 2 && back[1] == -4 && back[2] == 1);
  dlam_val empty_vector = dlam_vector_of_numbers(vm, NULL, 0);
  CHECK_OK(vm, dlam_to_numbers(vm, empty_vector, NULL, 0, &count));
  CHECK(count == 0);
  CHECK(dlam_vector_of_numbers(vm, NULL, 2) == NULL);
  CHECK_CONTAINS(dlam_last_error(vm), "xs is NULL");
  dlam_release(vm, empty_vector);
  dlam_release(vm, g);
  dlam_release(vm, grad);
  dlam_release(vm, w);

  /* not a list of numbers */
  dlam_val bad = NULL;
  CHECK_OK(vm, dlam_eval(vm, "'(1 two 3)", "bad", &bad));
  CHECK_STATUS(vm, dlam_to_numbers(vm, bad, out, 5, &count), DLAM_ERR_RUNTIME);
  CHECK_CONTAINS(dlam_last_error(vm), "element 2 is not a number");
  dlam_release(vm, bad);
  CHECK_OK(vm, dlam_eval(vm, "(cons 1 2)", "dotted", &bad));
  CHECK_STATUS(vm, dlam_to_numbers(vm, bad, out, 5, &count), DLAM_ERR_RUNTIME);
  CHECK_CONTAINS(dlam_last_error(vm), "expected a list of numbers");
  dlam_release(vm, bad);
}

static void test_dup_release(dlam_vm* vm) {
  dlam_val a = dlam_number(vm, 3);
  dlam_val b = dlam_dup(vm, a);
  CHECK(b != NULL && b != a);
  dlam_release(vm, a);
  double d = 0;
  CHECK_OK(vm, dlam_to_number(vm, b, &d));
  CHECK(d == 3);
  dlam_release(vm, b);
  dlam_release(vm, NULL); /* ignored */
  CHECK(strcmp(dlam_last_error(vm), "") == 0);
}

static void test_interrupt_idle(void) {
  /* an interrupt while nothing runs stops the next run that gets far enough to check */
  dlam_vm* vm = dlam_new(NULL);
  dlam_interrupt(vm);
  CHECK_EVAL_ERROR(vm, "(let loop ((i 0)) (if (< i 1000000) (loop (+ i 1)) i))", "spin",
                   DLAM_ERR_LIMIT, "interrupted");
  /* and then it is gone */
  CHECK(eval_number(vm, "(let loop ((i 0)) (if (< i 1000000) (loop (+ i 1)) i))") == 1000000);
  dlam_interrupt(NULL);
  dlam_free(vm);
}

int main(void) {
  dlam_vm* vm = dlam_new(NULL);
  CHECK(vm != NULL);
  CHECK(strcmp(dlam_last_error(vm), "") == 0);
  test_eval(vm);
  test_run_file(vm);
  test_globals(vm);
  test_call(vm);
  test_numbers(vm);
  test_dup_release(vm);
  dlam_free(vm);
  dlam_free(NULL);
  test_interrupt_idle();
  return check_done();
}
