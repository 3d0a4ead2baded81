#!/usr/bin/env bash
# fuzz.sh — builds the libFuzzer targets (tests/fuzz/) with clang, ASan and UBSan in
# build-fuzz/, then fuzzes each target for a fixed time and reports executions, coverage
# and crashes. Exits 1 if any target found a crash, leak, timeout or out-of-memory input.
#
#   tools/fuzz.sh [TARGET...]                    TARGET: reader compiler vm api config data
#   tools/fuzz.sh --campaign HOURS [TARGET...]   (default: all six)
#
# A campaign splits HOURS evenly over the targets and runs them in turn (one fuzzer
# process at a time), then for each target: minimizes every crashing input it found
# (-minimize_crash) into tests/fuzz/regressions/ (the text targets reader, compiler, vm)
# or tests/fuzz/regressions-TARGET/ (the others), where ctest replays it; merges the
# corpus into the small committed seed corpus tests/fuzz/corpus/TARGET/ for the byte-format
# targets (api, config, data: -merge=1 keeps only inputs that add coverage; the text
# targets are seeded from tests/lang instead); and prints executions, exec/s, coverage
# (edges and features) and the CPU seconds used.
#
# Environment:
#   DLAM_FUZZ_SECONDS=N     seconds per target (default 60; a campaign computes it)
#   DLAM_FUZZ_BUILD=DIR     build directory (default build-fuzz)
#   DLAM_FUZZ_KEEP_GOING=1  keep fuzzing after a crash (libFuzzer fork mode, one worker),
#                           saving every crashing input, instead of stopping at the first
#                           (a campaign instead restarts the fuzzer after each finding)
#   DLAM_FUZZ_MASK_KNOWN=1  work around bugs already reported, to find new ones; today there
#                           is none to mask (it still runs with a 64 MB stack: the compiler's
#                           passes now stop at a measured stack budget, tests/lang/errors/limits/deep_*)
#   DLAM_FUZZ_FRESH=1       a new VM for every input (slow; to confirm that a finding does
#                           not depend on the inputs before it: by default one VM serves
#                           thousands of inputs, reset between them)
#   DLAM_FUZZ_ARGS="..."    extra libFuzzer flags (e.g. "-max_len=2048 -only_ascii=1")
#   DLAM_FUZZ_SANITIZE=0    build without ASan + UBSan (in build-fuzz-fast unless DLAM_FUZZ_BUILD
#                           says otherwise): 4-7x the executions per second, but a memory
#                           error shows only if it crashes (the regressions it finds are replayed
#                           under ASan by the test suite's ASan build)
#   DLAM_FUZZ_ENTROPIC=1    libFuzzer's entropic power schedule (off by default: its bookkeeping
#                           of dlam's ~65 000 features halved the executions per second, and
#                           40-second runs without it reached more coverage, not less)
#   DLAM_JOBS=N             parallel build jobs (default 2)
#   DLAM_SKIP_SETUP=1       do not install clang when it is missing
#
# The corpus lives in DIR/fuzz-corpus/TARGET and grows from run to run; it is seeded from
# tests/lang/**/*.dlam, tests/fuzz/regressions/ and the prelude (text targets), and from
# tests/fuzz/corpus/TARGET/. Crashing inputs go to DIR/fuzz-artifacts/TARGET/, logs to
# DIR/fuzz-logs/TARGET.log. A crashing input is reproduced with
# `DIR/tests/fuzz/dlam_fuzz_TARGET FILE`, and with any compiler by the replay programs
# (`build/tests/fuzz/dlam_replay_TARGET FILE`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root="$PWD"

seconds="${DLAM_FUZZ_SECONDS:-60}"
sanitize="${DLAM_FUZZ_SANITIZE:-1}"
if [[ "$sanitize" == 0 ]]; then build="${DLAM_FUZZ_BUILD:-build-fuzz-fast}"; else build="${DLAM_FUZZ_BUILD:-build-fuzz}"; fi
jobs="${DLAM_JOBS:-2}"
campaign=0
if [[ "${1:-}" == --campaign ]]; then
  campaign=1
  hours="${2:?fuzz.sh: --campaign needs a number of hours}"
  shift 2
