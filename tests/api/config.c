/* config.c — dlam_config: the defaults, each setting taking effect in a VM made by
** dlam_new_with, a bad value of each field (DLAM_ERR_CONFIG naming it), the Lua loader into the
** struct, and the write callback through which all of a VM's output goes. */
#include "check.h"

/* What the write callback received. */
typedef struct {
  char text[4096];
  size_t len;
  int calls, stream_other;
  int last_stream; /* capture_streams: the stream of the last bytes */
} captured;

static void capture(void* ud, int stream, const char* bytes, size_t n) {
  captured* c = (captured*)ud;
  ++c->calls;
  if (stream != 1) ++c->stream_other;
  if (c->len + n < sizeof c->text) {
    memcpy(c->text + c->len, bytes, n);
    c->len += n;
    c->text[c->len] = 0;
  }
}

/* Both streams in the order written, each change of stream marked "<1>" or "<2>". */
static void capture_streams(void* ud, int stream, const char* bytes, size_t n) {
  captured* c = (captured*)ud;
  if (stream != c->last_stream) {
    c->last_stream = stream;
    capture(ud, 1, stream == 1 ? "<1>" : stream == 2 ? "<2>" : "<?>", 3);
  }
  capture(ud, 1, bytes, n);
}

/* dlam_new_with(cfg) must give a VM whose every call fails with DLAM_ERR_CONFIG naming sub. */
static void check_bad(const dlam_config* cfg, const char* sub) {
  dlam_vm* vm = dlam_new_with(cfg);
  CHECK(vm != NULL);
  CHECK_STATUS(vm, dlam_eval(vm, "1", "x", NULL), DLAM_ERR_CONFIG);
  CHECK_CONTAINS(dlam_last_error(vm), sub);
  CHECK(dlam_get_global(vm, "car") == NULL);
  CHECK_CONTAINS(dlam_last_error(vm), sub);
  dlam_free(vm);
}

