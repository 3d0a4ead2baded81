/* threads.c — four VMs on four threads at once, each computing gradients (through dlam
** code, the prelude, and a host function with a vjp) and collecting garbage; VMs that
** move between threads: made on one thread, used in turn by others (heavy allocation,
** gradients of lists of 10^5 numbers, collections, handles made on one thread and used
** or released on another) and freed on yet another; and dlam_interrupt from another
** thread. Also built with ThreadSanitizer (DLAM_TSAN). */
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

/* ---- VMs that move between threads ------------------------------------------------ */

#define NMOVING 3
#define STAGES 4
#define LIST_N 100000

struct moving {
  dlam_vm* vm;
  double k;       /* data of its host function sq */
  dlam_val sumsq; /* made on the creating thread, used on every other */
  dlam_val f;
  dlam_val hostList; /* made by one stage, checked and released by the next */
  double collections;
};

static struct moving moving[NMOVING];

static void* create_moving(void* arg) {
  (void)arg;
  for (int i = 0; i < NMOVING; ++i) {
    struct moving* m = &moving[i];
    m->k = i + 1;
    m->vm = dlam_new(NULL);
    if (!m->vm) {
      fail_thread(i, "dlam_new", NULL);
      continue;
    }
    if (dlam_register_numeric(m->vm, "sq", 1, scaled_square, scaled_square_vjp, &m->k) != DLAM_OK)
      fail_thread(i, "register", m->vm);
    const char* defs =
        "(define (sumsq xs) (fold-left + 0 (map (lambda (x) (* x x)) xs)))\n"
        "(define (f x y) (+ (* x x y) (sin (* x y)) (sq x)))\n"
        "(define keep (iota 100000))\n"
        "(define (collections) (caddr (gc-stats)))\n";
    if (dlam_eval(m->vm, defs, "defs", NULL) != DLAM_OK) fail_thread(i, "defs", m->vm);
    m->sumsq = dlam_get_global(m->vm, "sumsq");
    m->f = dlam_get_global(m->vm, "f");
    if (!m->sumsq || !m->f) fail_thread(i, "globals", m->vm);
  }
  return NULL;
}

static double eval_number_in(int id, dlam_vm* vm, const char* src) {
  dlam_val v = NULL;
  double d = NAN;
  if (dlam_eval(vm, src, "stage", &v) != DLAM_OK || dlam_to_number(vm, v, &d) != DLAM_OK)
    fail_thread(id, src, vm);
  dlam_release(vm, v);
  return d;
}

struct stage_arg {
  int vm;
  int stage;
};

/* One turn of a VM on a thread of its own: allocates lists of 10^5 elements and takes
** gradients of them (many collections), uses and releases handles made on other threads. */
static void* run_stage(void* arg) {
  struct stage_arg* a = arg;
  int id = a->vm, s = a->stage;
  struct moving* m = &moving[id];
  dlam_vm* vm = m->vm;
  if (!vm) return NULL;
  double scale = s + 1;
  /* the gradient of sum x^2 over (0 s 2s ... ) is 2x: its sum is 2 s sum(i) */
  char src[256];
  snprintf(src, sizeof src,
           "(fold-left + 0 ((gradient sumsq) (map (lambda (i) (* i %g)) (iota %d))))", scale,
           LIST_N);
  double g = eval_number_in(id, vm, src);
  double sumi = (double)LIST_N * (LIST_N - 1) / 2;
  if (g != 2 * scale * sumi) fail_thread(id, "wrong gradient of a list", NULL);
  /* a value defined on the creating thread survived every collection since */
  if (eval_number_in(id, vm, "(fold-left + 0 keep)") != sumi) fail_thread(id, "keep", NULL);
  /* the list the previous stage made from the host (see below), through its handle */
  if (m->hostList) {
    dlam_val r = NULL;
    double d = 0;
    if (dlam_call(vm, m->sumsq, 1, &m->hostList, &r) != DLAM_OK ||
        dlam_to_number(vm, r, &d) != DLAM_OK)
      fail_thread(id, "sumsq of the host list", vm);
    double e = 0;
    for (int i = 0; i < LIST_N; ++i) e += (0.5 * i) * (0.5 * i) * s;
    if (fabs(d - e) > 1e-9 * e) fail_thread(id, "wrong sumsq of the host list", NULL);
    dlam_release(vm, r);
    dlam_release(vm, m->hostList);
    m->hostList = NULL;
  }
  /* for the next stage: (0.5 i sqrt(s + 1)), whose sum of squares is (s + 1) sum (i / 2)^2 */
  double* xs = malloc(LIST_N * sizeof *xs);
  if (xs) {
    for (int i = 0; i < LIST_N; ++i) xs[i] = 0.5 * i * sqrt(s + 1.0);
    m->hostList = dlam_list_of_numbers(vm, xs, LIST_N);
    if (!m->hostList) fail_thread(id, "dlam_list_of_numbers", vm);
    free(xs);
  }
  /* a host function with a vjp, differentiated through dlam_value_and_gradient */
  double x[2] = {1.5 + s, 0.5 - 0.1 * s}, y = 0, gr[2] = {0, 0};
  if (dlam_value_and_gradient(vm, m->f, 2, x, &y, gr) != DLAM_OK) {
    fail_thread(id, "value_and_gradient", vm);
  } else {
    double p = x[0] * x[1];
    double gx = 2 * x[0] * x[1] + x[1] * cos(p) + 2 * m->k * x[0];
    if (fabs(gr[0] - gx) > 1e-9 * fabs(gx)) fail_thread(id, "wrong host gradient", NULL);
  }
  double collections = eval_number_in(id, vm, "(collections)");
  if (!(collections > m->collections)) fail_thread(id, "no collection in the stage", NULL);
  m->collections = collections;
  return NULL;
}

