/* errors.c — error paths: syntax and runtime errors (messages, locations, traces), the VM
** staying usable, NULL VMs, NULL / released / foreign handles, bad configurations. */
#include "check.h"

static void test_syntax_error(dlam_vm* vm) {
  dlam_val r = (dlam_val)1;
  CHECK_STATUS(vm, dlam_eval(vm, "(define x 1)\n(+ 1 (* 2 3)", "broken.dlam", &r), DLAM_ERR_SYNTAX);
  CHECK(r == NULL);
  CHECK_CONTAINS(dlam_last_error(vm), "broken.dlam:2:");
  CHECK_CONTAINS(dlam_last_error(vm), ": error: ");
  /* the VM is still usable */
  CHECK(eval_number(vm, "(+ 40 2)") == 42);
  CHECK_EVAL_ERROR(vm, ")", "paren", DLAM_ERR_SYNTAX, "paren:1:1: error:");
  CHECK_EVAL_ERROR(vm, "(lambda)", "bad-lambda", DLAM_ERR_SYNTAX, "bad-lambda:1:");
}

static void test_runtime_error(dlam_vm* vm) {
  const char* src =
      "(define (inner x) (car x))\n"
      "(define (outer x) (+ 1 (inner x)))\n"
      "(outer 5)\n";
  CHECK_STATUS(vm, dlam_eval(vm, src, "rt.dlam", NULL), DLAM_ERR_RUNTIME);
  const char* e = dlam_last_error(vm);
  CHECK_CONTAINS(e, "rt.dlam:1:");
  CHECK_CONTAINS(e, "error: car: expected pair");
  CHECK_CONTAINS(e, "\n  at inner (rt.dlam:1:");
  CHECK_CONTAINS(e, "\n  at outer (rt.dlam:2:");
  /* the VM keeps working, definitions made before the error included */
  CHECK(eval_number(vm, "(outer '(41))") == 42);

  CHECK_EVAL_ERROR(vm, "(error \"boom\" 1 2)", "err", DLAM_ERR_RUNTIME, "boom");
  CHECK_EVAL_ERROR(vm, "undefined-thing", "undef", DLAM_ERR_RUNTIME,
                   "undefined variable 'undefined-thing'");
  CHECK(eval_number(vm, "(+ 1 2)") == 3);

  /* a successful call clears the error */
  CHECK(strcmp(dlam_last_error(vm), "") == 0);

  /* errors through dlam_call: not a procedure, arity, an error inside */
  dlam_val three = dlam_number(vm, 3);
  dlam_val r = (dlam_val)1;
  CHECK_STATUS(vm, dlam_call(vm, three, 1, &three, &r), DLAM_ERR_RUNTIME);
  CHECK(r == NULL);
  CHECK_CONTAINS(dlam_last_error(vm), "not a procedure");
  dlam_val outer = dlam_get_global(vm, "outer");
  CHECK_STATUS(vm, dlam_call(vm, outer, 0, NULL, &r), DLAM_ERR_RUNTIME);
  CHECK_CONTAINS(dlam_last_error(vm), "outer: expected 1 argument, got 0");
  CHECK_STATUS(vm, dlam_call(vm, outer, 1, &three, &r), DLAM_ERR_RUNTIME);
  CHECK_CONTAINS(dlam_last_error(vm), "car: expected pair");
  CHECK_CONTAINS(dlam_last_error(vm), "at inner");
  dlam_val car = dlam_get_global(vm, "car");
  CHECK_STATUS(vm, dlam_call(vm, car, 2, (dlam_val[]){three, three}, &r), DLAM_ERR_RUNTIME);
  CHECK_CONTAINS(dlam_last_error(vm), "wrong number of arguments");
  dlam_release(vm, car);
  double d = 0;
  CHECK_OK(vm,
           dlam_call(vm, outer, 1, &(dlam_val){dlam_list_of_numbers(vm, (double[]){9}, 1)}, &r));
  CHECK_OK(vm, dlam_to_number(vm, r, &d));
  CHECK(d == 10);
  dlam_release(vm, r);
  dlam_release(vm, outer);
  dlam_release(vm, three);

  /* a missing file */
  CHECK_STATUS(vm, dlam_run_file(vm, "/nonexistent/file.dlam", &r), DLAM_ERR_SYNTAX);
  CHECK(r == NULL);
  CHECK_CONTAINS(dlam_last_error(vm), "cannot open '/nonexistent/file.dlam'");
}

