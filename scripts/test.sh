#!/usr/bin/env bash
# The project's test command: installs and builds (scripts/setup.sh), then runs every Qt Test suite with ctest.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/setup.sh
cd "${BUILD_DIR:-build}"
QT_QPA_PLATFORM=offscreen ctest --output-on-failure --timeout 1500 "$@"
