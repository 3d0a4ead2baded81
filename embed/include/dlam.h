/*
** dlam.h — the C API of dlam, an embeddable VM for a differentiable lambda language.
**
** Plain C (C11 and C++). Link with libdlam (static: libdlam.a, which also needs
** -lstdc++ -lmimalloc -llua5.4 -lffi -ldl -lm, -lstdc++ ahead of -lmimalloc so that
** operator new reports running out of memory instead of aborting; shared: libdlam.so,
** which takes care of that itself). With CMake:
** find_package(dlam) and link dlam::dlam; with pkg-config: `pkg-config --cflags --libs dlam`.
**
** A tour:
**
**   dlam_vm *vm = dlam_new(NULL);                   // defaults; or a Lua config file
**   dlam_eval(vm, "(define (f x y) (* x (sin y)))", "setup", NULL);
**   dlam_val f = dlam_get_global(vm, "f");
**   double x[2] = {2, 0}, y, g[2];
**   if (dlam_value_and_gradient(vm, f, 2, x, &y, g) != DLAM_OK)
**     fprintf(stderr, "%s\n", dlam_last_error(vm));
**   // y = 0, g = {0, 2}
**   dlam_release(vm, f);
**   dlam_free(vm);
**
** Values. A dlam_val is a handle to a dlam value. Every handle a function gives you
** (results, dlam_get_global, dlam_number, ...) is rooted: the garbage collector keeps
** the value alive, however much the VM allocates, until you pass the handle to
** dlam_release. Handles belong to one VM; a released handle, or one from another VM,
** passed to any function makes it fail with DLAM_ERR_API (detected, not a crash, in
** all but freak cases: a stale handle is caught unless its slot has been reused about
** 16 million times). A NULL handle where a value is needed is DLAM_ERR_API too.
**
** Errors. Functions returning dlam_status return DLAM_OK or an error status; those
** returning a dlam_val return NULL on error. In both cases dlam_last_error(vm) then
** describes the error. Nothing longjmps and no C++ exception crosses this API. An
** error inside a call (a bad script, a runtime error, a limit) leaves the VM usable.
**
** Threads. There is no global state: any number of VMs may live in one process and
** run on different threads at the same time. A VM belongs to no thread: it may be
** created on one thread, used on others and freed on yet another (its handles and
** dlam_last_error go with it). The host must make sure that no two threads use the
** same VM at once, by handing it over with the usual synchronisation (a mutex, a
** queue, pthread_join...): a VM is not locked, and concurrent calls on it are a data
** race. The one function safe to call concurrently with others on the same VM is
** dlam_interrupt. Host functions run on the thread that made the call.
*/
#ifndef DLAM_H
#define DLAM_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__) || defined(__clang__)
#define DLAM_API __attribute__((visibility("default")))
#else
#define DLAM_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define DLAM_VERSION_MAJOR 0
#define DLAM_VERSION_MINOR 1
#define DLAM_VERSION_PATCH 0

/* A dlam virtual machine: heap, globals, standard library. Opaque. */
typedef struct dlam_vm dlam_vm;

/* A rooted handle to a dlam value: the GC keeps the value alive until released. */
typedef struct dlam_val_ *dlam_val;

typedef enum {
  DLAM_OK = 0,
  DLAM_ERR_SYNTAX,  /* the source does not read or compile (also: a file that cannot be opened) */
  DLAM_ERR_RUNTIME, /* a runtime error: wrong type, undefined variable, (error ...), host failure */
  DLAM_ERR_LIMIT,   /* heap limit, stack overflow, instruction limit, interrupt, out of memory */
  DLAM_ERR_CONFIG,  /* the configuration file given to dlam_new is invalid */
  DLAM_ERR_API,     /* misuse: NULL vm or handle, released handle, handle from another VM, ... */
  DLAM_EXIT         /* not an error: the code called (exit [status]); see dlam_exit_code */
} dlam_status;

/* ---- VMs -------------------------------------------------------------------------- */

