#!/bin/sh
# cli_out_of_memory.sh — the `dlam` command under a small address-space limit (ulimit -v):
# scripts whose C++ allocations (reader, printer) or GC heap outgrow it must end with
# exit status 1 and "error: out of memory", not a signal (SIGABRT from an allocator that
# aborts, SIGSEGV). Usage: cli_out_of_memory.sh DLAM run|skip (skip: a sanitizer build,
# whose shadow memory needs more address space than the limit; exits 77 = skipped).
set -u
dlam=$1
if [ "${2:-run}" = skip ]; then
  echo "skipped: ulimit -v does not work with sanitizers"
  exit 77
fi
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
limit_kb=200000  # 200 MB: a few times what starting up needs
failures=0

# expect_oom NAME ARGS...: runs dlam ARGS under the limit, with standard input from
# $input (default /dev/null); it must fail cleanly.
expect_oom() {
  name=$1
  shift
  (ulimit -v "$limit_kb" && exec "$dlam" "$@") <"${input:-/dev/null}" >"$tmp/out" 2>"$tmp/err"
  status=$?
  if [ "$status" -ne 1 ] || ! grep -q "error: out of memory" "$tmp/err"; then
    echo "FAIL $name: exit status $status (want 1 and \"error: out of memory\"); stderr:"
    head -c 2000 "$tmp/err"
    failures=$((failures + 1))
  else
    echo "ok   $name: $(head -n 1 "$tmp/err")"
  fi
}

# The limit leaves room for ordinary work: a script that fits runs normally.
(ulimit -v "$limit_kb" && exec "$dlam" -e '(length ((hessian (lambda (v) (* (car v) (cadr v)))) (list 1 2)))') \
  >"$tmp/out" 2>"$tmp/err"
if [ "$?" -ne 0 ] || [ "$(cat "$tmp/out")" != 2 ]; then
  echo "FAIL: a small script does not run under the limit:"
  cat "$tmp/out" "$tmp/err"
  exit 1
fi

# A matrix product big enough for BLAS: OpenBLAS's work buffer does not fit under the
# limit (it would retry forever); dot computes it without BLAS there.
(ulimit -v "$limit_kb" && exec timeout 20 "$dlam" -e '(print (array-ref (dot (make-array (list 64 64) 1) (make-array (list 64 64) 2)) 0 0))') \
  >"$tmp/out" 2>"$tmp/err"
if [ "$?" -ne 0 ] || [ "$(cat "$tmp/out")" != 128 ]; then
  echo "FAIL: a matrix product under the limit:"
  cat "$tmp/out" "$tmp/err"
  exit 1
fi

# Printing a tree of 2^40 leaves (41 shared pairs): the printer's string outgrows memory.
expect_oom printer -e '(define t (let loop ((i 0) (x 1)) (if (= i 40) x (loop (+ i 1) (cons x x))))) (display t)'

# A 20 MB source: one quoted list of three million numbers (the reader's syntax tree).
awk 'BEGIN { printf "(define l (quote ("; for (i = 0; i < 3000000; i++) printf "%d ", i; print ")))"; print "(display (length l))" }' \
  >"$tmp/big.dlam"
expect_oom "huge source" "$tmp/big.dlam"

# The same source on standard input (read into one string first).
input="$tmp/big.dlam" expect_oom "huge source on stdin" -
input=

# The GC heap: a list that grows until memory runs out (the heap limit is higher).
expect_oom "growing list" -e '(let loop ((l (list 1))) (loop (append l l)))'

# Strings that double until memory runs out.
expect_oom "growing string" -e '(let loop ((s "abcdefgh")) (loop (string-append s s)))'

[ "$failures" -eq 0 ]
