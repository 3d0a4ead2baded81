/* limits.c — the configured limits seen from the C API: the instruction limit (per run),
** the stack limit, and dlam_interrupt from another thread. After each, the VM goes on. */
#include "check.h"

#include <pthread.h>
#include <time.h>

static const char* kForever = "(let loop ((i 0)) (loop (+ i 1)))";

/* (spin n): about 4n instructions */
static const char* kSpin = "(define (spin n) (let loop ((i 0)) (if (< i n) (loop (+ i 1)) i)))";

static dlam_status host_apply(dlam_vm* vm, int argc, const dlam_val* argv, dlam_val* result,
                              void* ud) {
  (void)ud;
  return dlam_call(vm, argv[0], argc - 1, argv + 1, result);
}

static void test_instruction_limit(void) {
  char path[256];
  write_temp_file(path, sizeof path, ".lua", "instruction_limit = 2000000\n");
  dlam_vm* vm = dlam_new(path);
  unlink(path);
  CHECK(strcmp(dlam_last_error(vm), "") == 0);
  CHECK_OK(vm, dlam_eval(vm, kSpin, "spin", NULL));

  CHECK_EVAL_ERROR(vm, kForever, "forever.dlam", DLAM_ERR_LIMIT, "forever.dlam:1:");
  CHECK_CONTAINS(dlam_last_error(vm), "instruction limit exceeded (2000000 instructions)");

  /* the limit is per run: each of these runs stays under it, together they do not */
  for (int i = 0; i < 5; ++i) CHECK(eval_number(vm, "(spin 100000)") == 100000);
  dlam_val spin = dlam_get_global(vm, "spin");
  dlam_val n = dlam_number(vm, 100000);
  for (int i = 0; i < 5; ++i) CHECK_OK(vm, dlam_call(vm, spin, 1, &n, NULL));
  dlam_release(vm, n);
  n = dlam_number(vm, 10000000);
  CHECK_STATUS(vm, dlam_call(vm, spin, 1, &n, NULL), DLAM_ERR_LIMIT);
  dlam_release(vm, n);
  dlam_release(vm, spin);

  /* gradients count too */
  dlam_val f = NULL;
  CHECK_OK(vm, dlam_eval(vm, "(lambda (x) (let loop ((i 0) (acc x)) (loop (+ i 1) (* acc 1))))",
                         "g", &f));
  double x = 1, y, g;
  CHECK_STATUS(vm, dlam_value_and_gradient(vm, f, 1, &x, &y, &g), DLAM_ERR_LIMIT);
  dlam_release(vm, f);

  /* runs started by host functions belong to the outer run */
  CHECK_OK(vm, dlam_register(vm, "host-apply", -1, host_apply, NULL));
  CHECK_EVAL_ERROR(vm, "(host-apply (lambda () (spin 100000000)))", "nested", DLAM_ERR_LIMIT,
                   "instruction limit exceeded");
  CHECK(eval_number(vm, "(host-apply spin 1000)") == 1000);
  dlam_free(vm);
}

static void test_stack_limit(void) {
  char path[256];
  write_temp_file(path, sizeof path, ".lua", "stack_limit = 10000\n");
  dlam_vm* vm = dlam_new(path);
  unlink(path);
  CHECK_OK(vm, dlam_eval(vm, "(define (depth n) (if (= n 0) 0 (+ 1 (depth (- n 1)))))", "d", NULL));
  CHECK(eval_number(vm, "(depth 5000)") == 5000);
  CHECK_EVAL_ERROR(vm, "(depth 100000)", "deep.dlam", DLAM_ERR_LIMIT, "stack overflow");
  CHECK(eval_number(vm, "(depth 5000)") == 5000);
  dlam_free(vm);

  /* the default allows a million frames */
  vm = dlam_new(NULL);
  CHECK_OK(vm, dlam_eval(vm, "(define (depth n) (if (= n 0) 0 (+ 1 (depth (- n 1)))))", "d", NULL));
  CHECK(eval_number(vm, "(depth 500000)") == 500000);
  dlam_free(vm);
}

typedef struct {
  dlam_vm* vm;
  int delay_ms;
} Interrupter;

static void* interrupt_later(void* arg) {
  Interrupter* it = arg;
  struct timespec ts = {0, it->delay_ms * 1000000L};
  nanosleep(&ts, NULL);
  dlam_interrupt(it->vm);
  return NULL;
}

static void test_interrupt(void) {
  dlam_vm* vm = dlam_new(NULL);
  Interrupter it = {vm, 100};
  pthread_t t;
  pthread_create(&t, NULL, interrupt_later, &it);
  CHECK_EVAL_ERROR(vm, kForever, "forever.dlam", DLAM_ERR_LIMIT, "forever.dlam:1:");
  CHECK_CONTAINS(dlam_last_error(vm), "interrupted");
  pthread_join(t, NULL);
  CHECK(eval_number(vm, "(+ 1 2)") == 3);

  /* also inside a gradient: a loop keeps a frame per iteration there, so each
     iteration walks a long list, and the stack limit is minutes away when the
     interrupt comes (about 600 iterations in) */
  dlam_val f = NULL;
  CHECK_OK(vm, dlam_eval(vm,
                         "(lambda (x) (let ((big (iota 100000))) (let loop ((i 0) (acc x)) (loop "
                         "(+ i (length big)) (* acc 1)))))",
                         "g", &f));
  pthread_create(&t, NULL, interrupt_later, &it);
  double x = 1, y, g;
  CHECK_STATUS(vm, dlam_value_and_gradient(vm, f, 1, &x, &y, &g), DLAM_ERR_LIMIT);
  CHECK_CONTAINS(dlam_last_error(vm), "interrupted");
  pthread_join(t, NULL);
  dlam_release(vm, f);
  CHECK(eval_number(vm, "(* 6 7)") == 42);
  dlam_free(vm);
}

int main(void) {
  test_instruction_limit();
  test_stack_limit();
  test_interrupt();
  return check_done();
}
