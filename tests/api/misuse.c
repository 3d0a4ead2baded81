/* misuse.c — every function of the C API that takes a handle, given each kind of bad handle (NULL,
** released, of another VM, of a freed VM, forged), and given a handle of the wrong type: each
** call returns its error status with a message saying what was wrong, and the VM is checked
** usable after every one. Also a host function that returns a bad handle, and host functions
** that fail in the ways a host can (an error status without a message, a nested failure). */
#include "check.h"

/* The VM still computes, and its handles still work. */
static void check_usable(dlam_vm* vm, dlam_val keep) {
  CHECK(eval_number(vm, "(+ 1 2)") == 3);
  double d = 0;
  CHECK_OK(vm, dlam_to_number(vm, keep, &d));
  CHECK(d == 42);
}

typedef struct {
  const char* what;
  dlam_val h;
  const char* why; /* in the message */
} bad_handle;

/* Every handle-taking function given bad: DLAM_ERR_API (NULL from functions returning a
** handle, -1 from dlam_type_of), a message naming the function and saying why. */
static void check_bad_handle(dlam_vm* vm, dlam_val keep, bad_handle b) {
  double d = 0, xs[2] = {1, 2}, g[2] = {0, 0};
  size_t n = 0;
  char buf[16];
  dlam_val r = (dlam_val)1;
  fprintf(stderr, "  (%s)\n", b.what);

  CHECK_STATUS(vm, dlam_set_global(vm, "x", b.h), DLAM_ERR_API);
  CHECK_CONTAINS(dlam_last_error(vm), "dlam_set_global: the value");
  CHECK_CONTAINS(dlam_last_error(vm), b.why);
  check_usable(vm, keep);

  CHECK_STATUS(vm, dlam_call(vm, b.h, 0, NULL, &r), DLAM_ERR_API);
  CHECK(r == NULL);
  CHECK_CONTAINS(dlam_last_error(vm), "dlam_call: the procedure");
  CHECK_CONTAINS(dlam_last_error(vm), b.why);
  check_usable(vm, keep);

  dlam_val plus = dlam_get_global(vm, "+");
  dlam_val args[2] = {keep, b.h};
  r = (dlam_val)1;
  CHECK_STATUS(vm, dlam_call(vm, plus, 2, args, &r), DLAM_ERR_API);
  CHECK(r == NULL);
  CHECK_CONTAINS(dlam_last_error(vm), "dlam_call: argument 2");
  CHECK_CONTAINS(dlam_last_error(vm), b.why);
  dlam_release(vm, plus);
  check_usable(vm, keep);

  r = (dlam_val)1;
  CHECK_STATUS(vm, dlam_call_numbers(vm, b.h, 2, xs, &d, &r), DLAM_ERR_API);
  CHECK(r == NULL);
  CHECK_CONTAINS(dlam_last_error(vm), "dlam_call_numbers: the procedure");
  CHECK_CONTAINS(dlam_last_error(vm), b.why);
  check_usable(vm, keep);

  d = -1;
  CHECK_STATUS(vm, dlam_to_number(vm, b.h, &d), DLAM_ERR_API);
  CHECK(d == -1);
  CHECK_CONTAINS(dlam_last_error(vm), "dlam_to_number: the value");
  CHECK_CONTAINS(dlam_last_error(vm), b.why);
  check_usable(vm, keep);

  n = 7;
  CHECK_STATUS(vm, dlam_to_numbers(vm, b.h, xs, 2, &n), DLAM_ERR_API);
  CHECK(n == 0 && xs[0] == 1);
  CHECK_CONTAINS(dlam_last_error(vm), "dlam_to_numbers: the list");
  CHECK_CONTAINS(dlam_last_error(vm), b.why);
  check_usable(vm, keep);

  CHECK(dlam_type_of(vm, b.h) == -1);
  CHECK_CONTAINS(dlam_last_error(vm), "dlam_type_of: the value");
  CHECK_CONTAINS(dlam_last_error(vm), b.why);
  check_usable(vm, keep);

  CHECK_STATUS(vm, dlam_to_string(vm, b.h, 0, buf, sizeof buf, &n), DLAM_ERR_API);
  CHECK_CONTAINS(dlam_last_error(vm), "dlam_to_string: the value");
  CHECK_CONTAINS(dlam_last_error(vm), b.why);
  check_usable(vm, keep);

  CHECK(dlam_dup(vm, b.h) == NULL);
  CHECK_CONTAINS(dlam_last_error(vm), "dlam_dup: the value");
  CHECK_CONTAINS(dlam_last_error(vm), b.why);
  check_usable(vm, keep);

  CHECK_STATUS(vm, dlam_value_and_gradient(vm, b.h, 2, xs, &d, g), DLAM_ERR_API);
  CHECK(g[0] == 0 && g[1] == 0);
  CHECK_CONTAINS(dlam_last_error(vm), "dlam_value_and_gradient: the function");
  CHECK_CONTAINS(dlam_last_error(vm), b.why);
  check_usable(vm, keep);

  /* dlam_release of a NULL handle is ignored (as free(NULL)); of any other bad handle it
  ** reports the misuse in dlam_last_error and does nothing else. */
  dlam_release(vm, b.h);
  if (b.h) {
    CHECK_CONTAINS(dlam_last_error(vm), "dlam_release: the handle");
    CHECK_CONTAINS(dlam_last_error(vm), b.why);
  } else {
    CHECK(dlam_last_error(vm)[0] == '\0');
  }
  check_usable(vm, keep);
}

