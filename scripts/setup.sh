#!/usr/bin/env bash
# Installs what VarRate Studio needs on Debian 12 (idempotent), then configures and builds Release with Ninja
# into build/ (binaries in build/bin/). Options via environment:
#   VARRATE_GUI=OFF     build the libraries and the CLI only (no Qt Widgets/Charts)
#   VARRATE_SKIP_APT=1  do not touch system packages
#   BUILD_DIR=...       another build directory
#   JOBS=N              parallel build jobs (default: cores)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

GUI=${VARRATE_GUI:-ON}
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}

packages=(build-essential cmake ninja-build pkgconf git clang-format
          libtorch-dev libopenblas0-pthread libeigen3-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
          libpcre2-dev libutf8proc-dev libcli11-dev qt6-base-dev)
if [ "$GUI" = ON ]; then
  packages+=(qt6-charts-dev qt6-svg-dev libqt6opengl6-dev libgl-dev libxkbcommon-dev fonts-dejavu-core)
fi

scripts/apt-install.sh setup "${packages[@]}"

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DVARRATE_GUI="$GUI" ${CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j "$JOBS"
