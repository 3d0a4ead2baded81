# harness.sh — sourced by the cli tests (help.sh, output.sh): a scratch directory $tmp
# removed at exit, and fail NAME, which reports a failure and counts it in $failures.
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
failures=0

fail() {
  echo "FAIL $1"
  failures=$((failures + 1))
}