/* Creates a VM with the standard library loaded.
**
** config_lua_path: a Lua configuration file (heap_limit_mb, stack_limit,
** instruction_limit, include_path, ffi, file_io; see the README), or NULL for the
** defaults. The defaults of an embedded VM: 1024 MB heap, 10^6 frames, no instruction
** limit, include path ".", foreign calls disabled (a config must set ffi.enabled = true),
** file access disabled (a config must set file_io = true: open-input-file, read-lines and
** the other procedures naming a file are errors until then; string ports and the
** standard ports work).
** instruction_limit counts per run: each dlam_eval, dlam_run_file, dlam_call or
** dlam_value_and_gradient made by the host (not from inside a host function) may
** execute that many instructions.
**
** Returns NULL only if out of memory. If the configuration file is missing or
** invalid the VM is still returned, but it is unusable: every function given it
** fails with DLAM_ERR_CONFIG (functions returning handles return NULL) and
** dlam_last_error gives the configuration error ("FILE:LINE: error: unknown
** configuration key ..."). Free it with dlam_free as usual. The VM never falls back
** to defaults, so a config that was meant to restrict a script cannot be skipped by
** accident. */
DLAM_API dlam_vm *dlam_new(const char *config_lua_path);

/* ---- configuration ---------------------------------------------------------------- */

/* The settings of a VM, for dlam_new_with. Fill it with dlam_config_init (the defaults),
** then change the fields you want, or read a Lua configuration file into it with
** dlam_config_load_lua. dlam_new_with copies what it needs: the struct and the strings
** it points at may go once the VM is made. */
typedef struct dlam_config {
  size_t heap_limit_mb;            /* the GC heap's limit, 1 .. 2^40 (default 1024) */
  size_t stack_limit;              /* dlam frames, 1 .. 2^32 - 1 (default 1000000) */
  uint64_t instruction_limit;      /* per run (see dlam_new); 0: none (default) */
  const char *const *include_path; /* directories of (include "file"); default { "." } */
  size_t include_path_len;
  int ffi_enabled;                  /* 0 or 1: foreign-function allowed (default 0) */
  const char *const *ffi_libraries; /* the libraries foreign-function may open; NULL: any */
  size_t ffi_libraries_len;
  int file_io; /* 0 or 1: the file procedures (default 0) */
  /* Threads for the matrix products of arrays (dot) through a BLAS, 1 .. 256; 0 counts
  ** as 1 (the default). Checked but unused: dot is single-threaded dlam code for now. */
  int blas_threads;
  /* Where all of the VM's output goes (display, write, newline, print... to the standard
  ** output port: stream 1; to current-error-port: stream 2): called with the stream and
  ** the bytes (not NUL-terminated).
  ** NULL: the process's stdout and stderr. Called on the thread running the VM. */
  void (*write)(void *ud, int stream, const char *bytes, size_t n);
  void *write_ud; /* given to write */
  void *loaded_;  /* private: the strings dlam_config_load_lua read (dlam_config_free) */
} dlam_config;

/* Fills cfg with the defaults of an embedded VM (those of dlam_new(NULL)). */
DLAM_API void dlam_config_init(dlam_config *cfg);

/* Reads the Lua configuration file at path (heap_limit_mb, stack_limit,
** instruction_limit, include_path, ffi = { enabled, libraries }) into cfg, which must
** have been initialised: the keys the file sets replace cfg's values, the others stay.
** On error (a missing file, an unknown key, a value of the wrong type) cfg is unchanged
** and the status is DLAM_ERR_CONFIG (DLAM_ERR_API for a NULL cfg or path, a bad value
** already in cfg); dlam_config_error(cfg) then says why ("FILE:LINE: error: ..."). The
** strings read are owned by cfg until dlam_config_free. */
DLAM_API dlam_status dlam_config_load_lua(dlam_config *cfg, const char *path);

/* The error of the last dlam_config_load_lua on cfg that failed ("" if none). Valid
** until the next call on cfg. */
DLAM_API const char *dlam_config_error(const dlam_config *cfg);

/* Frees what dlam_config_load_lua stored in cfg (the strings it read; include_path and
** ffi_libraries, if they still point at them, go back to the defaults). NULL is ignored. */
DLAM_API void dlam_config_free(dlam_config *cfg);

/* Creates a VM with the settings in cfg (NULL: the defaults), as dlam_new does. A bad
** value in cfg (a heap_limit_mb of 0, a NULL entry in include_path, an ffi_enabled
** that is neither 0 nor 1, ...) gives a VM on which every call fails with
** DLAM_ERR_CONFIG and dlam_last_error names the field ("error: dlam_config:
** heap_limit_mb must be from 1 to 2^40, got 0"). Returns NULL only if out of memory. */
DLAM_API dlam_vm *dlam_new_with(const dlam_config *cfg);

