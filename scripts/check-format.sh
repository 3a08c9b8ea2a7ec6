#!/usr/bin/env bash
# Fails when a tracked C++ source or header differs from what clang-format makes of it (.clang-format at the
# repository root); run `clang-format -i FILE` to fix. Installs Debian's clang-format when it is missing
# (unless VARRATE_SKIP_APT is set). Usage: scripts/check-format.sh [FILE...] (default: every tracked *.h/*.cpp)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

command -v clang-format >/dev/null || scripts/apt-install.sh check-format clang-format
if ! command -v clang-format >/dev/null; then
  echo "check-format: clang-format is not installed (apt-get install clang-format)" >&2
  exit 1
fi

if [ $# -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(git ls-files '*.h' '*.cpp')
fi
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "check-format: ${#bad[@]} file(s) differ from .clang-format ($(clang-format --version | head -1)):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  echo "check-format: fix with: clang-format -i ${bad[*]}" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files follow .clang-format"
