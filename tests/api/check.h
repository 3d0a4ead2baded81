/* check.h — tiny assertion helpers for the C API tests (C11, no framework).
**
** Each test program runs its checks, counts failures and ends with
** `return check_done();`, which prints "ok" or the number of failures. */
#ifndef DLAM_TEST_CHECK_H
#define DLAM_TEST_CHECK_H

/* The tests are strict C11; mkstemps, pthreads and friends are POSIX/GNU. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dlam.h"

static int check_failures = 0;

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++check_failures;                                                        \
    }                                                                          \
  } while (0)

/* expr must return status st (DLAM_OK: prints the VM's error otherwise). */
#define CHECK_STATUS(vm, expr, st)                                                                \
  do {                                                                                            \
    dlam_status check_s_ = (expr);                                                                \
    if (check_s_ != (st)) {                                                                       \
      fprintf(stderr, "%s:%d: %s returned %d, expected %d; last error: %s\n", __FILE__, __LINE__, \
              #expr, (int)check_s_, (int)(st), dlam_last_error(vm));                              \
      ++check_failures;                                                                           \
    }                                                                                             \
  } while (0)

#define CHECK_OK(vm, expr) CHECK_STATUS(vm, expr, DLAM_OK)

/* |a - b| <= tol * max(1, |b|) */
#define CHECK_NEAR(a, b, tol)                                                             \
  do {                                                                                    \
    double check_a_ = (a), check_b_ = (b);                                                \
    double check_scale_ = fabs(check_b_) > 1 ? fabs(check_b_) : 1;                        \
    if (!(fabs(check_a_ - check_b_) <= (tol)*check_scale_)) {                             \
      fprintf(stderr, "%s:%d: %s = %.17g, expected %s = %.17g\n", __FILE__, __LINE__, #a, \
              check_a_, #b, check_b_);                                                    \
      ++check_failures;                                                                   \
    }                                                                                     \
  } while (0)

#define CHECK_CONTAINS(str, sub)                                                    \
  do {                                                                              \
    const char* check_str_ = (str);                                                 \
    if (!check_str_ || !strstr(check_str_, (sub))) {                                \
      fprintf(stderr, "%s:%d: expected \"%s\" in: %s\n", __FILE__, __LINE__, (sub), \
              check_str_ ? check_str_ : "(null)");                                  \
      ++check_failures;                                                             \
    }                                                                               \
  } while (0)

/* Evaluating source (named name) must fail with status st and an error containing sub. */
#define CHECK_EVAL_ERROR(vm, source, name, st, sub)          \
  do {                                                       \
    CHECK_STATUS(vm, dlam_eval(vm, source, name, NULL), st); \
    CHECK_CONTAINS(dlam_last_error(vm), sub);                \
  } while (0)

/* Evaluates source (must succeed) and returns its value as a number. */
static inline double eval_number(dlam_vm* vm, const char* source) {
  dlam_val v = NULL;
  double x = NAN;
  if (dlam_eval(vm, source, "test", &v) != DLAM_OK) {
    fprintf(stderr, "eval of %s failed: %s\n", source, dlam_last_error(vm));
    ++check_failures;
    return NAN;
  }
  if (dlam_to_number(vm, v, &x) != DLAM_OK) {
    fprintf(stderr, "value of %s is not a number: %s\n", source, dlam_last_error(vm));
    ++check_failures;
  }
  dlam_release(vm, v);
  return x;
}

/* Writes text to a new temporary file whose name (ending in suffix) is stored in path. */
static inline void write_temp_file(char* path, size_t size, const char* suffix, const char* text) {
  snprintf(path, size, "/tmp/dlam_api_test_XXXXXX%s", suffix);
  int fd = mkstemps(path, (int)strlen(suffix));
  if (fd < 0) {
    perror("mkstemps");
    exit(2);
  }
  size_t n = strlen(text);
  if (write(fd, text, n) != (ssize_t)n) {
    perror("write");
    exit(2);
  }
  close(fd);
}

/* A VM made with a configuration file holding lua (written to a temporary file, removed). */
static inline dlam_vm* new_vm_with_config(const char* lua) {
  char path[256];
  write_temp_file(path, sizeof path, ".lua", lua);
  dlam_vm* vm = dlam_new(path);
  unlink(path);
  return vm;
}

static inline int check_done(void) {
  if (check_failures) {
    fprintf(stderr, "%d check(s) failed\n", check_failures);
    return 1;
  }
  printf("ok\n");
  return 0;
}

#endif
