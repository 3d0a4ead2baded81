/* physics.c — a C host whose physics step is differentiated by dlam.
**
** The host registers velocity-step (one explicit Euler step of a ball falling with
** linear drag) together with its vector-Jacobian product, runs physics.dlam, and
** asks the script to fit the drag coefficient to a fall distance that the host
** "measured" with its own simulation (true c = 0.5). It then checks the fit, and a
** gradient taken from C with dlam_value_and_gradient against finite differences.
**
**   usage: physics [physics.dlam]
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "dlam.h"

#ifndef PHYSICS_SCRIPT
#define PHYSICS_SCRIPT "physics.dlam"
#endif

typedef struct {
  double gravity;
  long calls, vjp_calls;
} World;

/* v' = v + dt (g - c v) */
static double velocity_step(const double* x, void* ud) {
  World* w = ud;
  double v = x[0], c = x[1], dt = x[2];
  w->calls++;
  return v + dt * (w->gravity - c * v);
}

/* the partial derivatives of v' times ybar */
static void velocity_step_vjp(const double* x, double ybar, double* xbar, void* ud) {
  World* w = ud;
  double v = x[0], c = x[1], dt = x[2];
  w->vjp_calls++;
  xbar[0] = ybar * (1 - dt * c);
  xbar[1] = ybar * (-dt * v);
  xbar[2] = ybar * (w->gravity - c * v);
}

/* The host's own simulation: the "measurement". */
static double simulate(const World* w, double c) {
  double x = 0, v = 0;
  for (int i = 0; i < 200; ++i) {
    v = v + 0.01 * (w->gravity - c * v);
    x = x + 0.01 * v;
  }
  return x;
}

static int fail(dlam_vm* vm, const char* what) {
  fprintf(stderr, "physics: %s: %s\n", what, dlam_last_error(vm));
  dlam_free(vm);
  return 1;
}

int main(int argc, char** argv) {
  const char* script = argc > 1 ? argv[1] : PHYSICS_SCRIPT;
  World world = {9.81, 0, 0};
  const double true_c = 0.5;

  dlam_vm* vm = dlam_new(NULL);
  if (!vm) return 1;
  if (dlam_register_numeric(vm, "velocity-step", 3, velocity_step, velocity_step_vjp, &world) !=
      DLAM_OK)
    return fail(vm, "register");
  dlam_val target = dlam_number(vm, simulate(&world, true_c));
  if (dlam_set_global(vm, "target", target) != DLAM_OK) return fail(vm, "set target");
  dlam_release(vm, target);
  if (dlam_run_file(vm, script, NULL) != DLAM_OK) return fail(vm, "script");

  /* (fit 0.1 100 0.01) */
  dlam_val fit = dlam_get_global(vm, "fit");
  dlam_val args[3] = {dlam_number(vm, 0.1), dlam_number(vm, 100), dlam_number(vm, 0.01)};
  dlam_val result = NULL;
  if (dlam_call(vm, fit, 3, args, &result) != DLAM_OK) return fail(vm, "fit");
  double c = 0;
  if (dlam_to_number(vm, result, &c) != DLAM_OK) return fail(vm, "fit result");
  printf("fitted drag c = %.6f (true %.1f) after %ld steps and %ld vjp calls\n", c, true_c,
         world.calls, world.vjp_calls);
  for (int i = 0; i < 3; ++i) dlam_release(vm, args[i]);
  dlam_release(vm, result);
  dlam_release(vm, fit);

  /* The loss gradient from C, against central differences. */
  dlam_val loss = dlam_get_global(vm, "loss");
  double x0 = 0.2, value = 0, grad = 0, lo = 0, hi = 0, h = 1e-6, dummy;
  if (dlam_value_and_gradient(vm, loss, 1, &x0, &value, &grad) != DLAM_OK)
    return fail(vm, "gradient");
  double xl = x0 - h, xh = x0 + h;
  if (dlam_value_and_gradient(vm, loss, 1, &xl, &lo, &dummy) != DLAM_OK ||
      dlam_value_and_gradient(vm, loss, 1, &xh, &hi, &dummy) != DLAM_OK)
    return fail(vm, "finite differences");
  double fd = (hi - lo) / (2 * h);
  printf("loss(0.2) = %.6f, d loss / d c = %.6f (finite differences %.6f)\n", value, grad, fd);
  dlam_release(vm, loss);
  dlam_free(vm);

  int ok = fabs(c - true_c) < 1e-6 && fabs(grad - fd) < 1e-4 * fabs(fd);
  if (!ok) fprintf(stderr, "physics: the fit or the gradient is off\n");
  return ok ? 0 : 1;
}