/* A host function returning the handle it was given in ud (bad on purpose). */
static dlam_status return_ud(dlam_vm* vm, int argc, const dlam_val* argv, dlam_val* result,
                             void* ud) {
  (void)vm;
  (void)argc;
  (void)argv;
  *result = (dlam_val)ud;
  return DLAM_OK;
}

/* A host function that fails without saying why. */
static dlam_status fail_silently(dlam_vm* vm, int argc, const dlam_val* argv, dlam_val* result,
                                 void* ud) {
  (void)vm;
  (void)argc;
  (void)argv;
  (void)result;
  (void)ud;
  return DLAM_ERR_RUNTIME;
}

/* A host function that calls its argument with a wrong-typed argument, then fails with the
** error of that call (not calling dlam_set_error). */
static dlam_status call_badly(dlam_vm* vm, int argc, const dlam_val* argv, dlam_val* result,
                              void* ud) {
  (void)argc;
  (void)ud;
  dlam_val s = NULL;
  dlam_eval(vm, "\"a string\"", "inner", &s);
  dlam_status st = dlam_call(vm, argv[0], 1, &s, result);
  dlam_release(vm, s);
  return st;
}

int main(void) {
  dlam_vm* vm = dlam_new(NULL);
  dlam_val keep = dlam_number(vm, 42);

  /* ---- bad handles ---- */
  dlam_val released = dlam_number(vm, 1);
  dlam_release(vm, released);
  dlam_vm* other = dlam_new(NULL);
  dlam_val theirs = dlam_get_global(other, "car");
  dlam_vm* freed = dlam_new(NULL);
  dlam_val of_freed = dlam_number(freed, 3);
  dlam_free(freed);
  bad_handle bad[] = {
      {"NULL", NULL, "is NULL"},
      {"released", released, "released handle"},
      {"another VM's", theirs, "not a handle of this VM"},
      {"a freed VM's", of_freed, "not a handle of this VM"},
      {"forged", (dlam_val)(uintptr_t)0x5eed5eed5eedull, "not a handle of this VM"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) check_bad_handle(vm, keep, bad[i]);
  /* the other VM was not disturbed by any of it */
  double d = 0;
  CHECK(eval_number(other, "(* 6 7)") == 42);
  dlam_val pair = NULL;
  CHECK_OK(other, dlam_eval(other, "(cons 5 6)", "p", &pair));
  dlam_val args[1] = {pair};
  dlam_val five = NULL;
  CHECK_OK(other, dlam_call(other, theirs, 1, args, &five));
  CHECK_OK(other, dlam_to_number(other, five, &d));
  CHECK(d == 5);
  dlam_release(other, five);
  dlam_release(other, pair);
  dlam_release(other, theirs);
  dlam_free(other);

  /* ---- handles of the wrong type: runtime errors naming the function, VM usable ---- */
  dlam_val str = NULL, num = NULL, lst = NULL;
  CHECK_OK(vm, dlam_eval(vm, "\"text\"", "s", &str));
  num = dlam_number(vm, 2);
  CHECK_OK(vm, dlam_eval(vm, "(list 1 \"two\" 3)", "l", &lst));
  double xs[2] = {1, 2}, g[2] = {0, 0};
  size_t n = 0;
  CHECK_STATUS(vm, dlam_to_number(vm, str, &d), DLAM_ERR_RUNTIME);
  CHECK_CONTAINS(dlam_last_error(vm), "dlam_to_number: expected a number, got \"text\"");
  check_usable(vm, keep);
  CHECK_STATUS(vm, dlam_to_numbers(vm, str, xs, 2, &n), DLAM_ERR_RUNTIME);
  CHECK_CONTAINS(dlam_last_error(vm), "expected a list of numbers or a vector, got \"text\"");
  check_usable(vm, keep);
  CHECK_STATUS(vm, dlam_to_numbers(vm, lst, xs, 2, &n), DLAM_ERR_RUNTIME);
  CHECK_CONTAINS(dlam_last_error(vm), "element 2 is not a number: \"two\"");
  check_usable(vm, keep);
  CHECK_STATUS(vm, dlam_call(vm, num, 0, NULL, NULL), DLAM_ERR_RUNTIME);
  CHECK_CONTAINS(dlam_last_error(vm), "not a procedure");
  check_usable(vm, keep);
  CHECK_STATUS(vm, dlam_call_numbers(vm, str, 2, xs, &d, NULL), DLAM_ERR_RUNTIME);
  CHECK_CONTAINS(dlam_last_error(vm), "not a procedure");
  check_usable(vm, keep);
  CHECK_STATUS(vm, dlam_value_and_gradient(vm, num, 2, xs, &d, g), DLAM_ERR_RUNTIME);
  CHECK_CONTAINS(dlam_last_error(vm), "dlam_value_and_gradient: expected a procedure, got 2");
  check_usable(vm, keep);
  dlam_val car = dlam_get_global(vm, "car");
  dlam_val cargs[1] = {num};
  CHECK_STATUS(vm, dlam_call(vm, car, 1, cargs, NULL), DLAM_ERR_RUNTIME);
  CHECK_CONTAINS(dlam_last_error(vm), "car: expected pair as argument 1, got 2");
  check_usable(vm, keep);
  /* a procedure of the wrong arity, and a result of the wrong type */
  CHECK_STATUS(vm, dlam_value_and_gradient(vm, car, 2, xs, &d, g), DLAM_ERR_RUNTIME);
  check_usable(vm, keep);
  dlam_val listf = NULL;
  CHECK_OK(vm, dlam_eval(vm, "(lambda (x y) (list x y))", "lf", &listf));
  CHECK_STATUS(vm, dlam_value_and_gradient(vm, listf, 2, xs, &d, g), DLAM_ERR_RUNTIME);
  CHECK_CONTAINS(dlam_last_error(vm), "not a number");
  CHECK(g[0] == 0 && g[1] == 0);
  CHECK_STATUS(vm, dlam_call_numbers(vm, listf, 2, xs, &d, NULL), DLAM_ERR_API);
  CHECK_CONTAINS(dlam_last_error(vm), "the result is not a number and result is NULL");
  check_usable(vm, keep);
  dlam_release(vm, listf);
  dlam_release(vm, car);

  /* ---- host functions that misbehave ---- */
  /* returning a released handle, a handle of another VM, a forged one */
  dlam_vm* other2 = dlam_new(NULL);
  dlam_val theirs2 = dlam_number(other2, 9);
  dlam_val gone = dlam_number(vm, 5);
  dlam_release(vm, gone);
  dlam_val returned[3] = {gone, theirs2, (dlam_val)(uintptr_t)0x5eed5eed5eedull};
  const char* said[3] = {"released handle", "not a handle of this VM", "not a handle of this VM"};
  for (int i = 0; i < 3; ++i) {
    CHECK_OK(vm, dlam_register(vm, "give", 0, return_ud, (void*)returned[i]));
    CHECK_EVAL_ERROR(vm, "(+ 1 (give))", "h.dlam", DLAM_ERR_RUNTIME,
                     "h.dlam:1:6: error: give: the host function returned a handle that");
    CHECK_CONTAINS(dlam_last_error(vm), said[i]);
    check_usable(vm, keep);
  }
  dlam_free(other2);
  /* failing without a message */
  CHECK_OK(vm, dlam_register(vm, "quiet", -1, fail_silently, NULL));
  CHECK_EVAL_ERROR(vm, "(quiet 1)", "q.dlam", DLAM_ERR_RUNTIME,
                   "q.dlam:1:1: error: quiet: host function failed (DLAM_ERR_RUNTIME)");
  check_usable(vm, keep);
  /* failing with the error of a nested call given a wrong type */
  CHECK_OK(vm, dlam_register(vm, "call-badly", 1, call_badly, NULL));
  CHECK_EVAL_ERROR(
      vm, "(call-badly car)", "n.dlam", DLAM_ERR_RUNTIME,
      "n.dlam:1:1: error: call-badly: car: expected pair as argument 1, got \"a string\"");
  check_usable(vm, keep);
  /* registering with bad arguments */
  CHECK_STATUS(vm, dlam_register(vm, NULL, 0, return_ud, NULL), DLAM_ERR_API);
  CHECK_STATUS(vm, dlam_register(vm, "f", 0, NULL, NULL), DLAM_ERR_API);
  CHECK_STATUS(vm, dlam_register(vm, "f", 256, return_ud, NULL), DLAM_ERR_API);
  CHECK_STATUS(vm, dlam_register(vm, "f", -2, return_ud, NULL), DLAM_ERR_API);
  CHECK_STATUS(vm, dlam_register_numeric(vm, "f", -1, NULL, NULL, NULL), DLAM_ERR_API);
  check_usable(vm, keep);

  dlam_release(vm, str);
  dlam_release(vm, num);
  dlam_release(vm, lst);
  dlam_release(vm, keep);
  dlam_free(vm);
  return check_done();
}
