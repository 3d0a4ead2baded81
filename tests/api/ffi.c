/* ffi.c — foreign-function through libffi: off by default in an embedded VM, on with a
** config (with a library allow-list), argument and result types, errors, and
** derivatives (an error naming the function unless it gets one with custom-vjp). */
#include "check.h"

static const char* kErf = "(define erf (foreign-function \"libm.so.6\" \"erf\" '(double) 'double))";

static void test_disabled(void) {
  dlam_vm* vm = dlam_new(NULL);
  CHECK_EVAL_ERROR(vm, kErf, "ffi.dlam", DLAM_ERR_RUNTIME, "ffi.dlam:1:");
  CHECK_CONTAINS(dlam_last_error(vm), "foreign-function: foreign calls are disabled");
  dlam_free(vm);

  char path[256];
  write_temp_file(path, sizeof path, ".lua", "ffi = { enabled = false }\n");
  vm = dlam_new(path);
  unlink(path);
  CHECK_EVAL_ERROR(vm, kErf, "ffi.dlam", DLAM_ERR_RUNTIME, "foreign calls are disabled");
  dlam_free(vm);
}

static void test_enabled(void) {
  char path[256];
  write_temp_file(path, sizeof path, ".lua",
                  "ffi = { enabled = true, libraries = { \"libm.so.6\", \"libc.so.6\" } }\n");
  dlam_vm* vm = dlam_new(path);
  unlink(path);
  CHECK(strcmp(dlam_last_error(vm), "") == 0);

  CHECK_OK(vm, dlam_eval(vm, kErf, "ffi", NULL));
  CHECK_NEAR(eval_number(vm, "(erf 0.5)"), erf(0.5), 0);
  CHECK(eval_number(vm, "(if (procedure? erf) 1 0)") == 1);
  CHECK_NEAR(eval_number(vm, "(fold-left + 0 (map erf '(0.1 0.2)))"), erf(0.1) + erf(0.2), 1e-15);
  dlam_val e = dlam_get_global(vm, "erf"), r = NULL, x = dlam_number(vm, -1.5);
  double d = 0;
  CHECK_OK(vm, dlam_call(vm, e, 1, &x, &r));
  CHECK_OK(vm, dlam_to_number(vm, r, &d));
  CHECK(d == erf(-1.5));
  dlam_release(vm, r);
  dlam_release(vm, x);

  /* types */
  CHECK_NEAR(
      eval_number(vm, "((foreign-function \"libm.so.6\" \"atan2\" '(double double) 'double) 1 2)"),
      atan2(1, 2), 0);
  CHECK_NEAR(eval_number(vm, "((foreign-function \"libm.so.6\" \"sinf\" '(float) 'float) 0.5)"),
             (double)sinf(0.5f), 0);
  CHECK(eval_number(vm, "((foreign-function \"libc.so.6\" \"abs\" '(int32) 'int32) -5)") == 5);
  CHECK(eval_number(
            vm, "((foreign-function \"libc.so.6\" \"labs\" '(int64) 'int64) -5000000000)") == 5e9);
  CHECK(eval_number(
            vm, "((foreign-function \"libm.so.6\" \"ldexp\" '(double int32) 'double) 3 4)") == 48);
  CHECK_OK(vm, dlam_eval(vm,
                         "(define srand (foreign-function \"libc.so.6\" \"srand\" '(int32) 'void))"
                         "(define rand (foreign-function \"libc.so.6\" \"rand\" '() 'int32))",
                         "ffi", NULL));
  CHECK(eval_number(vm, "(if (eq? (srand 7) (if #f #f)) 1 0)") == 1);
  CHECK(eval_number(vm, "(let ((r (rand))) (if (>= r 0) 1 0))") == 1);
  CHECK(
      eval_number(
          vm, "(if (nan? ((foreign-function \"libm.so.6\" \"sqrt\" '(double) 'double) -1)) 1 0)") ==
      1);

  /* errors in the call */
  CHECK_EVAL_ERROR(vm, "(erf 1 2)", "arity", DLAM_ERR_RUNTIME,
                   "erf: wrong number of arguments (2)");
  CHECK_EVAL_ERROR(vm, "(erf \"x\")", "type", DLAM_ERR_RUNTIME,
                   "erf: expected number as argument 1");
  CHECK_EVAL_ERROR(vm, "((foreign-function \"libc.so.6\" \"abs\" '(int32) 'int32) 1.5)", "int",
                   DLAM_ERR_RUNTIME, "abs: expected an integer in the int32 range");
  CHECK_STATUS(
      vm,
      dlam_eval(vm, "((foreign-function \"libc.so.6\" \"abs\" '(int32) 'int32) 1e10)", "int", NULL),
      DLAM_ERR_RUNTIME);

  /* errors in the declaration */
  CHECK_EVAL_ERROR(vm, "(foreign-function \"libz.so.1\" \"crc32\" '(int64) 'int64)", "allow",
                   DLAM_ERR_RUNTIME,
                   "foreign-function: library libz.so.1 is not in the allow-list");
  CHECK_EVAL_ERROR(vm, "(foreign-function \"libm.so.6\" \"no_such_fn\" '() 'double)", "sym",
                   DLAM_ERR_RUNTIME, "symbol no_such_fn not found in libm.so.6");
  CHECK_EVAL_ERROR(vm, "(foreign-function \"libm.so.6\" \"erf\" '(complex) 'double)", "type",
                   DLAM_ERR_RUNTIME, "unknown type 'complex'");
  CHECK_EVAL_ERROR(vm, "(foreign-function \"libm.so.6\" \"erf\" '(void) 'double)", "void",
                   DLAM_ERR_RUNTIME, "void is only allowed as the result type");
  CHECK_STATUS(
      vm, dlam_eval(vm, "(foreign-function \"libm.so.6\" \"erf\" 'double 'double)", "list", NULL),
      DLAM_ERR_RUNTIME);
  CHECK_EVAL_ERROR(vm, "(foreign-function 'libm \"erf\" '(double) 'double)", "lib",
                   DLAM_ERR_RUNTIME, "foreign-function: expected string as argument 1");

  /* derivatives: an error naming the function, unless it has a custom derivative */
  CHECK_EVAL_ERROR(vm, "((gradient (lambda (x) (* 2 (erf x)))) 0.5)", "grad", DLAM_ERR_RUNTIME,
                   "erf");
  CHECK_CONTAINS(dlam_last_error(vm), "custom-vjp");
  double x0 = 0.5, value = 0, g = 0;
  CHECK_STATUS(vm, dlam_value_and_gradient(vm, e, 1, &x0, &value, &g), DLAM_ERR_RUNTIME);
  CHECK_CONTAINS(dlam_last_error(vm), "erf");
  dlam_release(vm, e);
  CHECK_OK(vm, dlam_eval(vm,
                         "(define erf* (custom-vjp erf (lambda (x) (cons (erf x) (lambda (g) "
                         "(* g (/ 2 (sqrt 3.141592653589793)) (exp (- (* x x)))))))))",
                         "erf*", NULL));
  double slope = 2 / sqrt(3.141592653589793) * exp(-0.25);
  CHECK_NEAR(eval_number(vm, "((gradient (lambda (x) (* 2 (erf* x)))) 0.5)"), 2 * slope, 1e-15);
  dlam_val es = dlam_get_global(vm, "erf*");
  CHECK_OK(vm, dlam_value_and_gradient(vm, es, 1, &x0, &value, &g));
  CHECK(value == erf(0.5));
  CHECK_NEAR(g, slope, 1e-15);
  dlam_release(vm, es);
  dlam_free(vm);

  /* libraries = nil: any library */
  write_temp_file(path, sizeof path, ".lua", "ffi = { enabled = true }\n");
  vm = dlam_new(path);
  unlink(path);
  CHECK_NEAR(eval_number(vm, "((foreign-function \"libm.so.6\" \"cbrt\" '(double) 'double) 27)"), 3,
             1e-15);
  CHECK_EVAL_ERROR(vm, "(foreign-function \"libdoesnotexist.so\" \"f\" '() 'void)", "lib",
                   DLAM_ERR_RUNTIME, "cannot load library libdoesnotexist.so");
  dlam_free(vm);
}

int main(void) {
  test_disabled();
  test_enabled();
  return check_done();
}
