#!/bin/sh
# valgrind.sh — `dlam` under valgrind's memcheck: a program that allocates, collects and
# differentiates, then the VM's teardown, with no error reported (an invalid free, a read
# of freed or uninitialised memory). The arena's large blocks come from mimalloc, whose
# malloc/free valgrind replaces: a block taken from mimalloc by one function and given
# back through another that valgrind replaced is reported as an invalid free at exit.
# (Its pages are mapped from the kernel, chunks unmapped at exit.)
# Usage: valgrind.sh VALGRIND DLAM
set -u
valgrind=$1
dlam=$2
out=$("$valgrind" --error-exitcode=9 -q "$dlam" -e '
(define (build n acc) (if (= n 0) acc (build (- n 1) (cons n acc))))
(print (length (build 200000 (list))))
(collect-garbage)
(print ((gradient (lambda (x) (* x x x))) 2))' 2>&1)
status=$?
if [ "$status" -eq 0 ] && [ "$out" = "200000
12" ]; then
  echo "ok   no memcheck error"
  exit 0
fi
echo "FAIL status $status"
echo "$out"
exit 1