/* Frees the VM and everything it allocated; all its handles become invalid. Any
** thread may free a VM (not only the one that created it). NULL is ignored. Must not
** be called from inside a host function of the same VM. */
DLAM_API void dlam_free(dlam_vm *vm);

/* The description of the error of the most recent call on vm that failed, as
** "CHUNK:LINE:COL: error: MESSAGE" followed by a trace of dlam frames, one per line
** ("  at NAME (CHUNK:LINE:COL)"), innermost first. "" if the most recent call
** succeeded (every function except dlam_last_error and dlam_interrupt clears it).
** Owned by the VM: valid until the next call on vm. Never NULL (for a NULL vm:
** a static message). */
DLAM_API const char *dlam_last_error(dlam_vm *vm);

/* The status given to (exit [status]) by the run that last returned DLAM_EXIT: 0 for
** (exit) and (exit #t), 1 for (exit #f), else the integer (0 to 255); 0 if no run has
** exited. A run that exits ends there, as after an error, and the VM stays usable; its
** dlam_last_error is "exit STATUS". A host function whose nested call returned
** DLAM_EXIT and that then fails (returns any error status, DLAM_EXIT included) passes
** the exit on to the run that called it. */
DLAM_API int dlam_exit_code(dlam_vm *vm);

/* Asks the code running in vm to stop: the run ends at its next check (every few
** ten-thousand instructions) with DLAM_ERR_LIMIT "interrupted". Thread-safe: meant to
** be called from another thread (or a signal handler) while vm runs; the only function
** that may run concurrently with another call on the same VM. If nothing is
** running, the request stays pending and stops the next run. NULL is ignored. */
DLAM_API void dlam_interrupt(dlam_vm *vm);

/* ---- running code ------------------------------------------------------------------ */

/* Reads, compiles and runs every top-level form of source, in order (a define is
** visible to the forms after it). chunk_name names the source in error messages
** (NULL: "<eval>"). If result is not NULL, *result receives a handle to the value
** of the last form (void if there is none or it is a define), or NULL on error.
** Errors: DLAM_ERR_SYNTAX, DLAM_ERR_RUNTIME, DLAM_ERR_LIMIT. */
DLAM_API dlam_status dlam_eval(dlam_vm *vm, const char *source, const char *chunk_name,
                               dlam_val *result);

/* Like dlam_eval with the contents of the file at path (its name is the chunk name,
** and its directory the base of relative includes). A file that cannot be opened is
** DLAM_ERR_SYNTAX "cannot open 'PATH'". */
DLAM_API dlam_status dlam_run_file(dlam_vm *vm, const char *path, dlam_val *result);

/* A handle to the global variable name, or NULL if it is undefined (then
** dlam_last_error is "") or on error. */
DLAM_API dlam_val dlam_get_global(dlam_vm *vm, const char *name);

/* Defines (or redefines) the global variable name as value. The handle stays yours. */
DLAM_API dlam_status dlam_set_global(dlam_vm *vm, const char *name, dlam_val value);

/* Calls the procedure fn with the argc arguments argv[0..argc-1] (argv may be NULL when
** argc is 0). If result is not NULL, *result receives a handle to the value returned,
** or NULL on error. Re-entrant: a host function may call it. */
DLAM_API dlam_status dlam_call(dlam_vm *vm, dlam_val fn, int argc, const dlam_val *argv,
                               dlam_val *result);

/* dlam_call for the common case of a host that passes numbers: calls fn with the argc
** numbers x[0..argc-1] (x may be NULL when argc is 0). A number result is stored in *out
** (and *result, if not NULL, set to NULL); any other result is given as a handle in
** *result (which must then not be NULL: else DLAM_ERR_API after the call). One crossing of
** the boundary instead of a handle per argument and per result. */
DLAM_API dlam_status dlam_call_numbers(dlam_vm *vm, dlam_val fn, int argc, const double *x,
                                       double *out, dlam_val *result);

/* ---- values -------------------------------------------------------------------------- */

/* A handle to the number x (a NaN becomes the canonical NaN, +nan.0). */
DLAM_API dlam_val dlam_number(dlam_vm *vm, double x);

