#!/bin/sh
# help.sh — `dlam --help`: exits 0 and lists each option the command line takes exactly
# once in its Options section (a repeated or missing line is the failure), and `-h` prints
# the same text.
# Usage: help.sh DLAM
set -u
dlam=$1
. "$(dirname "$0")/harness.sh"

"$dlam" --help >"$tmp/help"
status=$?
[ "$status" -eq 0 ] || fail "--help: status $status"
"$dlam" -h >"$tmp/h"
cmp -s "$tmp/help" "$tmp/h" || fail "-h prints another text than --help"

# The Options section: from its heading to the next empty line. Each option line starts
# with two spaces and a dash; its names are the dash words before the description
# ("-e, --eval CODE" names -e and --eval).
sed -n '/^Options/,/^$/p' "$tmp/help" | grep '^  -' |
  sed 's/^  //; s/   .*//; s/,/ /g' | tr ' ' '\n' | grep '^-' | sort >"$tmp/names"
[ -s "$tmp/names" ] || fail "no option lines in the Options section"
dups=$(uniq -d "$tmp/names")
[ -z "$dups" ] || fail "listed more than once: $(echo $dups)"

# Every option the command line takes (cli/main.cpp) is listed, once.
for opt in -e --eval --config --sandbox --full-trace -u --disasm --version -h --help --; do
  n=$(grep -c -x -e "$opt" "$tmp/names")
  [ "$n" -eq 1 ] || fail "$opt listed $n times"
done

if [ "$failures" -eq 0 ]; then
  echo "ok   --help lists $(wc -l <"$tmp/names") option names, each once"
  exit 0
fi
echo "---- the help text"
cat "$tmp/help"
exit 1
