/* embed_overhead.c — what a gradient costs when the host asks for it.
**
** For a small function f(x, y) = x sin(y) + y^2 it prints the time per call of:
**   1. f itself through dlam_call (the primal, for scale);
**   2. dlam_value_and_gradient (the C fast path: *j and the backpropagator driven from C);
**   3. the prelude's (value-and-gradient f) called through dlam_call;
**   4. the in-language ((value-and-gradient f) x y), in a dlam loop (no host boundary);
** and the ratios of 2 and 3 to 4, and the collections each of 2 and 4 started. Not a test:
** it only prints numbers (bench/run.py reads them).
**
**   usage: embed_overhead [ITERATIONS]   (default 200000)
*/
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "dlam.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The collections the VM has made so far ((gc-stats)' third element). */
static double collections(dlam_vm* vm) {
  dlam_val r = NULL;
  double c = -1;
  if (dlam_eval(vm, "(caddr (gc-stats))", "gc", &r) == DLAM_OK) dlam_to_number(vm, r, &c);
  dlam_release(vm, r);
  return c;
}

static void die(dlam_vm* vm, const char* what) {
  fprintf(stderr, "embed_overhead: %s: %s\n", what, dlam_last_error(vm));
  exit(1);
}

int main(int argc, char** argv) {
  long n = argc > 1 ? atol(argv[1]) : 200000;
  if (n <= 0) n = 200000;
  dlam_vm* vm = dlam_new(NULL);
  if (!vm) return 1;
  if (dlam_eval(vm,
                "(define (f x y) (+ (* x (sin y)) (* y y)))\n"
                "(define vg (value-and-gradient f))\n"
                "(define (grad-loop n) (let loop ((i 0) (acc 0))\n"
                "  (if (= i n) acc\n"
                "      (loop (+ i 1) (+ acc (cadr ((value-and-gradient f) 1.5 (* i 1e-6))))))))\n",
                "bench", NULL) != DLAM_OK)
    die(vm, "setup");
  dlam_val f = dlam_get_global(vm, "f"), vg = dlam_get_global(vm, "vg");
  dlam_val args[2] = {dlam_number(vm, 1.5), dlam_number(vm, 0.25)};
  double x[2] = {1.5, 0.25}, y = 0, g[2], sink = 0;

  /* warm up (the transform is made on first use) */
  for (int i = 0; i < 1000; ++i) {
    if (dlam_value_and_gradient(vm, f, 2, x, &y, g) != DLAM_OK) die(vm, "value_and_gradient");
    dlam_val r = NULL;
    if (dlam_call(vm, vg, 2, args, &r) != DLAM_OK) die(vm, "vg");
    dlam_release(vm, r);
  }

  double t0 = now();
  for (long i = 0; i < n; ++i) {
    dlam_val r = NULL;
    if (dlam_call(vm, f, 2, args, &r) != DLAM_OK) die(vm, "call");
    dlam_release(vm, r);
  }
  double primal = (now() - t0) / n;

  double c0 = collections(vm);
  t0 = now();
  for (long i = 0; i < n; ++i) {
    x[1] = i * 1e-6;
    if (dlam_value_and_gradient(vm, f, 2, x, &y, g) != DLAM_OK) die(vm, "value_and_gradient");
    sink += g[0];
  }
  double fast = (now() - t0) / n;
  double fast_gcs = collections(vm) - c0;

  t0 = now();
  for (long i = 0; i < n; ++i) {
    dlam_val r = NULL;
    if (dlam_call(vm, vg, 2, args, &r) != DLAM_OK) die(vm, "vg");
    dlam_release(vm, r);
  }
  double prelude = (now() - t0) / n;

  char src[64];
  snprintf(src, sizeof src, "(grad-loop %ld)", n);
  c0 = collections(vm);
  t0 = now();
  dlam_val r = NULL;
  if (dlam_eval(vm, src, "loop", &r) != DLAM_OK) die(vm, "grad-loop");
  double inlang = (now() - t0) / n;
  double inlang_gcs = collections(vm) - c0;
  dlam_release(vm, r);

  printf("per call, f(x, y) = x sin(y) + y^2, %ld iterations:\n", n);
  printf("  dlam_call of f (primal)                 %8.0f ns\n", primal * 1e9);
  printf("  dlam_value_and_gradient                 %8.0f ns  (%.2fx the in-language gradient)\n",
         fast * 1e9, fast / inlang);
  printf("  dlam_call of (value-and-gradient f)     %8.0f ns  (%.2fx)\n", prelude * 1e9,
         prelude / inlang);
  printf("  in-language ((value-and-gradient f) x y) in a loop %7.0f ns\n", inlang * 1e9);
  printf("collections: %.0f by dlam_value_and_gradient, %.0f by the dlam loop\n", fast_gcs,
         inlang_gcs);
  if (sink == 12345.678) puts("");
  dlam_release(vm, args[0]);
  dlam_release(vm, args[1]);
  dlam_release(vm, f);
  dlam_release(vm, vg);
  dlam_free(vm);
  return 0;
}
