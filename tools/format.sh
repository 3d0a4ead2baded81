#!/usr/bin/env bash
# format.sh — formats every C and C++ file git tracks with clang-format (the repository's
# .clang-format), or with --check lists the files that are not formatted and exits 1.
# CI runs the check (.ci/run); the version is Debian 12's clang-format (14).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cpp' '*.hpp')
if [[ "${1:-}" == --check ]]; then
  bad=()
  for f in "${files[@]}"; do
    if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
  done
  if ((${#bad[@]})); then
    echo "format.sh: not formatted (run tools/format.sh): ${bad[*]}" >&2
    exit 1
  fi
  echo "format.sh: ${#files[@]} files formatted"
else
  clang-format -i "${files[@]}"
fi
