/* handles_gc.c — handles keep their values alive across garbage collections, however
** much is allocated (by scripts or by the host), and released ones let them go.
** The VM has a 64 MB heap limit and every phase allocates far more than that in total,
** so it only passes if the collector runs and frees what is no longer held. */
#include "check.h"

#define NLISTS 20000
#define LEN 10

/* A script that allocates about `mb` megabytes of garbage. */
static void churn(dlam_vm* vm, int mb) {
  char src[256];
  snprintf(src, sizeof src,
           "(let loop ((i 0)) (if (< i %d) (begin (length (iota 20000)) (loop (+ i 1))) i))",
           mb * 2);
  dlam_val r = NULL;
  CHECK_OK(vm, dlam_eval(vm, src, "churn", &r));
  dlam_release(vm, r);
}

static int list_ok(dlam_vm* vm, dlam_val l, int seed) {
  double out[LEN];
  size_t count = 0;
  if (dlam_to_numbers(vm, l, out, LEN, &count) != DLAM_OK || count != LEN) return 0;
  for (int j = 0; j < LEN; ++j)
    if (out[j] != seed * 100.0 + j) return 0;
  return 1;
}

int main(void) {
  char path[256];
  write_temp_file(path, sizeof path, ".lua", "heap_limit_mb = 64\n");
  dlam_vm* vm = dlam_new(path);
  unlink(path);
  CHECK(strcmp(dlam_last_error(vm), "") == 0);

  /* many handles to host-made lists, and to lists and closures made by scripts */
  static dlam_val lists[NLISTS];
  for (int i = 0; i < NLISTS; ++i) {
    double xs[LEN];
    for (int j = 0; j < LEN; ++j) xs[j] = i * 100.0 + j;
    lists[i] = dlam_list_of_numbers(vm, xs, LEN);
    CHECK(lists[i] != NULL);
  }
  dlam_val made = NULL, closure = NULL;
  CHECK_OK(vm, dlam_eval(vm, "(map (lambda (i) (* i i)) (iota 1000))", "made", &made));
  CHECK_OK(vm, dlam_eval(vm, "(let ((secret (iota 100))) (lambda (k) (list-ref secret k)))",
                         "closure", &closure));
  /* nothing else refers to them */
  churn(vm, 300);

  int bad = 0;
  for (int i = 0; i < NLISTS; ++i) bad += !list_ok(vm, lists[i], i);
  CHECK(bad == 0);
  double sq[1000];
  size_t count = 0;
  CHECK_OK(vm, dlam_to_numbers(vm, made, sq, 1000, &count));
  CHECK(count == 1000 && sq[999] == 999.0 * 999.0);
  dlam_val k = dlam_number(vm, 42), r = NULL;
  double d = 0;
  CHECK_OK(vm, dlam_call(vm, closure, 1, &k, &r));
  CHECK_OK(vm, dlam_to_number(vm, r, &d));
  CHECK(d == 42);
  dlam_release(vm, r);

  /* release every other list; the rest survive more collections; freed slots are reused */
  for (int i = 0; i < NLISTS; i += 2) dlam_release(vm, lists[i]);
  churn(vm, 300);
  bad = 0;
  for (int i = 1; i < NLISTS; i += 2) bad += !list_ok(vm, lists[i], i);
  CHECK(bad == 0);
  for (int i = 0; i < NLISTS; i += 2) {
    double xs[LEN];
    for (int j = 0; j < LEN; ++j) xs[j] = i * 100.0 + j;
    lists[i] = dlam_list_of_numbers(vm, xs, LEN);
  }
  churn(vm, 100);
  bad = 0;
  for (int i = 0; i < NLISTS; ++i) bad += !list_ok(vm, lists[i], i);
  CHECK(bad == 0);

  /* host-side garbage alone: 100 lists of 200000 numbers, about 600 MB in all */
  {
    static double big[200000];
    for (int j = 0; j < 200000; ++j) big[j] = j;
    for (int i = 0; i < 100; ++i) {
      dlam_val l = dlam_list_of_numbers(vm, big, 200000);
      if (!l) {
        fprintf(stderr, "list %d: %s\n", i, dlam_last_error(vm));
        CHECK(l != NULL);
        break;
      }
      dlam_release(vm, l);
    }
  }
  bad = 0;
  for (int i = 0; i < NLISTS; ++i) bad += !list_ok(vm, lists[i], i);
  CHECK(bad == 0);

  /* a held value bigger than the heap can hold twice: a clean limit error, then recovery */
  {
    dlam_val huge = NULL;
    dlam_status s = dlam_eval(vm, "(iota 3000000)", "huge", &huge);
    CHECK(s == DLAM_ERR_LIMIT);
    CHECK_CONTAINS(dlam_last_error(vm), "heap limit");
    dlam_release(vm, huge);
    CHECK(eval_number(vm, "(length (iota 1000))") == 1000);
  }

  /* a million live handles at once (numbers: no heap objects), then all released */
  {
    enum { N = 1000000 };
    dlam_val* hs = malloc(sizeof(dlam_val) * N);
    for (int i = 0; i < N; ++i) hs[i] = dlam_number(vm, i);
    CHECK_OK(vm, dlam_to_number(vm, hs[N - 1], &d));
    CHECK(d == N - 1);
    for (int i = 0; i < N; ++i) dlam_release(vm, hs[i]);
    CHECK_STATUS(vm, dlam_to_number(vm, hs[N / 2], &d), DLAM_ERR_API);
    free(hs);
  }

  for (int i = 0; i < NLISTS; ++i) dlam_release(vm, lists[i]);
  dlam_release(vm, made);
  dlam_release(vm, closure);
  dlam_release(vm, k);
  churn(vm, 10);
  dlam_free(vm);
  return check_done();
}