static void* close_moving(void* arg) {
  (void)arg;
  for (int i = 0; i < NMOVING; ++i) {
    struct moving* m = &moving[i];
    if (!m->vm) continue;
    dlam_release(m->vm, m->hostList);
    dlam_release(m->vm, m->sumsq);
    dlam_release(m->vm, m->f);
    dlam_free(m->vm);
    m->vm = NULL;
  }
  return NULL;
}

static void moving_vms(void) {
  pthread_t t;
  pthread_create(&t, NULL, create_moving, NULL);
  pthread_join(t, NULL);
  for (int s = 0; s < STAGES; ++s) {
    /* every VM on a new thread, at the same time as the others */
    pthread_t ts[NMOVING];
    struct stage_arg args[NMOVING];
    for (int i = 0; i < NMOVING; ++i) {
      args[i].vm = i;
      args[i].stage = s;
      pthread_create(&ts[i], NULL, run_stage, &args[i]);
    }
    for (int i = 0; i < NMOVING; ++i) pthread_join(ts[i], NULL);
  }
  pthread_create(&t, NULL, close_moving, NULL);
  pthread_join(t, NULL);
}

/* ---- another thread uses this thread's VM, and interrupts it ------------------------ */

static void* use_other_threads_vm(void* arg) {
  dlam_vm* vm = arg;
  /* this thread did not create vm: it may use it all the same */
  dlam_val v = NULL;
  double d = 0;
  if (dlam_eval(vm, "(define here 42) (+ 1 2)", "x", &v) != DLAM_OK ||
      dlam_to_number(vm, v, &d) != DLAM_OK || d != 3)
    fail_thread(-1, "eval from another thread", vm);
  dlam_release(vm, v);
  dlam_interrupt(vm);
  return NULL;
}

int main(void) {
  pthread_t threads[NTHREADS];
  for (int i = 0; i < NTHREADS; ++i) pthread_create(&threads[i], NULL, worker, (void*)(intptr_t)i);
  for (int i = 0; i < NTHREADS; ++i) pthread_join(threads[i], NULL);
  CHECK(atomic_load(&failures) == 0);

  moving_vms();
  CHECK(atomic_load(&failures) == 0);

  dlam_vm* vm = dlam_new(NULL);
  pthread_t t;
  pthread_create(&t, NULL, use_other_threads_vm, vm);
  pthread_join(t, NULL);
  CHECK(atomic_load(&failures) == 0);
  CHECK(eval_number(vm, "here") == 42);
  /* the interrupt it sent is pending for the next long enough run here */
  CHECK_STATUS(
      vm, dlam_eval(vm, "(let loop ((i 0)) (if (< i 1000000) (loop (+ i 1)) i))", "spin", NULL),
      DLAM_ERR_LIMIT);
  CHECK(eval_number(vm, "(+ 1 2)") == 3);
  dlam_free(vm);
  return check_done();
}
