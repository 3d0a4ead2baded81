/* file_io.c — file access in an embedded VM: off unless the config says file_io = true
** (every file procedure is then the error "NAME: file access is disabled", while string
** ports and the standard ports work), on with it (a file written and read back), a wrong
** type for the key, and the current output restored after a with-output-to-file whose
** thunk fails. */
#include "check.h"

/* Each file procedure, called with arguments that would otherwise work. */
static const char* const kFileCalls[][2] = {
    {"(open-input-file \"/etc/hostname\")", "open-input-file"},
    {"(open-output-file \"/tmp/dlam_api_never\")", "open-output-file"},
    {"(call-with-input-file \"/etc/hostname\" read-line)", "call-with-input-file"},
    {"(call-with-output-file \"/tmp/dlam_api_never\" (lambda (p) 1))", "call-with-output-file"},
    {"(with-output-to-file \"/tmp/dlam_api_never\" (lambda () 1))", "with-output-to-file"},
    {"(file-exists? \"/\")", "file-exists?"},
    {"(delete-file \"/tmp/dlam_api_never\")", "delete-file"},
    {"(read-lines \"/etc/hostname\")", "read-lines"},
    {"(read-csv \"/etc/hostname\")", "read-csv"},
};

static void check_disabled(dlam_vm* vm) {
  char expected[128];
  for (size_t i = 0; i < sizeof kFileCalls / sizeof kFileCalls[0]; ++i) {
    snprintf(expected, sizeof expected, "files.dlam:1:1: error: %s: file access is disabled",
             kFileCalls[i][1]);
    CHECK_EVAL_ERROR(vm, kFileCalls[i][0], "files.dlam", DLAM_ERR_RUNTIME, expected);
  }
  CHECK(access("/tmp/dlam_api_never", F_OK) != 0);
  /* String ports and the standard ports work. */
  CHECK(eval_number(vm,
                    "(let ((p (open-output-string))) (write '(1 2) p) "
                    "(string-length (get-output-string p)))") == 5);
  CHECK(eval_number(vm, "(length (read (open-input-string \"(+ 1 2) 7\")))") == 3);
  CHECK(eval_number(vm, "(if (output-port? (current-error-port)) 1 0)") == 1);
}

static void test_default_off(void) {
  dlam_vm* vm = dlam_new(NULL);
  check_disabled(vm);
  dlam_free(vm);

  vm = new_vm_with_config("file_io = false\n");
  check_disabled(vm);
  dlam_free(vm);
}

static void test_on(void) {
  char data[256];
  dlam_vm* vm = new_vm_with_config("file_io = true\n");
  CHECK(strcmp(dlam_last_error(vm), "") == 0);

  write_temp_file(data, sizeof data, ".txt", "");
  char source[1024];
  snprintf(source, sizeof source,
           "(define path \"%s\")"
           "(call-with-output-file path (lambda (p) (write '(1 2 3) p) (newline p)"
           "  (write-string \"x,2.5\" p)))"
           "(define in (open-input-file path))"
           "(define first (read in))"
           "(define rest (read-line in))"
           "(define second (read-line in))"
           "(close-port in)",
           data);
  CHECK_OK(vm, dlam_eval(vm, source, "files.dlam", NULL));
  CHECK(eval_number(vm, "(apply + first)") == 6);
  CHECK(eval_number(vm, "(string-length rest)") == 0);
  CHECK(eval_number(vm, "(if (equal? second \"x,2.5\") 1 0)") == 1);
  CHECK(eval_number(vm, "(cadr (cadr (read-csv path)))") == 2.5);
  CHECK(eval_number(vm, "(length (read-lines path))") == 2);
  CHECK(eval_number(vm, "(if (file-exists? path) 1 0)") == 1);

  /* The FILE:LINE:COL of a syntax error in data is the data file's. */
  snprintf(source, sizeof source,
           "(call-with-output-file path (lambda (p) (write-string \"(1\\n  )) 2\" p)))"
           "(define in (open-input-file path))"
           "(read in)");
  CHECK_OK(vm, dlam_eval(vm, source, "files.dlam", NULL));
  char expected[512];
  snprintf(expected, sizeof expected, "%s:2:4: error: read: unexpected ')'", data);
  CHECK_EVAL_ERROR(vm, "(read in)", "files.dlam", DLAM_ERR_RUNTIME, expected);

  /* A failing thunk: the file is closed (what it wrote is there) and the current output
  ** is the standard output again. */
  CHECK_EVAL_ERROR(vm,
                   "(define before (current-output-port))"
                   "(with-output-to-file path (lambda () (display \"partial\") (car '())))",
                   "files.dlam", DLAM_ERR_RUNTIME, "car");
  CHECK(eval_number(vm, "(if (eq? (current-output-port) before) 1 0)") == 1);
  CHECK(eval_number(vm, "(if (equal? (read-lines path) '(\"partial\")) 1 0)") == 1);

  CHECK_OK(vm, dlam_eval(vm, "(delete-file path)", "files.dlam", NULL));
  CHECK(access(data, F_OK) != 0);
  dlam_free(vm);
}

static void test_bad_type(void) {
  dlam_vm* vm = new_vm_with_config("file_io = 1\n");
  CHECK_STATUS(vm, dlam_eval(vm, "1", "x", NULL), DLAM_ERR_CONFIG);
  CHECK_CONTAINS(dlam_last_error(vm), ":1:1: error: 'file_io' must be a boolean, got 1");
  dlam_free(vm);
}

int main(void) {
  test_default_off();
  test_on();
  test_bad_type();
  return check_done();
}
