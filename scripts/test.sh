#!/usr/bin/env bash
# The project's test command: checks formatting (scripts/check-format.sh), installs and builds
# (scripts/setup.sh), then runs every Qt Test suite with ctest. Afterwards it sums the test functions the
# suites passed, failed and skipped (from each suite's "Totals:" line), lists the skips, and fails when the
# reference fixtures (VARRATE_SHARED_DIR, default ../shared) are present but a test skipped for want of one.
# Arguments go to ctest (e.g. -R test_codec_).
# --sanitize (first argument): the same suites built with AddressSanitizer and UndefinedBehaviorSanitizer
# (VARRATE_SANITIZE=ON, RelWithDebInfo) into build-sanitize/, run with the options and leak suppressions of
# tests/sanitizer/ (LibTorch's and Qt's own start-up allocations); any report fails the suite.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ "${1:-}" = --sanitize ]; then
  shift
  export BUILD_DIR=${BUILD_DIR:-build-sanitize}
  export CMAKE_ARGS="${CMAKE_ARGS:-} -DVARRATE_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo"
  supp=$PWD/tests/sanitizer
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:halt_on_error=1:detect_stack_use_after_return=0}
  export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$supp/lsan.supp:print_suppressions=0}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp}
fi
scripts/check-format.sh
scripts/setup.sh
cd "${BUILD_DIR:-build}"

# Passed tests' output is kept in full (ctest cuts it to 1 kB by default) so that every suite's skips and
# totals reach Testing/Temporary/LastTest.log.
rc=0
QT_QPA_PLATFORM=offscreen ctest --output-on-failure --timeout 1500 --test-output-size-passed 8000000 \
  --test-output-size-failed 8000000 "$@" || rc=$?
log=Testing/Temporary/LastTest.log
if [ ! -f "$log" ]; then
  echo "test: no $PWD/$log to count skips in" >&2
  exit 1
fi

read -r passed failed skipped < <(awk '/^Totals: [0-9]+ passed, [0-9]+ failed, [0-9]+ skipped/ {
  p += $2; f += $4; s += $6 } END { printf "%d %d %d\n", p, f, s }' "$log")
echo "functions: $passed passed, $failed failed, $skipped skipped"
grep -E '^SKIP +: ' "$log" | sed 's/^/  /' || true

shared=$(sed -n 's/^VARRATE_SHARED_DIR:[A-Z]*=//p' CMakeCache.txt)
shared=${VARRATE_SHARED:-$shared}
if [ -n "$shared" ] && [ -d "$shared/fixtures" ]; then
  missing=$(grep -cE '^SKIP +: .*reference fixture' "$log" || true)
  if [ "$missing" -gt 0 ]; then
    echo "test: FAILED: $shared/fixtures is present but $missing test function(s) skipped for a missing" \
      "reference fixture (see the SKIP lines above)" >&2
    rc=1
  fi
fi
exit $rc