/* A handle to a new list of the n numbers xs[0..n-1] (xs may be NULL when n is 0). */
DLAM_API dlam_val dlam_list_of_numbers(dlam_vm *vm, const double *xs, size_t n);

/* Stores the number v holds in *out. A value that is not a number is DLAM_ERR_RUNTIME
** ("dlam_to_number: expected a number, got ..."). The symbolic zero sensitivity that
** derivative code may return converts to 0. */
DLAM_API dlam_status dlam_to_number(dlam_vm *vm, dlam_val v, double *out);

/* A handle to a new vector of the n numbers xs[0..n-1] (xs may be
** NULL when n is 0); n is at most 2^30. */
DLAM_API dlam_val dlam_vector_of_numbers(dlam_vm *vm, const double *xs, size_t n);

/* A handle to a new array of rank `rank` (>= 1) and sizes shape[0..rank-1] holding the
** n = shape[0] * ... * shape[rank-1] numbers data[0..n-1] in row-major order (data may be
** NULL when n is 0). At most 2^30 elements. A rank-1 array is a vector. */
DLAM_API dlam_val dlam_array_of_numbers(dlam_vm *vm, const double *data, size_t rank,
                                        const size_t *shape);

/* Reads the array a without copying: *data its elements (row-major), *rank its rank and
** *shape its sizes. The pointers stay valid while the handle a lives (until it is
** released or the VM freed); the elements must not be written. A value that is not an
** array is DLAM_ERR_RUNTIME. */
DLAM_API dlam_status dlam_array_data(dlam_vm *vm, dlam_val a, const double **data, size_t *rank,
                                     const size_t **shape);

/* Stores the elements of the list of numbers, or of the vector, list in out[0..].
** *count (if count is not NULL) receives its length, also when the call fails because
** it is longer than capacity (DLAM_ERR_API, nothing stored): pass capacity 0 (out
** may then be NULL) to ask for the length. A value that is neither a proper list of
** numbers nor a vector is DLAM_ERR_RUNTIME. */
DLAM_API dlam_status dlam_to_numbers(dlam_vm *vm, dlam_val list, double *out, size_t capacity,
                                     size_t *count);

/* A handle to the boolean b (0: #f, anything else: #t). */
DLAM_API dlam_val dlam_boolean(dlam_vm *vm, int b);

/* What a value is, for a host that converts values of any type. */
typedef enum {
  DLAM_TYPE_NUMBER,  /* dlam_to_number reads it (the symbolic zero sensitivity too) */
  DLAM_TYPE_BOOLEAN, /* #t or #f */
  DLAM_TYPE_NULL,    /* the empty list */
  DLAM_TYPE_PAIR,    /* a pair (a non-empty list) */
  DLAM_TYPE_VECTOR,  /* a vector of numbers: dlam_to_numbers reads it */
  DLAM_TYPE_STRING,  /* dlam_to_string reads it */
  DLAM_TYPE_SYMBOL,
  DLAM_TYPE_PROCEDURE, /* anything dlam_call can call */
  DLAM_TYPE_VOID,      /* the value of (void), a define, a display... */
  DLAM_TYPE_OTHER
} dlam_type;

/* The dlam_type of v, or -1 on error (a NULL, released or foreign handle: DLAM_ERR_API in
** dlam_last_error). */
DLAM_API int dlam_type_of(dlam_vm *vm, dlam_val v);

/* The printed form of v (for a string: its characters, for display != 0, as display shows
** them; else as write and the REPL show values) in buf[0..capacity-1], NUL-terminated.
** *length (if not NULL) receives its length without the NUL, also when it does not fit
** (DLAM_ERR_API, nothing stored): pass capacity 0 (buf may then be NULL) to ask for it. */
DLAM_API dlam_status dlam_to_string(dlam_vm *vm, dlam_val v, int display, char *buf,
                                    size_t capacity, size_t *length);

/* Releases the handle v: its value may be collected, and v must not be used again
** (doing so is DLAM_ERR_API). NULL is ignored; an invalid handle sets
** dlam_last_error and is otherwise ignored. */
DLAM_API void dlam_release(dlam_vm *vm, dlam_val v);

/* A new handle to the value of v (released separately). Use it to keep an argument
** of a host function beyond the call. NULL on error. */
DLAM_API dlam_val dlam_dup(dlam_vm *vm, dlam_val v);

