/* python_threads.c — the threading of the Python package (python/dlam), replayed in C so that
** ThreadSanitizer (DLAM_TSAN, tools/test.sh) can check it: a mutex stands for Python's GIL.
** The "main" thread holds it and lets it go around every call into dlam (as dlam._core and
** ctypes do); the host functions and the write callback dlam calls take it back (as ctypes
** callbacks do); a second thread, holding the GIL, asks the VM to stop (dlam.interrupt, from a
** threading.Timer), letting the GIL go around dlam_interrupt; and the VM then moves to a third
** thread, which uses it as Python threads take turns with one VM. Each interrupted run fails
** with DLAM_ERR_LIMIT "interrupted", what the host functions and the output saw is checked,
** and the VM keeps working on every thread. */
#include "check.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#define ROUNDS 6

static pthread_mutex_t gil = PTHREAD_MUTEX_INITIALIZER;

/* The state "Python objects" hold: touched only with the GIL held. */
static dlam_vm* the_vm;       /* the VM object's pointer */
static double host_sum;       /* what the host function has seen */
static char printed[1 << 12]; /* what sys.stdout received */
static size_t printed_len;
static int stderr_writes;       /* writes to stream 2 */
static atomic_int runs_started; /* runs that began (the interrupter waits for one) */

static void sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* A Python host function: takes the GIL, reads its argument, updates Python state. */
static dlam_status py_host(dlam_vm* vm, int argc, const dlam_val* argv, dlam_val* result,
                           void* ud) {
  (void)argc;
  (void)ud;
  pthread_mutex_lock(&gil);
  double x = 0;
  dlam_status st = dlam_to_number(vm, argv[0], &x);
  if (st == DLAM_OK) {
    if (x == 0) atomic_fetch_add(&runs_started, 1);
    host_sum += x;
    *result = dlam_number(vm, 2 * x);
  }
  pthread_mutex_unlock(&gil);
  return st;
}

/* VM._on_write: sys.stdout.write under the GIL. */
static void py_write(void* ud, int stream, const char* bytes, size_t n) {
  (void)ud;
  pthread_mutex_lock(&gil);
  if (stream == 2) ++stderr_writes;
  if (printed_len + n < sizeof printed) {
    memcpy(printed + printed_len, bytes, n);
    printed_len += n;
    printed[printed_len] = 0;
  }
  pthread_mutex_unlock(&gil);
}

/* threading.Timer(..., vm.interrupt): waits for a run to start, then, holding the GIL, reads
** the VM's pointer and lets the GIL go around the call (ctypes). */
static void* interrupter(void* arg) {
  int round = (int)(intptr_t)arg;
  /* each round makes two runs, the long one first */
  while (atomic_load(&runs_started) <= 2 * round) sleep_ms(1);
  sleep_ms(5);
  pthread_mutex_lock(&gil);
  dlam_vm* vm = the_vm;
  pthread_mutex_unlock(&gil);
  dlam_interrupt(vm);
  return NULL;
}

/* One Python call into dlam: the GIL is let go for its duration. */
static dlam_status call_without_gil(dlam_vm* vm, dlam_val fn, double x, double* out) {
  pthread_mutex_unlock(&gil);
  dlam_val r = NULL;
  dlam_status st = dlam_call_numbers(vm, fn, 1, &x, out, &r);
  dlam_release(vm, r);
  pthread_mutex_lock(&gil);
  return st;
}

/* A Python thread that takes its turn with the VM (after the main thread is done). */
static void* other_python_thread(void* arg) {
  (void)arg;
  pthread_mutex_lock(&gil);
  dlam_vm* vm = the_vm;
  dlam_val spin = dlam_get_global(vm, "spin");
  double before = host_sum, out = 0;
  CHECK(call_without_gil(vm, spin, 5000, &out) == DLAM_OK);
  CHECK(out == 5000);
  CHECK(host_sum == before + 5000.0 * 4999.0 / 2);
  dlam_release(vm, spin);
  pthread_mutex_unlock(&gil);
  return NULL;
}

int main(void) {
  pthread_mutex_lock(&gil); /* the main thread runs Python */
  dlam_config cfg;
  dlam_config_init(&cfg);
  cfg.write = py_write;
  the_vm = dlam_new_with(&cfg);
  dlam_vm* vm = the_vm;
  CHECK_OK(vm, dlam_register(vm, "py-host", 1, py_host, NULL));
  /* (spin n): calls the host function with 0 .. n-1, prints a dot to each stream every 10^4
  ** steps, returns n; long enough to be interrupted when n is large. */
  CHECK_OK(
      vm, dlam_eval(vm,
                    "(define (spin n) (let loop ((i 0))"
                    "  (if (= i n) i"
                    "      (begin (py-host i)"
                    "             (if (= 0 (modulo i 10000))"
                    "                 (begin (display \".\") (display \"!\" (current-error-port))))"
                    "             (loop (+ i 1))))))",
                    "spin.dlam", NULL));
  dlam_val spin = dlam_get_global(vm, "spin");

  for (int round = 0; round < ROUNDS; ++round) {
    pthread_t t;
    pthread_create(&t, NULL, interrupter, (void*)(intptr_t)round);
    double out = 0;
    dlam_status st = call_without_gil(vm, spin, 1e12, &out);
    CHECK(st == DLAM_ERR_LIMIT);
    CHECK_CONTAINS(dlam_last_error(vm), "interrupted");
    pthread_mutex_unlock(&gil);
    pthread_join(t, NULL); /* (Timer.join, without the GIL) */
    pthread_mutex_lock(&gil);
    /* usable at once: a short run completes and the host function saw every step */
    double before = host_sum;
    CHECK(call_without_gil(vm, spin, 100, &out) == DLAM_OK);
    CHECK(out == 100 && host_sum == before + 4950);
  }
  CHECK(printed_len > 0 && stderr_writes > 0);
  CHECK(printed[0] == '.' || printed[0] == '!');

  /* the VM moves to another Python thread, which uses it while this one waits */
  pthread_t t;
  pthread_create(&t, NULL, other_python_thread, NULL);
  pthread_mutex_unlock(&gil);
  pthread_join(t, NULL);
  pthread_mutex_lock(&gil);
  CHECK(eval_number(vm, "(+ 1 2)") == 3);

  dlam_release(vm, spin);
  dlam_free(vm);
  pthread_mutex_unlock(&gil);
  return check_done();
}
