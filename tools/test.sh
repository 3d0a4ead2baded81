#!/usr/bin/env bash
# test.sh — builds dlam and runs every test, then the lang suite again under GC stress and
# under AddressSanitizer + UndefinedBehaviorSanitizer. Exits non-zero if anything fails.
#
# Environment:
#   DLAM_SKIP_SETUP=1     do not run tools/setup.sh
#   DLAM_SKIP_STRESS=1    skip the GC-stress build (build-stress/)
#   DLAM_SKIP_SANITIZE=1  skip the ASan+UBSan build (build-asan/)
#   DLAM_JOBS=N           parallel build and test jobs (default 2)
#   DLAM_WERROR=ON        treat compiler warnings as errors
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

jobs="${DLAM_JOBS:-2}"
werror="${DLAM_WERROR:-OFF}"
failed=()

section() { printf '\n==== %s ====\n' "$*"; }

if [[ "${DLAM_SKIP_SETUP:-0}" != 1 ]]; then
  bash tools/setup.sh
fi

section "release build (build/)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DDLAM_GC_STRESS=OFF -DDLAM_SANITIZE=OFF \
  -DDLAM_WERROR="$werror"
cmake --build build -j"$jobs"

section "all tests (build/)"
ctest --test-dir build --output-on-failure -j"$jobs" || failed+=("tests")

if [[ "${DLAM_SKIP_STRESS:-0}" != 1 ]]; then
  section "lang suite under GC stress (build-stress/)"
  # Scripts tagged `heavy` allocate millions of objects: quadratic when every allocation collects.
  if cmake -S . -B build-stress -DCMAKE_BUILD_TYPE=Release -DDLAM_GC_STRESS=ON -DDLAM_SANITIZE=OFF \
       -DDLAM_WERROR="$werror" &&
     cmake --build build-stress -j"$jobs" --target dlam dlam_lang_tests; then
    DLAM_LANG_SKIP_TAGS="heavy ${DLAM_LANG_SKIP_TAGS:-}" DLAM_LANG_TIMEOUT_SCALE=3 \
      ctest --test-dir build-stress -L lang --output-on-failure -j"$jobs" || failed+=("gc-stress")
  else
    failed+=("gc-stress build")
  fi
fi

if [[ "${DLAM_SKIP_SANITIZE:-0}" != 1 ]]; then
  section "lang suite under ASan + UBSan (build-asan/)"
  if cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLAM_SANITIZE=ON \
       -DDLAM_GC_STRESS=OFF -DDLAM_WERROR="$werror" &&
     cmake --build build-asan -j"$jobs" --target dlam dlam_lang_tests; then
    # exitcode=86: a sanitizer report must not look like dlam's own exit status 1.
    ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:exitcode=86}" \
    UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:exitcode=86}" \
    DLAM_LANG_TIMEOUT_SCALE=4 \
      ctest --test-dir build-asan -L lang --output-on-failure -j"$jobs" || failed+=("asan+ubsan")
  else
    failed+=("asan+ubsan build")
  fi
fi

if ((${#failed[@]})); then
  section "FAILED: ${failed[*]}"
  exit 1
fi
section "all passed"
