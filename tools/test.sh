#!/usr/bin/env bash
# test.sh — builds dlam with GCC and runs every test and the Python package's tests, then
# the lang suite and the C++ allocation-failure sweep again under GC stress, every test again
# built with clang under AddressSanitizer + UndefinedBehaviorSanitizer (with LeakSanitizer;
# with clang's warnings as errors, and the interpreter's switch dispatch in place of computed
# goto, so that fallback is tested too), and the threads tests (VMs on several threads,
# interrupts, the Python package's threading replayed in C) under ThreadSanitizer.
# First of all it checks that every C and C++ file is clang-formatted (tools/format.sh --check).
# Each section prints its wall time and CPU time. Exits non-zero if anything fails.
#
# Environment:
#   DLAM_SKIP_SETUP=1     do not run tools/setup.sh
#   DLAM_SKIP_STRESS=1    skip the GC-stress build (build-stress/)
#   DLAM_SKIP_SANITIZE=1  skip the clang ASan+UBSan build (build-asan/)
#   DLAM_SKIP_TSAN=1      skip the ThreadSanitizer build of the threads test (build-tsan/)
#   DLAM_JOBS=N           parallel build and test jobs (default 2)
#   DLAM_WERROR=ON        treat GCC's warnings as errors (CI sets it; clang's always are)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

jobs="${DLAM_JOBS:-2}"
werror="${DLAM_WERROR:-OFF}"
failed=()

# Each section header also gives the wall time of the section before it and the CPU time its
# commands took (user + system, from /proc: on a shared machine the wall time depends on the
# load, the CPU time much less), and the last one the time of the whole run.
ticks="$(getconf CLK_TCK 2>/dev/null || echo 100)"
cpu() { # CPU seconds of the commands this script ran and waited for
  local f
  if read -r -a f </proc/$$/stat 2>/dev/null; then
    echo $(((f[15] + f[16]) / ticks))
  else
    echo 0
  fi
}
section_name=""
section_start=$SECONDS
section_cpu=$(cpu)
section() {
  local now
  now=$(cpu)
  if [[ -n "$section_name" ]]; then
    printf '\n---- %d s, CPU %d s: %s\n' $((SECONDS - section_start)) $((now - section_cpu)) \
      "$section_name"
  fi
  section_name="$*"
  section_start=$SECONDS
  section_cpu=$now
  printf '\n==== %s ====\n' "$*"
}
# built: the times so far of a section that builds and then tests.
built() {
  printf -- '---- built in %d s, CPU %d s\n' $((SECONDS - section_start)) $(($(cpu) - section_cpu))
}

# configure DIR ARGS...: cmake's configure step, with Ninja where it is installed (it compiles
# a target's sources while the libraries it links are still being built, where make waits);
# a build directory configured before keeps its generator.
configure() {
  local dir="$1" gen=()
  shift
  if [[ ! -f "$dir/CMakeCache.txt" ]] && command -v ninja >/dev/null 2>&1; then
    gen=(-G Ninja)
  fi
  cmake -S . -B "$dir" "${gen[@]}" "$@"
}

if [[ "${DLAM_SKIP_SETUP:-0}" != 1 ]]; then
  bash tools/setup.sh
fi

section "formatting (tools/format.sh --check)"
bash tools/format.sh --check || failed+=("format")

section "release build (build/)"
configure build -DCMAKE_BUILD_TYPE=Release -DDLAM_GC_STRESS=OFF -DDLAM_SANITIZE=OFF \
  -DDLAM_WERROR="$werror"
cmake --build build -j"$jobs"

section "all tests (build/)"
ctest --test-dir build --output-on-failure -j"$jobs" || failed+=("tests")

section "the Python package (python/, pytest against build/embed/libdlam.so, build/python)"
# Debian's interpreter, which has python3-numpy and python3-pytest (tools/setup.sh); its exit
# status counts, and its summary line closes the section.
DLAM_LIBRARY="$PWD/build/embed/libdlam.so" /usr/bin/python3 -m pytest -q -p no:cacheprovider \
  python/tests || failed+=("python")

if [[ "${DLAM_SKIP_STRESS:-0}" != 1 ]]; then
  section "lang suite and allocation-failure sweep under GC stress (build-stress/)"
  # Scripts tagged `heavy` allocate millions of objects: quadratic when every allocation collects.
  # The sweep fails the C++ allocations of collections too when every call collects.
  if configure build-stress -DCMAKE_BUILD_TYPE=Release -DDLAM_GC_STRESS=ON -DDLAM_SANITIZE=OFF \
       -DDLAM_WERROR="$werror" &&
     cmake --build build-stress -j"$jobs" --target dlam dlam_lang_tests dlam_cpp_alloc_tests; then
    built
    DLAM_LANG_SKIP_TAGS="heavy ${DLAM_LANG_SKIP_TAGS:-}" DLAM_LANG_TIMEOUT_SCALE=3 \
      ctest --test-dir build-stress -L lang --output-on-failure -j"$jobs" || failed+=("gc-stress")
    ctest --test-dir build-stress -R 'CppAllocationFailure' --output-on-failure -j"$jobs" ||
      failed+=("gc-stress allocation failures")
  else
    failed+=("gc-stress build")
  fi
fi

if [[ "${DLAM_SKIP_SANITIZE:-0}" != 1 ]]; then
  section "every test, clang, ASan + UBSan, warnings as errors, switch dispatch (build-asan/)"
  # One build for three checks: a second compiler (clang, its warnings as errors; GCC's are
  # the release build's), the switch dispatch (computed goto is the release, GC-stress and
  # TSan builds'), and the sanitizers. clang compiles with ASan + UBSan in less than half
  # of GCC's time. The default target is what ctest runs.
  # (The compilers named on the command line: CC and CXX count only in a new build directory.)
  if configure build-asan -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
       -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLAM_SANITIZE=ON -DDLAM_GC_STRESS=OFF -DDLAM_WERROR=ON \
       -DDLAM_SWITCH_DISPATCH=ON &&
     cmake --build build-asan -j"$jobs"; then
    built
    # exitcode=86: a sanitizer report must not look like dlam's own exit status 1.
    # The lang runner and the API tests run the instrumented dlam, so LeakSanitizer
    # checks every script, limit errors included.
    ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:exitcode=86}" \
    UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:exitcode=86}" \
    DLAM_LANG_TIMEOUT_SCALE=4 \
      ctest --test-dir build-asan --output-on-failure -j"$jobs" || failed+=("asan+ubsan")
  else
    failed+=("asan+ubsan build")
  fi
fi

if [[ "${DLAM_SKIP_TSAN:-0}" != 1 ]]; then
  section "threads under ThreadSanitizer: VMs, interrupts, the Python package's (build-tsan/)"
  # api.python_threads replays the Python package's threading (a GIL, host functions and
  # output taking it back, dlam.interrupt from another thread) in C: a Python interpreter
  # cannot load a TSan-instrumented module.
  if configure build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDLAM_TSAN=ON \
       -DDLAM_WERROR="$werror" &&
     cmake --build build-tsan -j"$jobs" --target api_threads api_limits api_python_threads; then
    built
    TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1:exitcode=86}" \
      ctest --test-dir build-tsan -R 'api[.](threads|limits|python_threads)$' --output-on-failure ||
      failed+=("tsan")
  else
    failed+=("tsan build")
  fi
fi

if ((${#failed[@]})); then
  section "FAILED: ${failed[*]} (total ${SECONDS} s, CPU $(cpu) s)"
  exit 1
fi
section "all passed (total ${SECONDS} s, CPU $(cpu) s)"
