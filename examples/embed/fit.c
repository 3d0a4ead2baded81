/* fit.c — a C host fitting y = a exp(b t) to data it makes, through a host function that
** brings its derivative.
**
** The host registers `growth` (exp, computed in C) with its vector-Jacobian product, hands
** dlam the data as two lists, and minimises the dlam loss (the sum of squared residuals) by
** gradient descent, each gradient taken by dlam_value_and_gradient through the host's
** function. It checks the fit itself (exit status 0 when a and b are found). Run by ctest as
** api.example_fit_c. */
#include <math.h>
#include <stdio.h>

#include "dlam.h"

static double growth(const double* x, void* ud) {
  (void)ud;
  return exp(x[0]);
}

static void growth_vjp(const double* x, double ybar, double* xbar, void* ud) {
  (void)ud;
  xbar[0] = ybar * exp(x[0]);
}

int main(void) {
  enum { N = 20 };
  double ts[N], ys[N];
  for (int i = 0; i < N; ++i) {
    ts[i] = i / (double)N;
    ys[i] = 2.0 * exp(0.5 * ts[i]); /* the data: a = 2, b = 0.5 */
  }
  dlam_vm* vm = dlam_new(NULL);
  if (!vm) return 1;
  dlam_val t = dlam_list_of_numbers(vm, ts, N), y = dlam_list_of_numbers(vm, ys, N);
  dlam_val loss = NULL;
  if (dlam_register_numeric(vm, "growth", 1, growth, growth_vjp, NULL) != DLAM_OK ||
      dlam_set_global(vm, "ts", t) != DLAM_OK || dlam_set_global(vm, "ys", y) != DLAM_OK ||
      dlam_eval(vm,
                "(define (loss a b)\n"
                "  (let loop ((ts ts) (ys ys) (acc 0))\n"
                "    (if (null? ts) acc\n"
                "        (let ((r (- (* a (growth (* b (car ts)))) (car ys))))\n"
                "          (loop (cdr ts) (cdr ys) (+ acc (* r r)))))))\n",
                "fit", NULL) != DLAM_OK ||
      !(loss = dlam_get_global(vm, "loss"))) {
    fprintf(stderr, "%s\n", dlam_last_error(vm));
    return 1;
  }
  double p[2] = {1, 0}, value = 0, g[2];
  for (int step = 0; step < 5000; ++step) {
    if (dlam_value_and_gradient(vm, loss, 2, p, &value, g) != DLAM_OK) {
      fprintf(stderr, "%s\n", dlam_last_error(vm));
      return 1;
    }
    p[0] -= 0.01 * g[0];
    p[1] -= 0.01 * g[1];
  }
  printf("a = %.4f, b = %.4f, loss = %.2e\n", p[0], p[1], value);
  dlam_release(vm, t);
  dlam_release(vm, y);
  dlam_release(vm, loss);
  dlam_free(vm);
  return fabs(p[0] - 2) < 1e-3 && fabs(p[1] - 0.5) < 1e-3 ? 0 : 1;
}
