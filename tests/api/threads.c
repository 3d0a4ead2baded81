/* threads.c — four VMs on four threads at once, each computing gradients (through dlam
** code, the prelude, and a host function with a vjp) and collecting garbage; and the
** rule that a VM is used only on the thread that created it (other threads get
** DLAM_ERR_API, except for dlam_interrupt). Also built with ThreadSanitizer (DLAM_TSAN). */
#include "check.h"

#include <pthread.h>
#include <stdatomic.h>

#define NTHREADS 4
#define ROUNDS 300

static atomic_int failures = 0;

static void fail_thread(int id, const char* what, dlam_vm* vm) {
  fprintf(stderr, "thread %d: %s: %s\n", id, what, vm ? dlam_last_error(vm) : "");
  atomic_fetch_add(&failures, 1);
}

/* s(x, k) = k x^2 with its vjp; ud points at the thread's own k */
static double scaled_square(const double* x, void* ud) { return *(double*)ud * x[0] * x[0]; }
static void scaled_square_vjp(const double* x, double ybar, double* xbar, void* ud) {
  xbar[0] = ybar * 2 * *(double*)ud * x[0];
}

static void* worker(void* arg) {
  int id = (int)(intptr_t)arg;
  double k = id + 1;
  dlam_vm* vm = dlam_new(NULL);
  if (!vm) {
    fail_thread(id, "dlam_new", NULL);
    return NULL;
  }
  if (dlam_register_numeric(vm, "sq", 1, scaled_square, scaled_square_vjp, &k) != DLAM_OK)
    fail_thread(id, "register", vm);
  const char* defs =
      "(define (f x y) (+ (* x x y) (sin (* x y)) (sq x)))\n"
      "(define (garbage n) (length (map (lambda (i) (* i i)) (iota n))))\n";
  if (dlam_eval(vm, defs, "defs", NULL) != DLAM_OK) fail_thread(id, "defs", vm);
  dlam_val f = dlam_get_global(vm, "f");
  for (int r = 0; r < ROUNDS; ++r) {
    double x[2] = {0.01 * r + id, 1.0 - 0.001 * r}, y = 0, g[2] = {0, 0};
    if (dlam_value_and_gradient(vm, f, 2, x, &y, g) != DLAM_OK) {
      fail_thread(id, "value_and_gradient", vm);
      break;
    }
    double p = x[0] * x[1];
    double ey = x[0] * x[0] * x[1] + sin(p) + k * x[0] * x[0];
    double gx = 2 * x[0] * x[1] + x[1] * cos(p) + 2 * k * x[0];
    double gy = x[0] * x[0] + x[0] * cos(p);
    if (fabs(y - ey) > 1e-9 * fabs(ey) + 1e-12 || fabs(g[0] - gx) > 1e-9 * fabs(gx) + 1e-12 ||
        fabs(g[1] - gy) > 1e-9 * fabs(gy) + 1e-12) {
      fail_thread(id, "wrong gradient", NULL);
      break;
    }
    /* the in-language gradient and some garbage to collect */
    if (r % 10 == 0) {
      char src[128];
      snprintf(src, sizeof src, "(+ (garbage 20000) (car ((gradient f) %g %g)))", x[0], x[1]);
      dlam_val v = NULL;
      double d = 0;
      if (dlam_eval(vm, src, "round", &v) != DLAM_OK || dlam_to_number(vm, v, &d) != DLAM_OK) {
        fail_thread(id, "eval", vm);
        break;
      }
      if (fabs(d - (20000 + gx)) > 1e-6) fail_thread(id, "wrong in-language gradient", NULL);
      dlam_release(vm, v);
    }
  }
  dlam_release(vm, f);
  dlam_free(vm);
  return NULL;
}

static void* use_other_threads_vm(void* arg) {
  dlam_vm* vm = arg;
  /* this thread did not create vm */
  if (dlam_eval(vm, "(+ 1 2)", "x", NULL) != DLAM_ERR_API) atomic_fetch_add(&failures, 1);
  if (dlam_number(vm, 1) != NULL) atomic_fetch_add(&failures, 1);
  dlam_interrupt(vm); /* allowed from any thread */
  return NULL;
}

int main(void) {
  pthread_t threads[NTHREADS];
  for (int i = 0; i < NTHREADS; ++i) pthread_create(&threads[i], NULL, worker, (void*)(intptr_t)i);
  for (int i = 0; i < NTHREADS; ++i) pthread_join(threads[i], NULL);
  CHECK(atomic_load(&failures) == 0);

  /* a VM belongs to its thread */
  dlam_vm* vm = dlam_new(NULL);
  pthread_t t;
  pthread_create(&t, NULL, use_other_threads_vm, vm);
  pthread_join(t, NULL);
  CHECK(atomic_load(&failures) == 0);
  /* the interrupt it sent is pending for the next long enough run here */
  CHECK_STATUS(vm, dlam_eval(vm, "(let loop ((i 0)) (if (< i 1000000) (loop (+ i 1)) i))", "spin", NULL),
               DLAM_ERR_LIMIT);
  CHECK(eval_number(vm, "(+ 1 2)") == 3);
  dlam_free(vm);
  return check_done();
}