static void test_null_vm(void) {
  dlam_val r = (dlam_val)1;
  double d;
  size_t n;
  CHECK(dlam_eval(NULL, "1", "x", &r) == DLAM_ERR_API);
  CHECK(r == NULL);
  CHECK(dlam_run_file(NULL, "x", NULL) == DLAM_ERR_API);
  CHECK(dlam_get_global(NULL, "car") == NULL);
  CHECK(dlam_set_global(NULL, "x", NULL) == DLAM_ERR_API);
  CHECK(dlam_call(NULL, NULL, 0, NULL, NULL) == DLAM_ERR_API);
  CHECK(dlam_number(NULL, 1) == NULL);
  CHECK(dlam_list_of_numbers(NULL, NULL, 0) == NULL);
  CHECK(dlam_to_number(NULL, NULL, &d) == DLAM_ERR_API);
  CHECK(dlam_to_numbers(NULL, NULL, NULL, 0, &n) == DLAM_ERR_API);
  CHECK(dlam_value_and_gradient(NULL, NULL, 0, NULL, &d, NULL) == DLAM_ERR_API);
  CHECK(dlam_register(NULL, "f", 0, NULL, NULL) == DLAM_ERR_API);
  CHECK(dlam_register_numeric(NULL, "f", 0, NULL, NULL, NULL) == DLAM_ERR_API);
  CHECK(dlam_dup(NULL, NULL) == NULL);
  CHECK(dlam_boolean(NULL, 1) == NULL);
  CHECK(dlam_type_of(NULL, NULL) == -1);
  CHECK(dlam_to_string(NULL, NULL, 0, NULL, 0, &n) == DLAM_ERR_API);
  CHECK(dlam_vector_of_numbers(NULL, NULL, 0) == NULL);
  dlam_release(NULL, (dlam_val)1);
  dlam_set_error(NULL, "x");
  dlam_interrupt(NULL);
  dlam_free(NULL);
  CHECK(dlam_last_error(NULL) != NULL);
  CHECK_CONTAINS(dlam_last_error(NULL), "NULL");
}

static void test_bad_handles(dlam_vm* vm) {
  double d = 0;
  /* NULL handles and NULL arguments */
  CHECK_STATUS(vm, dlam_to_number(vm, NULL, &d), DLAM_ERR_API);
  CHECK_CONTAINS(dlam_last_error(vm), "dlam_to_number: the value is NULL");
  dlam_val n = dlam_number(vm, 1);
  CHECK_STATUS(vm, dlam_to_number(vm, n, NULL), DLAM_ERR_API);
  CHECK_STATUS(vm, dlam_call(vm, NULL, 0, NULL, NULL), DLAM_ERR_API);
  CHECK_STATUS(vm, dlam_call(vm, n, 1, NULL, NULL), DLAM_ERR_API);
  CHECK_STATUS(vm, dlam_call(vm, n, -1, NULL, NULL), DLAM_ERR_API);
  CHECK_STATUS(vm, dlam_eval(vm, NULL, "x", NULL), DLAM_ERR_API);
  CHECK_STATUS(vm, dlam_run_file(vm, NULL, NULL), DLAM_ERR_API);
  CHECK_STATUS(vm, dlam_set_global(vm, NULL, n), DLAM_ERR_API);
  CHECK(dlam_get_global(vm, NULL) == NULL);
  CHECK_CONTAINS(dlam_last_error(vm), "name is NULL");
  CHECK(dlam_list_of_numbers(vm, NULL, 3) == NULL);
  CHECK_CONTAINS(dlam_last_error(vm), "xs is NULL");
  CHECK(dlam_type_of(vm, NULL) == -1);
  CHECK_CONTAINS(dlam_last_error(vm), "dlam_type_of: the value is NULL");
  CHECK_STATUS(vm, dlam_to_string(vm, NULL, 0, NULL, 0, NULL), DLAM_ERR_API);
  CHECK_CONTAINS(dlam_last_error(vm), "dlam_to_string: the value is NULL");
  CHECK_STATUS(vm, dlam_to_string(vm, n, 0, NULL, 4, NULL), DLAM_ERR_API);
  CHECK_CONTAINS(dlam_last_error(vm), "dlam_to_string: buf is NULL");

  /* a released handle */
  dlam_release(vm, n);
  CHECK_STATUS(vm, dlam_to_number(vm, n, &d), DLAM_ERR_API);
  CHECK_CONTAINS(dlam_last_error(vm), "released handle");
  CHECK_STATUS(vm, dlam_set_global(vm, "x", n), DLAM_ERR_API);
  CHECK_STATUS(vm, dlam_call(vm, n, 0, NULL, NULL), DLAM_ERR_API);
  CHECK(dlam_dup(vm, n) == NULL);
  CHECK(dlam_type_of(vm, n) == -1);
  CHECK_CONTAINS(dlam_last_error(vm), "released handle");
  CHECK_STATUS(vm, dlam_to_string(vm, n, 1, NULL, 0, NULL), DLAM_ERR_API);
  CHECK_CONTAINS(dlam_last_error(vm), "released handle");
  dlam_release(vm, n); /* double release: reported, harmless */
  CHECK_CONTAINS(dlam_last_error(vm), "dlam_release: the handle is a released handle");
  /* ... also after its slot was reused by a new handle */
  dlam_val m = dlam_number(vm, 2);
  CHECK_STATUS(vm, dlam_to_number(vm, n, &d), DLAM_ERR_API);
  CHECK_OK(vm, dlam_to_number(vm, m, &d));
  CHECK(d == 2);
  /* a released handle among the arguments of a call */
  dlam_val plus = dlam_get_global(vm, "+");
  dlam_val args[2] = {m, n};
  CHECK_STATUS(vm, dlam_call(vm, plus, 2, args, NULL), DLAM_ERR_API);
  CHECK_CONTAINS(dlam_last_error(vm), "dlam_call: argument 2 is a released handle");
  dlam_release(vm, plus);
  dlam_release(vm, m);

  /* a handle of another VM */
  dlam_vm* other = dlam_new(NULL);
  dlam_val theirs = dlam_number(other, 5);
  CHECK_STATUS(vm, dlam_to_number(vm, theirs, &d), DLAM_ERR_API);
  CHECK_CONTAINS(dlam_last_error(vm), "not a handle of this VM");
  CHECK_STATUS(vm, dlam_set_global(vm, "x", theirs), DLAM_ERR_API);
  CHECK(dlam_type_of(vm, theirs) == -1);
  CHECK_CONTAINS(dlam_last_error(vm), "not a handle of this VM");
  CHECK_STATUS(vm, dlam_to_string(vm, theirs, 1, NULL, 0, NULL), DLAM_ERR_API);
  CHECK_CONTAINS(dlam_last_error(vm), "not a handle of this VM");
  CHECK_STATUS(vm, dlam_value_and_gradient(vm, theirs, 0, NULL, NULL, NULL), DLAM_ERR_API);
  CHECK_CONTAINS(dlam_last_error(vm), "not a handle of this VM");
  dlam_release(vm, theirs); /* not released in `other` */
  CHECK_OK(other, dlam_to_number(other, theirs, &d));
  CHECK(d == 5);
  dlam_release(other, theirs);
  /* garbage that is not a handle at all */
  CHECK_STATUS(vm, dlam_to_number(vm, (dlam_val)0x1234, &d), DLAM_ERR_API);
  dlam_free(other);

  /* the VM is fine after all that */
  CHECK(eval_number(vm, "(* 6 7)") == 42);
}

