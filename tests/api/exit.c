/* exit.c — (exit [status]) through the C API: the run ends with DLAM_EXIT and the status
** in dlam_exit_code, output before it stays, the VM stays usable, and an exit inside a
** host function's nested call ends the outer run too (unless the host carries on). */
#include "check.h"

/* (host-apply f x ...) = (f x ...), through dlam_call; returns its status as is */
static dlam_status host_apply(dlam_vm* vm, int argc, const dlam_val* argv, dlam_val* result,
                              void* ud) {
  (void)ud;
  return dlam_call(vm, argv[0], argc - 1, argv + 1, result);
}

/* (host-shrug f) calls f and carries on whatever happened: returns 7 */
static dlam_status host_shrug(dlam_vm* vm, int argc, const dlam_val* argv, dlam_val* result,
                              void* ud) {
  (void)argc;
  dlam_status s = dlam_call(vm, argv[0], 0, NULL, NULL);
  *(int*)ud = (int)s;
  *result = dlam_number(vm, 7);
  return DLAM_OK;
}

int main(void) {
  dlam_vm* vm = dlam_new(NULL);
  CHECK(vm != NULL);
  CHECK(dlam_exit_code(vm) == 0);

  /* statuses: an integer, none, #t, #f */
  CHECK_STATUS(vm, dlam_eval(vm, "(define reached 0) (exit 3) (define reached 1)", "x.dlam", NULL),
               DLAM_EXIT);
  CHECK(dlam_exit_code(vm) == 3);
  CHECK(strcmp(dlam_last_error(vm), "exit 3") == 0);
  CHECK(eval_number(vm, "reached") == 0); /* the run ended at the exit; the VM is usable */
  CHECK_STATUS(vm, dlam_eval(vm, "(exit)", "x", NULL), DLAM_EXIT);
  CHECK(dlam_exit_code(vm) == 0);
  CHECK_STATUS(vm, dlam_eval(vm, "(exit #f)", "x", NULL), DLAM_EXIT);
  CHECK(dlam_exit_code(vm) == 1);
  CHECK_STATUS(vm, dlam_eval(vm, "(exit #t)", "x", NULL), DLAM_EXIT);
  CHECK(dlam_exit_code(vm) == 0);
  CHECK_EVAL_ERROR(vm, "(exit 256)", "x", DLAM_ERR_RUNTIME, "exit: expected integer from 0 to 255");
  CHECK(strcmp(dlam_last_error(vm), "") != 0);

  /* from inside a derivative, and through dlam_call */
  CHECK_STATUS(vm, dlam_eval(vm, "((gradient (lambda (x) (if (> x 0) (exit 9) x))) 1)", "x", NULL),
               DLAM_EXIT);
  CHECK(dlam_exit_code(vm) == 9);
  CHECK_OK(vm, dlam_eval(vm, "(define (quit k) (exit k))", "x", NULL));
  dlam_val quit = dlam_get_global(vm, "quit");
  dlam_val five = dlam_number(vm, 5);
  CHECK_STATUS(vm, dlam_call(vm, quit, 1, &five, NULL), DLAM_EXIT);
  CHECK(dlam_exit_code(vm) == 5);

  /* through a host function: its nested call returns DLAM_EXIT, and the outer run ends */
  int seen = -1;
  CHECK_OK(vm, dlam_register(vm, "host-apply", -1, host_apply, NULL));
  CHECK_OK(vm, dlam_register(vm, "host-shrug", 1, host_shrug, &seen));
  CHECK_STATUS(vm,
               dlam_eval(vm, "(define after 0) (host-apply quit 4) (define after 1)", "x", NULL),
               DLAM_EXIT);
  CHECK(dlam_exit_code(vm) == 4);
  CHECK(eval_number(vm, "after") == 0);
  /* a host function that carries on after its nested call exited: the outer run goes on */
  CHECK(eval_number(vm, "(+ 1 (host-shrug (lambda () (exit 6))))") == 8);
  CHECK(seen == DLAM_EXIT);
  CHECK(dlam_exit_code(vm) == 6);
  CHECK(eval_number(vm, "(+ 40 2)") == 42);

  dlam_release(vm, five);
  dlam_release(vm, quit);
  dlam_free(vm);
  return check_done();
}
