/* values.c — what a value is and how it prints, for hosts converting values of any type:
** dlam_type_of, dlam_to_string, dlam_boolean, and dlam_call_numbers. */
#include "check.h"

static int type_of(dlam_vm* vm, const char* source) {
  dlam_val v = NULL;
  CHECK_OK(vm, dlam_eval(vm, source, "t", &v));
  int t = dlam_type_of(vm, v);
  dlam_release(vm, v);
  return t;
}

/* source's value printed (display or write) must be expect. */
static void check_string(dlam_vm* vm, const char* source, int display, const char* expect) {
  dlam_val v = NULL;
  char buf[64];
  size_t len = 0;
  CHECK_OK(vm, dlam_eval(vm, source, "t", &v));
  CHECK_STATUS(vm, dlam_to_string(vm, v, display, NULL, 0, &len), DLAM_ERR_API);
  CHECK(len == strlen(expect));
  CHECK_STATUS(vm, dlam_to_string(vm, v, display, buf, len, NULL), DLAM_ERR_API);
  CHECK_CONTAINS(dlam_last_error(vm), "more than the capacity");
  CHECK_OK(vm, dlam_to_string(vm, v, display, buf, sizeof buf, &len));
  CHECK(strcmp(buf, expect) == 0 && len == strlen(expect));
  dlam_release(vm, v);
}

int main(void) {
  dlam_vm* vm = dlam_new(NULL);
  CHECK(type_of(vm, "1.5") == DLAM_TYPE_NUMBER);
  CHECK(type_of(vm, "#f") == DLAM_TYPE_BOOLEAN);
  CHECK(type_of(vm, "'()") == DLAM_TYPE_NULL);
  CHECK(type_of(vm, "(list 1 2)") == DLAM_TYPE_PAIR);
  CHECK(type_of(vm, "(vector 1 2)") == DLAM_TYPE_VECTOR);
  CHECK(type_of(vm, "\"s\"") == DLAM_TYPE_STRING);
  CHECK(type_of(vm, "'s") == DLAM_TYPE_SYMBOL);
  CHECK(type_of(vm, "car") == DLAM_TYPE_PROCEDURE);
  CHECK(type_of(vm, "(lambda (x) x)") == DLAM_TYPE_PROCEDURE);
  CHECK(type_of(vm, "(custom-vjp (lambda (x) x) (lambda (x) (cons x (lambda (g) g))))") ==
        DLAM_TYPE_PROCEDURE);
  CHECK(type_of(vm, "(define z 1)") == DLAM_TYPE_VOID);
  /* a gradient of several arguments is a list */
  CHECK(type_of(vm, "((gradient (lambda (x y) x)) 1 2)") == DLAM_TYPE_PAIR);

  check_string(vm, "\"a\\\"b\"", 1, "a\"b");
  check_string(vm, "\"a\\\"b\"", 0, "\"a\\\"b\"");
  check_string(vm, "(list 1 2.5 'x \"s\")", 0, "(1 2.5 x \"s\")");
  check_string(vm, "(vector 1 2)", 0, "#(1 2)");

  dlam_val t = dlam_boolean(vm, 7), f = dlam_boolean(vm, 0), not_fn = dlam_get_global(vm, "not");
  dlam_val r = NULL;
  CHECK(dlam_type_of(vm, t) == DLAM_TYPE_BOOLEAN);
  CHECK_OK(vm, dlam_call(vm, not_fn, 1, &f, &r));
  char buf[8];
  CHECK_OK(vm, dlam_to_string(vm, r, 0, buf, sizeof buf, NULL));
  CHECK(strcmp(buf, "#t") == 0);
  dlam_release(vm, r);
  CHECK_OK(vm, dlam_call(vm, not_fn, 1, &t, &r));
  CHECK_OK(vm, dlam_to_string(vm, r, 0, buf, sizeof buf, NULL));
  CHECK(strcmp(buf, "#f") == 0);
  dlam_release(vm, r);
  dlam_release(vm, t);
  dlam_release(vm, f);
  dlam_release(vm, not_fn);

  /* dlam_call_numbers: a number back in *out; anything else as a handle */
  {
    dlam_val fn = NULL, res = (dlam_val)1;
    double x[2] = {3, 4}, out = -1;
    CHECK_OK(vm, dlam_eval(vm, "(lambda (x y) (if (> x y) 'bigger (sqrt (+ (* x x) (* y y)))))",
                           "cn.dlam", &fn));
    CHECK_OK(vm, dlam_call_numbers(vm, fn, 2, x, &out, &res));
    CHECK(out == 5 && res == NULL);
    x[0] = 9;
    CHECK_OK(vm, dlam_call_numbers(vm, fn, 2, x, &out, &res));
    CHECK(res != NULL && dlam_type_of(vm, res) == DLAM_TYPE_SYMBOL);
    dlam_release(vm, res);
    CHECK_STATUS(vm, dlam_call_numbers(vm, fn, 2, x, &out, NULL), DLAM_ERR_API);
    CHECK_CONTAINS(dlam_last_error(vm), "the result is not a number and result is NULL");
    CHECK_STATUS(vm, dlam_call_numbers(vm, fn, 1, x, &out, &res), DLAM_ERR_RUNTIME);
    CHECK_CONTAINS(dlam_last_error(vm), "expected 2 arguments, got 1");
    CHECK_STATUS(vm, dlam_call_numbers(vm, fn, 2, NULL, &out, &res), DLAM_ERR_API);
    CHECK_STATUS(vm, dlam_call_numbers(vm, fn, 2, x, NULL, &res), DLAM_ERR_API);
    CHECK_STATUS(vm, dlam_call_numbers(vm, NULL, 2, x, &out, &res), DLAM_ERR_API);
    CHECK_STATUS(NULL, dlam_call_numbers(NULL, fn, 2, x, &out, &res), DLAM_ERR_API);
    dlam_release(vm, fn);
    CHECK_STATUS(vm, dlam_call_numbers(vm, fn, 2, x, &out, &res), DLAM_ERR_API);
    CHECK_CONTAINS(dlam_last_error(vm), "released handle");
    CHECK(eval_number(vm, "(+ 1 2)") == 3);
  }
  dlam_free(vm);
  return check_done();
}
