#!/usr/bin/env bash
# fuzz.sh — builds the libFuzzer targets (tests/fuzz/) with clang, ASan and UBSan in
# build-fuzz/, then fuzzes each target for a fixed time and reports executions, coverage
# and crashes. Exits 1 if any target found a crash, leak, timeout or out-of-memory input.
#
#   tools/fuzz.sh [TARGET...]          TARGET: reader compiler vm (default: all three)
#
# Environment:
#   DLAM_FUZZ_SECONDS=N     seconds per target (default 60)
#   DLAM_FUZZ_BUILD=DIR     build directory (default build-fuzz)
#   DLAM_FUZZ_KEEP_GOING=1  keep fuzzing after a crash (libFuzzer fork mode, one worker),
#                           saving every crashing input, instead of stopping at the first
#   DLAM_FUZZ_MASK_KNOWN=1  work around bugs already reported, to find new ones; today there
#                           is none to mask (it still runs with a 64 MB stack: the compiler's
#                           passes now stop at a measured stack budget, tests/lang/errors/limits/deep_*)
#   DLAM_FUZZ_PERSISTENT=1  fuzz_vm reuses one VM for many inputs (faster; leak detection
#                           off, since LSan cannot see into mimalloc's heap)
#   DLAM_FUZZ_ARGS="..."    extra libFuzzer flags (e.g. "-max_len=2048 -only_ascii=1")
#   DLAM_JOBS=N             parallel build jobs (default 2)
#   DLAM_SKIP_SETUP=1       do not install clang when it is missing
#
# The corpus lives in DIR/fuzz-corpus/TARGET and grows from run to run; it is seeded from
# tests/lang/**/*.dlam, tests/fuzz/regressions/ and the prelude. Crashing inputs go to
# DIR/fuzz-artifacts/TARGET/, logs to DIR/fuzz-logs/TARGET.log. A crashing input is
# reproduced with `DIR/tests/fuzz/dlam_fuzz_TARGET FILE`, and with any compiler by the
# replay programs (`build/tests/fuzz/dlam_replay_TARGET FILE`); once fixed, copy it into
# tests/fuzz/regressions/ so ctest replays it from then on.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$PWD"

seconds="${DLAM_FUZZ_SECONDS:-60}"
build="${DLAM_FUZZ_BUILD:-build-fuzz}"
jobs="${DLAM_JOBS:-2}"
targets=("$@")
((${#targets[@]})) || targets=(reader compiler vm)
for t in "${targets[@]}"; do
  case "$t" in reader | compiler | vm) ;; *)
    echo "fuzz.sh: unknown target '$t' (reader, compiler, vm)" >&2
    exit 2
    ;;
  esac
done

section() { printf '\n==== %s ====\n' "$*"; }

# clang with libFuzzer: Debian 12's `clang` (clang-14) with libclang-rt-14-dev.
have_libfuzzer() {
  command -v clang++ >/dev/null 2>&1 || return 1
  local dir
  dir="$(mktemp -d)"
  printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }\n' >"$dir/t.cpp"
  clang++ -fsanitize=fuzzer,address "$dir/t.cpp" -o "$dir/t" >/dev/null 2>&1
  local ok=$?
  rm -rf "$dir"
  return $ok
}
if ! have_libfuzzer; then
  if [[ "${DLAM_SKIP_SETUP:-0}" == 1 ]]; then
    echo "fuzz.sh: clang with libFuzzer not found (apt-get install clang libclang-rt-14-dev)" >&2
    exit 2
  fi
  echo "fuzz.sh: installing clang and libclang-rt-14-dev" >&2
  sudo=()
  [[ "$(id -u)" -ne 0 ]] && sudo=(sudo)
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    clang libclang-rt-14-dev </dev/null
  have_libfuzzer || { echo "fuzz.sh: clang cannot build a libFuzzer program" >&2; exit 2; }
fi