fi
all_targets=(reader compiler vm api config data)
targets=("$@")
((${#targets[@]})) || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  case "$t" in reader | compiler | vm | api | config | data) ;; *)
    echo "fuzz.sh: unknown target '$t' (${all_targets[*]})" >&2
    exit 2
    ;;
  esac
done
if ((campaign)); then
  seconds=$(python3 -c "import sys; print(max(10, int(float(sys.argv[1]) * 3600 / int(sys.argv[2]))))" "$hours" "${#targets[@]}")
fi
is_text() { [[ "$1" == reader || "$1" == compiler || "$1" == vm ]]; }

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

if [[ "$sanitize" == 0 ]]; then
  section "build ($build: clang, libFuzzer, no sanitizer)"
else
  section "build ($build: clang, libFuzzer, ASan + UBSan)"
fi
# Coverage everywhere but the collector (tests/fuzz/coverage_ignore.txt says why).
cov_flags="-fsanitize=fuzzer-no-link -fsanitize-coverage-ignorelist=$root/tests/fuzz/coverage_ignore.txt"
launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
CC=clang CXX=clang++ cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ "${launcher[@]}" \
  -DCMAKE_C_FLAGS="$cov_flags" -DCMAKE_CXX_FLAGS="$cov_flags" \
  -DDLAM_FUZZ=ON -DDLAM_SANITIZE="$([[ "$sanitize" == 0 ]] && echo OFF || echo ON)" \
  -DDLAM_GC_STRESS=OFF >/dev/null
cmake --build "$build" -j"$jobs" --target $(printf 'dlam_fuzz_%s ' "${targets[@]}")

# A smaller quarantine and no filling of new blocks: a third of the time of a small input
# went to the kernel's page faults and memset otherwise. Two frames of the stack of each
# allocation and free, not 30: unwinding and storing them took a sixth of the vm and
# compiler targets' time (the compiler and the transform allocate many small nodes). A
# report still gives the full stack of the bad access; to see where the memory was
# allocated and freed, rerun the input with ASAN_OPTIONS=malloc_context_size=30.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1:quarantine_size_mb=64:max_malloc_fill_size=0:malloc_context_size=2}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

summary=()
found=0
for t in "${targets[@]}"; do
  section "fuzz $t for ${seconds} s"
  corpus="$build/fuzz-corpus/$t"
  artifacts="$build/fuzz-artifacts/$t"
  log="$build/fuzz-logs/$t.log"
  mkdir -p "$corpus" "$artifacts" "$(dirname "$log")"
  # Seeds: for the text targets every lang script (but the heavy ones: 10^6-element data,
  # seconds per run under ASan), the regression inputs and the prelude, except large files
  # (they would raise libFuzzer's default -max_len and slow every mutation); for all, the
  # committed corpus and regressions of the target.
  seeds=()
  if is_text "$t"; then
    seeds+=("$root/tests/lang" "$root/tests/fuzz/regressions" "$root/stdlib/prelude.dlam")
  else
    [[ -d "$root/tests/fuzz/regressions-$t" ]] && seeds+=("$root/tests/fuzz/regressions-$t")
    [[ "$t" == config ]] && seeds+=("$root/tests/lang" "$root/tests/fuzz/repl_limits.lua")
  fi
  [[ -d "$root/tests/fuzz/corpus/$t" ]] && seeds+=("$root/tests/fuzz/corpus/$t")
  while IFS= read -r -d '' f; do
    size=$(stat -c %s "$f")
    ((size <= 16384)) || continue
    grep -q '^; tags:.*heavy' "$f" && continue
    cp -f "$f" "$corpus/seed_$(printf '%s' "${f#"$root"/}" | tr '/' '_')"
  done < <(
    if [[ "$t" == config ]]; then pick=(-name '*.lua' -o -path '*/regressions*' -o -path '*/corpus/*')
    else pick=(-name '*.dlam' -o -path '*/regressions*' -o -path '*/corpus/*'); fi
    ((${#seeds[@]})) && find "${seeds[@]}" -type f \( "${pick[@]}" \) -print0
  )

  flags=(-timeout=20
    -rss_limit_mb=3072 -malloc_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$artifacts/")
  # Text inputs up to 4 KB: 499 of the 530 lang scripts fit whole (longer seeds are cut,
  # which leaves unbalanced parentheses); longer inputs cost more per execution than they
  # add coverage.
  is_text "$t" && flags+=(-dict="$root/tests/fuzz/dlam.dict" -max_len=4096)
  [[ "${DLAM_FUZZ_ENTROPIC:-0}" == 1 ]] || flags+=(-entropic=0)
  [[ "$t" == api ]] && flags+=(-max_len=1024)
  # A persistent VM keeps objects alive between inputs, and LeakSanitizer cannot see the
  # pointers stored in the arena's pages (mimalloc memory): its leak reports would be false.
  # fuzz_compiler always shares one VM (an input whose compilation grows one of the VM's
  # vectors for good, as define-syntax's write barrier does, made libFuzzer check for
  # leaks and report every compiled proto); leaks in the compiler are found by the ASan
  # build's tests and replay programs, whose VMs end normally.
  # Every target but reader and config keeps its VM between inputs (without
  # DLAM_FUZZ_FRESH=1).
  if [[ "${DLAM_FUZZ_FRESH:-0}" != 1 && "$t" != reader && "$t" != config ]] || [[ "$t" == compiler ]]; then
    flags+=(-detect_leaks=0)
  fi
  if [[ "${DLAM_FUZZ_KEEP_GOING:-0}" == 1 ]] && ((!campaign)); then
    flags+=(-fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
  fi
  # shellcheck disable=SC2206
  flags+=(${DLAM_FUZZ_ARGS:-})
  before=$(find "$artifacts" -type f | wc -l)
  cpu0=$(awk '{print $14 + $15 + $16 + $17}' /proc/$$/stat)
  start=$(date +%s)
  execs=0 rate="" cov="" rc=0 runs=0
  : >"$log"
  # A campaign restarts the fuzzer after a finding until the target's time is spent (at
  # most 20 times); plain mode runs it once.
  while :; do
    left=$((seconds - ($(date +%s) - start)))
    ((left >= 5)) || break
    set +e
    (
      # (Once: the expander overflowed 8 MB under ASan before its nesting limit.)
      [[ "${DLAM_FUZZ_MASK_KNOWN:-0}" == 1 ]] && ulimit -s 65536
      exec "$build/tests/fuzz/dlam_fuzz_$t" "${flags[@]}" -max_total_time="$left" "$corpus"
    ) >"$log.run" 2>&1
    rc=$?
    set -e
    cat "$log.run" >>"$log"
    n=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log.run" | tail -1 | grep -o '[0-9]*$' || true)
    [[ -n "$n" ]] || n=$(grep -oE '^#[0-9]+' "$log.run" | tail -1 | tr -d '#' || true)
    execs=$((execs + ${n:-0}))
    c=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$log.run" | tail -1 || true)
    [[ -n "$c" ]] && cov=$c
    runs=$((runs + 1))
    ((campaign && rc != 0 && runs < 20)) || break
  done
  rm -f "$log.run"
  wall=$(($(date +%s) - start))
  ((wall > 0)) && rate=$((execs / wall))
  # CPU seconds of the fuzzer (the machine may be shared: exec/s is per wall second).
  cpu=$(awk -v c0="$cpu0" -v hz="$(getconf CLK_TCK)" '{printf "%.0f", ($14 + $15 + $16 + $17 - c0) / hz}' /proc/$$/stat)
  after=$(find "$artifacts" -type f | wc -l)
  corp=$(find "$corpus" -type f | wc -l)
  per_cpu="?"
  [[ -n "$execs" && "${cpu:-0}" -gt 0 ]] && per_cpu=$((execs / cpu))
  line="$t: ${execs:-?} executions, ${rate:-?} exec/s (${per_cpu} per CPU second, ${cpu:-?} CPU s), ${cov:-cov ?}, corpus $corp files, exit $rc"
  if ((after > before)) || { ((rc != 0)) && [[ "${DLAM_FUZZ_KEEP_GOING:-0}" != 1 ]] && ((!campaign)); }; then
    found=1
    line+=", NEW FINDINGS: $((after - before)) (see $artifacts, $log)"
    grep -E '^==[0-9]+==ERROR|^SUMMARY|dlam fuzz invariant broken|deadly signal|Test unit written' "$log" | head -20 || true
  fi
  summary+=("$line")
  if ((campaign)); then
    # Every crashing input, minimized, into the regressions replayed by ctest.
    if is_text "$t"; then regdir="$root/tests/fuzz/regressions"; else regdir="$root/tests/fuzz/regressions-$t"; fi
    for a in "$artifacts"/crash-* "$artifacts"/leak-* "$artifacts"/timeout-* "$artifacts"/oom-*; do
      # (an input an earlier campaign took already is renamed NAME.done: not again)
      [[ -f "$a" && "$a" != *.done ]] || continue
      kind=$(basename "$a" | cut -d- -f1)
      min="$artifacts/min-$(basename "$a")"
      if [[ "$kind" == crash || "$kind" == leak ]]; then
        "$build/tests/fuzz/dlam_fuzz_$t" -minimize_crash=1 -runs=20000 -max_total_time=120 -detect_leaks=0 \
          -exact_artifact_path="$min" "$a" >"$log.minimize" 2>&1 || true
      fi
      [[ -f "$min" ]] || cp "$a" "$min"
      mkdir -p "$regdir"
      dest="$regdir/found_${t}_${kind}_$(sha1sum "$min" | cut -c1-12)"
      [[ -f "$dest" ]] || { cp "$min" "$dest"; echo "  $t: $kind -> ${dest#"$root"/} (fix it before committing)"; }
      mv "$a" "$a.done"
    done
    # The byte-format targets keep a small committed corpus: the inputs that add coverage.
    if ! is_text "$t"; then
      mkdir -p "$root/tests/fuzz/corpus/$t"
      "$build/tests/fuzz/dlam_fuzz_$t" -merge=1 -detect_leaks=0 -timeout=20 -rss_limit_mb=3072 \
        "$root/tests/fuzz/corpus/$t" "$corpus" >"$log.merge" 2>&1 || true
      echo "  $t: committed corpus tests/fuzz/corpus/$t: $(find "$root/tests/fuzz/corpus/$t" -type f | wc -l) files, $(cat "$root"/tests/fuzz/corpus/"$t"/* | wc -c) bytes"
    fi
  fi
done

section "summary"
printf '%s\n' "${summary[@]}"
exit "$found"
