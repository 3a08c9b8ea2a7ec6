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

if [ -z "${VARRATE_SKIP_APT:-}" ]; then
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
fi

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DVARRATE_GUI="$GUI" ${CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j "$JOBS"