section "build ($build: clang, libFuzzer, ASan + UBSan)"
CC=clang CXX=clang++ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link \
  -DDLAM_FUZZ=ON -DDLAM_SANITIZE=ON -DDLAM_GC_STRESS=OFF >/dev/null
cmake --build "$build" -j"$jobs" --target $(printf 'dlam_fuzz_%s ' "${targets[@]}")

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

summary=()
found=0
for t in "${targets[@]}"; do
  section "fuzz $t for ${seconds} s"
  corpus="$build/fuzz-corpus/$t"
  artifacts="$build/fuzz-artifacts/$t"
  log="$build/fuzz-logs/$t.log"
  mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
  # Seeds: every lang script, the regression inputs and the prelude, except large files
  # (they would raise libFuzzer's default -max_len and slow every mutation).
  while IFS= read -r -d '' f; do
    size=$(stat -c %s "$f")
    ((size <= 16384)) || continue
    cp -f "$f" "$corpus/seed_$(printf '%s' "${f#"$root"/}" | tr '/' '_')"
  done < <(find "$root/tests/lang" "$root/tests/fuzz/regressions" "$root/stdlib/prelude.dlam" \
    -type f \( -name '*.dlam' -o -path '*/regressions/*' \) -print0)

  flags=(-max_total_time="$seconds" -dict="$root/tests/fuzz/dlam.dict" -timeout=20
    -rss_limit_mb=3072 -malloc_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/")
  # A persistent VM keeps objects alive between inputs, and LeakSanitizer cannot see the
  # pointers stored in the arena's pages (mimalloc memory): its leak reports would be false.
  # fuzz_compiler always shares one VM (an input whose compilation grows one of the VM's
  # vectors for good, as define-syntax's write barrier does, made libFuzzer check for
  # leaks and report every compiled proto); leaks in the compiler are found by the ASan
  # build's tests and replay programs, whose VMs end normally.
  if [[ "${DLAM_FUZZ_PERSISTENT:-0}" == 1 || "$t" == compiler ]]; then
    flags+=(-detect_leaks=0)
  fi
  if [[ "${DLAM_FUZZ_KEEP_GOING:-0}" == 1 ]]; then
    flags+=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
  fi
  # shellcheck disable=SC2206
  flags+=(${DLAM_FUZZ_ARGS:-})
  before=$(find "$artifacts" -type f | wc -l)
  set +e
  (
    # (Once: the expander overflowed 8 MB under ASan before its nesting limit.)
    [[ "${DLAM_FUZZ_MASK_KNOWN:-0}" == 1 ]] && ulimit -s 65536
    exec "$build/tests/fuzz/dlam_fuzz_$t" "${flags[@]}" "$corpus"
  ) >"$log" 2>&1
  rc=$?
  set -e
  after=$(find "$artifacts" -type f | wc -l)
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
  rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
  if [[ -z "$execs" ]]; then  # fork mode prints no final stats: take the last status line
    execs=$(grep -oE '^#[0-9]+' "$log" | tail -1 | tr -d '#' || true)
    rate=$(grep -oE 'exec/s:? [0-9]+' "$log" | tail -1 | grep -o '[0-9]*$' || true)
  fi
  cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -1 || true)
  corp=$(find "$corpus" -type f | wc -l)
  line="$t: ${execs:-?} executions, ${rate:-?} exec/s, ${cov:-cov ?}, corpus $corp files, exit $rc"
  if ((after > before)) || { ((rc != 0)) && [[ "${DLAM_FUZZ_KEEP_GOING:-0}" != 1 ]]; }; then
    found=1
    line+=", NEW FINDINGS: $((after - before)) (see $artifacts, $log)"
    grep -E '^==[0-9]+==ERROR|^SUMMARY|dlam fuzz invariant broken|deadly signal|Test unit written' "$log" | head -20 || true
  fi
  summary+=("$line")
done

section "summary"
printf '%s\n' "${summary[@]}"
exit "$found"
