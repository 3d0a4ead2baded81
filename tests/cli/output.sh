#!/bin/sh
# output.sh — the `dlam` command's standard output: written in order with standard error
# when both go to one pipe, never lost at an exit (the end, an error, a limit, (exit)),
# fully buffered on a pipe and unbuffered with -u; file ports written but not closed are
# written out at the exit; files dropped without close-port do not exhaust descriptors.
# Usage: output.sh DLAM
set -u
dlam=$1
. "$(dirname "$0")/harness.sh"

# expect NAME FILE TEXT: FILE holds exactly TEXT.
expect() {
  printf '%s\n' "$3" >"$tmp/want"
  if cmp -s "$tmp/want" "$2"; then
    echo "ok   $1"
  else
    fail "$1: expected"
    cat "$tmp/want"
    echo "---- got"
    cat "$2"
  fi
}

# Standard output and standard error to one pipe: in the order they were written.
cat >"$tmp/order.dlam" <<'DLAM'
(display "out 1")
(newline)
(write-string "err 1\n" (current-error-port))
(print "out 2")
(display "err 2" (current-error-port))
(newline (current-error-port))
(print "out 3")
(car 5)
DLAM
"$dlam" "$tmp/order.dlam" 2>&1 | cat >"$tmp/got"
expect "stdout and stderr interleave" "$tmp/got" "out 1
err 1
out 2
err 2
out 3
$tmp/order.dlam:8:1: error: car: expected pair as argument 1, got 5
  at <toplevel> ($tmp/order.dlam:8:1)"

# (exit): what was printed is there, and the status is the script's.
"$dlam" -e '(print "before exit") (exit 3)' | cat >"$tmp/got"
expect "output before (exit)" "$tmp/got" "before exit"
"$dlam" -e '(print "before exit") (exit 3)' >"$tmp/got"
[ "$?" -eq 3 ] || fail "(exit 3): status $?"

# A limit (stack overflow): the output before it comes first.
printf 'stack_limit = 1000\n' >"$tmp/small.lua"
"$dlam" --config "$tmp/small.lua" -e '(print "before the limit") (define (f n) (+ 1 (f n))) (f 0)' \
  2>&1 | head -n 2 | cut -c 1-40 >"$tmp/got"
expect "output before a limit" "$tmp/got" "before the limit
-e:1:47: error: stack overflow (more tha"

# Fully buffered on a pipe: a process killed while it runs has not written its line
# yet; with -u it has.
"$dlam" -e '(print "early") (define (spin) (spin)) (spin)' >"$tmp/buffered" &
pid=$!
"$dlam" -u -e '(print "early") (define (spin) (spin)) (spin)' >"$tmp/unbuffered" &
upid=$!
sleep 1
kill -9 "$pid" "$upid"
wait "$pid" "$upid" 2>/dev/null
expect "-u: unbuffered" "$tmp/unbuffered" "early"
if [ -s "$tmp/buffered" ]; then
  fail "without -u, standard output to a file is buffered (got: $(cat "$tmp/buffered"))"
else
  echo "ok   buffered without -u"
fi

# A file port written and never closed: written out when the process ends, normally or
# with an error.
"$dlam" -e "(define p (open-output-file \"$tmp/unclosed\")) (write-string \"kept\n\" p)"
expect "an unclosed port at the end" "$tmp/unclosed" "kept"
"$dlam" -e "(define p (open-output-file \"$tmp/unclosed\")) (write-string \"kept too\n\" p) (car 5)" \
  2>/dev/null
expect "an unclosed port at an error" "$tmp/unclosed" "kept too"

# Ports dropped without close-port: collected (and their files closed) when the process
# runs out of descriptors, so 2000 opens work under a limit of 64.
(ulimit -n 64 && exec "$dlam" -e "
  (define (loop i)
    (when (< i 2000)
      (write-string (number->string i) (open-output-file \"$tmp/many\"))
      (loop (+ i 1))))
  (loop 0)
  (print 'done)") >"$tmp/got" 2>&1
expect "2000 unclosed files under ulimit -n 64" "$tmp/got" "done"

[ "$failures" -eq 0 ] || exit 1