/* ---- derivatives ----------------------------------------------------------------------- */

/* The value and gradient at x[0..n-1] of fn, a real-valued dlam procedure of n real
** arguments: *value = fn(x...), gradient[i] = d fn / d x[i] (value may be NULL;
** gradient and x may be NULL when n is 0). Computed by reverse mode directly from C
** (one forward and one backward pass, without the prelude's value-and-gradient; same
** numbers). fn may be any procedure: a closure, a primitive, a host function with a
** vjp, one made by custom-vjp. A result that is not a number, or an error in fn or its
** derivative, fails with the corresponding status; the outputs are then unchanged. */
DLAM_API dlam_status dlam_value_and_gradient(dlam_vm *vm, dlam_val fn, size_t n, const double *x,
                                             double *value, double *gradient);

/* dlam_value_and_gradient for a real-valued function of one array: fn is called with the
** array of the given shape holding x[0..n-1] (row-major; see dlam_array_of_numbers), and
** the gradient, an array of that shape, is written into gradient[0..n-1]. */
DLAM_API dlam_status dlam_value_and_gradient_array(dlam_vm *vm, dlam_val fn, const double *x,
                                                   size_t rank, const size_t *shape, double *value,
                                                   double *gradient);

/* ---- host functions ------------------------------------------------------------------------ */

/* A host function. argv[0..argc-1] are handles to the arguments, valid only during the
** call (they are released when it returns; dlam_dup keeps one). To return a value,
** store a handle in *result (the VM takes it over and releases it; you may return one
** of the argument handles) and return DLAM_OK; leaving *result NULL returns void. To
** fail, return any other status (DLAM_ERR_LIMIT raises a limit error, the others a
** runtime error), after calling dlam_set_error to say why; the error is raised at the
** script's call site, with a trace. A host function may call the API on vm (dlam_call,
** dlam_eval, ...); if such a call fails and the host function then fails without
** calling dlam_set_error, the inner error's message is used. ud is the pointer given
** at registration. A host function written in C++ that lets an exception out does not
** unwind through the VM: the exception is caught at the boundary and raised as a runtime
** error "NAME: the host function threw an exception: WHAT" at the script's call site
** (the same for dlam_register_numeric's functions and vjps); the VM stays usable.
** Host functions registered with dlam_register have no derivative:
** using one in code being differentiated is a runtime error naming it (give it one
** with custom-vjp in dlam, or use dlam_register_numeric). */
typedef dlam_status (*dlam_host_fn)(dlam_vm *vm, int argc, const dlam_val *argv, dlam_val *result,
                                    void *ud);

/* A numeric host function of n = arity reals: returns f(x[0..n-1]). */
typedef double (*dlam_numeric_fn)(const double *x, void *ud);

/* Its vector-Jacobian product: stores ybar * d f / d x[i] (at x) in xbar[i] for every i. */
typedef void (*dlam_numeric_vjp)(const double *x, double ybar, double *xbar, void *ud);

/* Defines the global name as a procedure calling fn with the user data ud.
** arity: the number of arguments (0..255), checked by the VM before fn is called;
** -1 accepts any number. Errors: DLAM_ERR_API for a NULL name or fn or a bad arity. */
DLAM_API dlam_status dlam_register(dlam_vm *vm, const char *name, int arity, dlam_host_fn fn,
                                   void *ud);

/* Defines the global name as a procedure of arity (0..255) numbers returning the number
** fn(x, ud); arguments that are not numbers are a runtime error naming the function.
** If vjp is not NULL the function is differentiable: gradients through it call vjp
** (first order only: a derivative of a derivative through it is an error that says so).
** If vjp is NULL, using it in code being differentiated is an error naming it. */
DLAM_API dlam_status dlam_register_numeric(dlam_vm *vm, const char *name, int arity,
                                           dlam_numeric_fn fn,
                                           dlam_numeric_vjp vjp /* may be NULL */, void *ud);

/* For use inside a host function that is about to fail: the message of the error
** (copied). The error reads "NAME: MESSAGE" where NAME is the host function's name. */
DLAM_API void dlam_set_error(dlam_vm *vm, const char *message);

#ifdef __cplusplus
}
#endif

#endif /* DLAM_H */
