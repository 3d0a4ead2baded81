/* arrays.c — arrays through the C API: dlam_array_of_numbers, dlam_array_data (zero
** copy), dlam_value_and_gradient_array, the misuse errors, and a 10^6-element array
** past the heap limit (the limit's error, after which the VM goes on). */
#include "check.h"

int main(void) {
  dlam_vm *vm = dlam_new(NULL);
  CHECK(vm != NULL);

  /* a 2x3 matrix in, its sum and its shape out */
  double m[6] = {1, 2, 3, 4, 5, 6};
  size_t shape[2] = {2, 3};
  dlam_val a = dlam_array_of_numbers(vm, m, 2, shape);
  CHECK(a != NULL);
  CHECK_STATUS(vm, dlam_eval(vm, "(define (row-sums a) (sum a 1))", "t", NULL), DLAM_OK);
  dlam_val rs = dlam_get_global(vm, "row-sums"), r = NULL;
  CHECK_STATUS(vm, dlam_call(vm, rs, 1, &a, &r), DLAM_OK);
  const double *data = NULL;
  const size_t *sz = NULL;
  size_t rank = 0;
  CHECK_STATUS(vm, dlam_array_data(vm, r, &data, &rank, &sz), DLAM_OK);
  CHECK(rank == 1 && sz[0] == 2 && data[0] == 6 && data[1] == 15);
  /* the data of a is its own storage: read twice, the same pointer */
  const double *d1 = NULL, *d2 = NULL;
  CHECK_STATUS(vm, dlam_array_data(vm, a, &d1, &rank, &sz), DLAM_OK);
  CHECK(rank == 2 && sz[0] == 2 && sz[1] == 3 && d1[5] == 6);
  CHECK_STATUS(vm, dlam_array_data(vm, a, &d2, &rank, &sz), DLAM_OK);
  CHECK(d1 == d2);

  /* value and gradient of f(W) = sum(tanh(W x)) for x = (1 -1 2): dW_ij = (1 - y_i^2) x_j */
  CHECK_STATUS(vm, dlam_eval(vm, "(define (f w) (sum (tanh (dot w #(1 -1 2)))))", "t", NULL),
               DLAM_OK);
  dlam_val f = dlam_get_global(vm, "f");
  double w[6] = {0.1, 0.2, 0.3, -0.4, 0.5, 0.6}, value = 0, g[6] = {0};
  CHECK_STATUS(vm, dlam_value_and_gradient_array(vm, f, w, 2, shape, &value, g), DLAM_OK);
  double x[3] = {1, -1, 2}, want = 0;
  for (int i = 0; i < 2; ++i) {
    double s = 0;
    for (int j = 0; j < 3; ++j) s += w[3 * i + j] * x[j];
    double y = tanh(s);
    want += y;
    for (int j = 0; j < 3; ++j) CHECK(fabs(g[3 * i + j] - (1 - y * y) * x[j]) < 1e-12);
  }
  CHECK(fabs(value - want) < 1e-12);
  /* a function that ignores its argument: a zero gradient */
  CHECK_STATUS(vm, dlam_eval(vm, "(define (k w) 3)", "t", NULL), DLAM_OK);
  dlam_val k = dlam_get_global(vm, "k");
  g[0] = 7;
  CHECK_STATUS(vm, dlam_value_and_gradient_array(vm, k, w, 2, shape, &value, g), DLAM_OK);
  CHECK(value == 3 && g[0] == 0 && g[5] == 0);

  /* misuse */
  CHECK(dlam_array_of_numbers(vm, m, 0, shape) == NULL);
  CHECK(strstr(dlam_last_error(vm), "rank must be at least 1") != NULL);
  dlam_val num = dlam_number(vm, 2);
  CHECK_STATUS(vm, dlam_array_data(vm, num, &data, &rank, &sz), DLAM_ERR_RUNTIME);
  CHECK(strstr(dlam_last_error(vm), "expected an array") != NULL);

  /* 10^6-element arrays past a 32 MB heap: the limit's error, then the VM goes on */
  dlam_config cfg;
  dlam_config_init(&cfg);
  cfg.heap_limit_mb = 32;
  dlam_vm *small = dlam_new_with(&cfg);
  CHECK(small != NULL);
  CHECK_STATUS(small,
               dlam_eval(small, "(let loop ((l '())) (loop (cons (make-array '(1000 1000) 1) l)))",
                         "t", NULL),
               DLAM_ERR_LIMIT);
  CHECK(strstr(dlam_last_error(small), "heap limit exceeded") != NULL);
  dlam_val one = NULL;
  CHECK_STATUS(small, dlam_eval(small, "(sum (make-array '(1000 1000) 1))", "t", &one), DLAM_OK);
  double total = 0;
  CHECK_STATUS(small, dlam_to_number(small, one, &total), DLAM_OK);
  CHECK(total == 1e6);
  dlam_free(small);

  dlam_release(vm, a);
  dlam_release(vm, r);
  dlam_free(vm);
  return check_done();
}