int main(void) {
  dlam_config cfg;
  dlam_config_init(&cfg);
  CHECK(cfg.heap_limit_mb == 1024 && cfg.stack_limit == 1000000 && cfg.instruction_limit == 0);
  CHECK(cfg.include_path_len == 1 && strcmp(cfg.include_path[0], ".") == 0);
  CHECK(cfg.ffi_enabled == 0 && cfg.ffi_libraries == NULL && cfg.file_io == 0);
  CHECK(cfg.write == NULL && cfg.write_ud == NULL);

  /* the defaults (also for a NULL config) */
  {
    dlam_vm* vm = dlam_new_with(NULL);
    CHECK(eval_number(vm, "(+ 1 2)") == 3);
    CHECK_EVAL_ERROR(vm, "(foreign-function \"libm.so.6\" \"erf\" '(double) 'double)", "ffi",
                     DLAM_ERR_RUNTIME, "foreign calls are disabled");
    dlam_free(vm);
  }

  /* write: display, print, newline, write all go to the callback, nothing to stdout */
  {
    captured out = {{0}, 0, 0, 0, 0};
    dlam_config c;
    dlam_config_init(&c);
    c.write = capture;
    c.write_ud = &out;
    dlam_vm* vm = dlam_new_with(&c);
    CHECK_OK(vm, dlam_eval(vm, "(display \"a\") (newline) (print (list 1 2.5)) (write \"q\")",
                           "out", NULL));
    CHECK(strcmp(out.text, "a\n(1 2.5)\n\"q\"") == 0);
    CHECK(out.calls >= 4 && out.stream_other == 0);
    /* output made before an error reaches the host too, and the VM goes on */
    out.len = 0;
    out.text[0] = 0;
    CHECK_EVAL_ERROR(vm, "(display 7) (car 5)", "err.dlam", DLAM_ERR_RUNTIME, "err.dlam:1:");
    CHECK(strcmp(out.text, "7") == 0);
    CHECK(eval_number(vm, "(+ 1 2)") == 3);
    dlam_free(vm);
  }

  /* stream 2: what is written to current-error-port goes to the callback too, in order */
  {
    captured out = {{0}, 0, 0, 0, 0};
    dlam_config c;
    dlam_config_init(&c);
    c.write = capture_streams;
    c.write_ud = &out;
    dlam_vm* vm = dlam_new_with(&c);
    CHECK_OK(vm, dlam_eval(vm,
                           "(display \"a\") (display \"oops\" (current-error-port))"
                           " (write-string \"!\" (current-error-port)) (newline)"
                           " (let ((e (current-error-port))) (write (list 1 \"s\") e)"
                           " (write-char #\\z e) (newline e) (flush-output-port e))"
                           " (display 2)",
                           "err", NULL));
    CHECK(strcmp(out.text, "<1>a<2>oops!<1>\n<2>(1 \"s\")z\n<1>2") == 0);
    dlam_free(vm);
  }

  /* file_io: off by default, on when the struct says 1 */
  {
    dlam_config c;
    dlam_config_init(&c);
    dlam_vm* vm = dlam_new_with(&c);
    CHECK_EVAL_ERROR(vm, "(file-exists? \"/\")", "io", DLAM_ERR_RUNTIME,
                     "file-exists?: file access is disabled");
    dlam_free(vm);
    c.file_io = 1;
    vm = dlam_new_with(&c);
    CHECK_OK(vm, dlam_eval(vm, "(define e (file-exists? \"/\"))", "io", NULL));
    CHECK(eval_number(vm, "(if e 1 0)") == 1);
    dlam_free(vm);
  }

  /* heap_limit_mb, stack_limit, instruction_limit take effect */
  {
    dlam_config c;
    dlam_config_init(&c);
    c.heap_limit_mb = 16;
    dlam_vm* vm = dlam_new_with(&c);
    CHECK_EVAL_ERROR(vm, "(let loop ((i 0) (acc '())) (loop (+ i 1) (cons i acc)))", "heap",
                     DLAM_ERR_LIMIT, "heap limit exceeded (16 MB)");
    CHECK(eval_number(vm, "(+ 1 2)") == 3);
    dlam_free(vm);
    dlam_config_init(&c);
    c.stack_limit = 1000;
    vm = dlam_new_with(&c);
    CHECK_OK(vm,
             dlam_eval(vm, "(define (count n) (if (= n 0) 0 (+ 1 (count (- n 1)))))", "s", NULL));
    CHECK(eval_number(vm, "(count 900)") == 900);
    CHECK_EVAL_ERROR(vm, "(count 100000)", "deep", DLAM_ERR_LIMIT, "stack overflow");
    dlam_free(vm);
    dlam_config_init(&c);
    c.instruction_limit = 100000;
    vm = dlam_new_with(&c);
    CHECK_EVAL_ERROR(vm, "(let loop () (loop))", "spin", DLAM_ERR_LIMIT,
                     "instruction limit exceeded (100000 instructions)");
    CHECK(eval_number(vm, "(+ 1 2)") == 3);
    dlam_free(vm);
  }

  /* ffi_enabled and the allow-list */
  {
    const char* libs[] = {"libm.so.6"};
    dlam_config c;
    dlam_config_init(&c);
    c.ffi_enabled = 1;
    c.ffi_libraries = libs;
    c.ffi_libraries_len = 1;
    dlam_vm* vm = dlam_new_with(&c);
    CHECK_NEAR(eval_number(vm, "((foreign-function \"libm.so.6\" \"erf\" '(double) 'double) 0.5)"),
               0.5204998778130465, 1e-15);
    CHECK_EVAL_ERROR(vm, "(foreign-function \"libz.so.1\" \"crc32\" '(int64) 'int64)", "allow",
                     DLAM_ERR_RUNTIME, "library libz.so.1 is not in the allow-list");
    dlam_free(vm);
  }

  /* a bad value in each field: DLAM_ERR_CONFIG naming it */
  {
    const char* with_null[] = {".", NULL};
    dlam_config c;
    dlam_config_init(&c);
    c.heap_limit_mb = 0;
    check_bad(&c, "error: dlam_config: heap_limit_mb must be from 1 to 2^40, got 0");
    dlam_config_init(&c);
    c.stack_limit = 0;
    check_bad(&c, "stack_limit must be from 1 to 2^32 - 1, got 0");
    dlam_config_init(&c);
    c.instruction_limit = (uint64_t)1 << 63;
    check_bad(&c, "instruction_limit must be at most 2^63 - 1");
    dlam_config_init(&c);
    c.include_path = NULL;
    c.include_path_len = 2;
    check_bad(&c, "include_path is NULL and include_path_len is 2");
    dlam_config_init(&c);
    c.include_path = with_null;
    c.include_path_len = 2;
    check_bad(&c, "include_path[1] is NULL");
    dlam_config_init(&c);
    c.ffi_enabled = 2;
    check_bad(&c, "ffi_enabled must be 0 or 1, got 2");
    dlam_config_init(&c);
    c.ffi_libraries_len = 3;
    check_bad(&c, "ffi_libraries is NULL (any library) and ffi_libraries_len is 3");
    dlam_config_init(&c);
    c.ffi_libraries = with_null;
    c.ffi_libraries_len = 2;
    check_bad(&c, "ffi_libraries[1] is NULL");
    dlam_config_init(&c);
    c.file_io = -1;
    check_bad(&c, "file_io must be 0 or 1, got -1");
    dlam_config_init(&c);
    c.write_ud = &c;
    check_bad(&c, "write_ud is set but write is NULL");
  }

  /* dlam_config_load_lua: the keys the file sets replace the struct's; the rest stay */
  {
    char path[256];
    write_temp_file(path, sizeof path, ".lua",
                    "heap_limit_mb = 64\ninclude_path = { \"lib\", \"/tmp\" }\n"
                    "ffi = { enabled = true, libraries = { \"libm.so.6\" } }\n");
    dlam_config c;
    dlam_config_init(&c);
    c.stack_limit = 5000;
    CHECK_OK(NULL, dlam_config_load_lua(&c, path));
    CHECK(strcmp(dlam_config_error(&c), "") == 0);
    CHECK(c.heap_limit_mb == 64 && c.stack_limit == 5000 && c.instruction_limit == 0);
    CHECK(c.include_path_len == 2 && strcmp(c.include_path[0], "lib") == 0 &&
          strcmp(c.include_path[1], "/tmp") == 0);
    CHECK(c.ffi_enabled == 1 && c.ffi_libraries_len == 1 &&
          strcmp(c.ffi_libraries[0], "libm.so.6") == 0);
    dlam_vm* vm = dlam_new_with(&c);
    CHECK_NEAR(eval_number(vm, "((foreign-function \"libm.so.6\" \"erf\" '(double) 'double) 0.5)"),
               0.5204998778130465, 1e-15);
    dlam_free(vm);
    remove(path);

    /* an error: the struct unchanged, the message names the key and the line */
    write_temp_file(path, sizeof path, ".lua", "stack_limit = 10\nheap_limt_mb = 5\n");
    CHECK_STATUS(NULL, dlam_config_load_lua(&c, path), DLAM_ERR_CONFIG);
    CHECK_CONTAINS(dlam_config_error(&c), ":2:1: error: unknown configuration key 'heap_limt_mb'");
    CHECK(c.stack_limit == 5000 && c.heap_limit_mb == 64 && c.include_path_len == 2);
    remove(path);
    CHECK_STATUS(NULL, dlam_config_load_lua(&c, "/nonexistent/dlam.lua"), DLAM_ERR_CONFIG);
    CHECK_CONTAINS(dlam_config_error(&c), "/nonexistent/dlam.lua");
    CHECK_STATUS(NULL, dlam_config_load_lua(&c, NULL), DLAM_ERR_API);
    CHECK_CONTAINS(dlam_config_error(&c), "path is NULL");
    CHECK_STATUS(NULL, dlam_config_load_lua(NULL, path), DLAM_ERR_API);
    CHECK_CONTAINS(dlam_config_error(NULL), "NULL");

    /* dlam_config_free: the strings it read go, the pointers back to the defaults */
    dlam_config_free(&c);
    CHECK(c.include_path_len == 1 && strcmp(c.include_path[0], ".") == 0);
    CHECK(c.ffi_libraries == NULL && c.ffi_libraries_len == 0 && c.heap_limit_mb == 64);
    dlam_config_free(&c);
    dlam_config_free(NULL);
  }
  return check_done();
}