static void test_bad_config(void) {
  char path[256];
  write_temp_file(path, sizeof path, ".lua", "heap_limit_mb = 64\nbogus_key = 1\n");
  dlam_vm* vm = dlam_new(path);
  CHECK(vm != NULL);
  CHECK_CONTAINS(dlam_last_error(vm), path);
  CHECK_CONTAINS(dlam_last_error(vm), ":2");
  CHECK_CONTAINS(dlam_last_error(vm), "bogus_key");
  /* the VM refuses to run anything, every time, with the configuration error */
  dlam_val r = (dlam_val)1;
  CHECK_STATUS(vm, dlam_eval(vm, "1", "x", &r), DLAM_ERR_CONFIG);
  CHECK(r == NULL);
  CHECK_CONTAINS(dlam_last_error(vm), "bogus_key");
  CHECK(dlam_number(vm, 1) == NULL);
  CHECK_CONTAINS(dlam_last_error(vm), "bogus_key");
  CHECK(dlam_get_global(vm, "car") == NULL);
  CHECK_STATUS(vm, dlam_register_numeric(vm, "f", 1, NULL, NULL, NULL), DLAM_ERR_CONFIG);
  dlam_interrupt(vm);
  dlam_free(vm);
  unlink(path);

  write_temp_file(path, sizeof path, ".lua", "stack_limit = 'many'\n");
  vm = dlam_new(path);
  CHECK_EVAL_ERROR(vm, "1", "x", DLAM_ERR_CONFIG, "stack_limit");
  dlam_free(vm);
  unlink(path);

  write_temp_file(path, sizeof path, ".lua", "x = = 1\n");
  vm = dlam_new(path);
  CHECK_STATUS(vm, dlam_eval(vm, "1", "x", NULL), DLAM_ERR_CONFIG);
  dlam_free(vm);
  unlink(path);

  vm = dlam_new("/nonexistent/config.lua");
  CHECK(vm != NULL);
  CHECK_EVAL_ERROR(vm, "1", "x", DLAM_ERR_CONFIG, "/nonexistent/config.lua");
  dlam_free(vm);

  /* a valid config */
  write_temp_file(path, sizeof path, ".lua", "heap_limit_mb = 256\nstack_limit = 5000\n");
  vm = dlam_new(path);
  CHECK(strcmp(dlam_last_error(vm), "") == 0);
  CHECK(eval_number(vm, "(+ 1 2)") == 3);
  dlam_free(vm);
  unlink(path);
}

int main(void) {
  dlam_vm* vm = dlam_new(NULL);
  test_syntax_error(vm);
  test_runtime_error(vm);
  test_null_vm();
  test_bad_handles(vm);
  test_bad_config();
  dlam_free(vm);
  return check_done();
}
