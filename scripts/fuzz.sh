#!/usr/bin/env bash
# Fuzzes the parsers of outside data (tests/fuzz/, one target per parser): builds the libFuzzer targets with
# clang 14, AddressSanitizer and UndefinedBehaviorSanitizer into build-fuzz/ (VARRATE_FUZZ=ON: the libraries
# and the targets only, no app, no Qt tests) and runs each for SECONDS with its committed corpus and the JSON
# dictionary, then prints the executions per target (libFuzzer's final stats).
# New inputs go to build-fuzz/corpus/<target>/ (the committed seeds stay small). A crash (or leak) is
# minimised and copied to tests/fuzz/corpus/<target>/regress-<hash>: commit it with the fix, and ctest's
# fuzz_replay replays it on every build. Timeouts and out-of-memory inputs are only reported (a slow
# input would slow every replay); they stay in build-fuzz/artifacts/<target>/<time>/.
# Usage: scripts/fuzz.sh [TARGET|all] [SECONDS]   (default: all 60; JOBS=N builds with N jobs, default 1;
#        RUNS=N stops each target after N executions instead, e.g. RUNS=1000000 for the release check)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
which=${1:-all}
seconds=${2:-60}
build=${FUZZ_BUILD_DIR:-build-fuzz}
mapfile -t all < <(sed -n '/^set(VARRATE_FUZZ_TARGETS$/,/)/p' tests/fuzz/CMakeLists.txt | tr -d ' )' | grep -v '^set(')
if [ "$which" = all ]; then
  targets=("${all[@]}")
elif printf '%s\n' "${all[@]}" | grep -qx "$which"; then
  targets=("$which")
else
  echo "fuzz: unknown target '$which' (targets: ${all[*]})" >&2
  exit 2
fi

# clang 14 and its runtimes (libFuzzer, the sanitizers); the rest is what scripts/setup.sh installs.
scripts/apt-install.sh fuzz clang-14 libclang-rt-14-dev

# The libraries get the sanitizers and the fuzzer's coverage hooks (fuzzer-no-link); the targets link
# libFuzzer's main (tests/fuzz/CMakeLists.txt). LibTorch's prebuilt libraries stay uninstrumented.
flags="-O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined"
flags+=" -fsanitize=fuzzer-no-link"
cmake -S . -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=None -DVARRATE_GUI=OFF \
  -DVARRATE_TESTS=OFF -DVARRATE_FUZZ=ON "-DCMAKE_CXX_FLAGS=$flags" >/dev/null
ninja -C "$build" -j "${JOBS:-1}" "${targets[@]/#/fuzz_}"

summary=()
found=0
if [ -n "${RUNS:-}" ]; then limit=(-runs="$RUNS"); else limit=(-max_total_time="$seconds"); fi
for t in "${targets[@]}"; do
  # One artifact folder per run, so that a summary names this run's findings only.
  work="$build/corpus/$t" artifacts="$build/artifacts/$t/$(date +%Y%m%d-%H%M%S)/"
  mkdir -p "$work" "$artifacts"
  log="$build/fuzz-$t.log"
  echo "== $t: ${RUNS:+$RUNS executions}${RUNS:-${seconds}s} (log: $log)"
  rc=0
  "$build/bin/fuzz_$t" "$work" "tests/fuzz/corpus/$t" -dict=tests/fuzz/dict/json.dict \
    "${limit[@]}" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$artifacts" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  summary+=("$(printf '%-20s %12s executions %8s exec/s  exit %s' "$t" "${execs:-?}" "${rate:-?}" "$rc")")
  for a in "$artifacts"crash-* "$artifacts"leak-*; do
    [ -e "$a" ] || continue
    found=1
    min="$a.min"
    "$build/bin/fuzz_$t" -minimize_crash=1 -max_total_time=60 -exact_artifact_path="$min" "$a" \
      >>"$build/minimize-$t.log" 2>&1 || true
    [ -s "$min" ] || cp "$a" "$min"
    dest="tests/fuzz/corpus/$t/regress-$(sha1sum <"$min" | cut -c1-12)"
    cp "$min" "$dest"
    summary+=("  finding: $a -> $dest")
    grep -m1 -E 'ERROR: (AddressSanitizer|libFuzzer|LeakSanitizer)|runtime error' "$log" | sed 's/^/    /' || true
  done
  for a in "$artifacts"timeout-* "$artifacts"oom-* "$artifacts"slow-unit-*; do
    [ -e "$a" ] && summary+=("  slow/oom input (not copied): $a")
  done
done
printf '%s\n' "${summary[@]}"
exit $found
