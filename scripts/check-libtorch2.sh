#!/usr/bin/env bash
# Builds VarRate Studio against the LibTorch 2.x of PyPI's torch wheel (the default Linux wheel, with CUDA 12),
# with CUDA on, and runs the CPU test suites of that build: the LibTorch 2.x code paths (SDPA and friends) that
# the Debian build (LibTorch 1.13, CPU) never compiles. CI stays on the Debian build; this is a manual check.
#
#   1. a virtual environment outside the repository (made once, then reused) with the torch of
#      scripts/torch2-requirements.txt (the one place its version is pinned);
#   2. its LibTorch (CMake prefix), C++ string ABI, CUDA and cuDNN versions, printed;
#   3. a separate build directory (Ninja, Release, GUI off, VARRATE_CUDA=ON), built with every target;
#   4. ctest on it (on the CPU when the machine has no GPU), with the suites' test-function totals.
#
# Usage: scripts/check-libtorch2.sh [--gui] [-h] [-- CTEST_ARGS...]
#   --gui   also try the desktop app against the wheel (same build directory, VARRATE_GUI=ON) and say whether its
#           C++ string ABI can link Debian's Qt; runs the gui_test_* suites when it links
# Environment:
#   VARRATE_TORCH2_VENV  the virtual environment (default $HOME/.cache/varrate/torch2-venv)
#   VARRATE_TORCH2_REQUIREMENTS  the pin file (default scripts/torch2-requirements.txt; the GUI build with CUDA:
#                        scripts/torch2-gui-requirements.txt, torch 2.7.1, the first wheel with the C++11 ABI)
#   BUILD_DIR            the build directory (default build-torch2, ignored by git)
#   JOBS                 parallel build jobs (default: cores)
#   VARRATE_SHARED_DIR   the reference fixtures (default: CMake's, ../shared beside the repository)
#   PYTHON               the interpreter that makes the environment (default python3)
# It needs what scripts/setup.sh installs (cmake, ninja, Qt 6, spdlog, ...; not Debian's libtorch-dev) and a
# CUDA toolkit with nvcc: the wheel's CMake config (Caffe2's public/cuda.cmake) refuses to load without one, even
# though nothing here is compiled by nvcc (any toolkit version works; the binaries use the wheel's CUDA 12).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD

say() { echo "check-libtorch2: $*"; }
die() {
  echo "check-libtorch2: error: $*" >&2
  exit 1
}

gui=0
ctest_args=()
while [ $# -gt 0 ]; do
  case $1 in
    --gui) gui=1 ;;
    -h | --help)
      sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
      exit 0
      ;;
    --)
      shift
      ctest_args=("$@")
      break
      ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done

venv=${VARRATE_TORCH2_VENV:-$HOME/.cache/varrate/torch2-venv}
build=${BUILD_DIR:-build-torch2}
jobs=${JOBS:-$(nproc)}
python=${PYTHON:-python3}
requirements=${VARRATE_TORCH2_REQUIREMENTS:-scripts/torch2-requirements.txt}
[ -f "$requirements" ] || die "no pin file $requirements"
pin=$(sed -n 's/^torch==\([^ ;#]*\).*/\1/p' "$requirements")
[ -n "$pin" ] || die "$requirements pins no torch==VERSION"

case $(realpath -m "$venv")/ in
  "$root"/*) die "the virtual environment must lie outside the repository (VARRATE_TORCH2_VENV=$venv)" ;;
esac
for tool in cmake ninja "$python"; do
  command -v "$tool" >/dev/null || die "$tool is not installed (scripts/setup.sh installs cmake and ninja)"
done
if ! command -v nvcc >/dev/null; then
  for d in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
    if [ -n "$d" ] && [ -x "$d/bin/nvcc" ]; then
      export PATH=$d/bin:$PATH
      break
    fi
  done
fi
command -v nvcc >/dev/null ||
  die "no nvcc: the torch wheel's CMake config (Caffe2 public/cuda.cmake) needs a CUDA toolkit to load, even" \
    "for a build that compiles no CUDA code. Install one (any version; put its bin/ on PATH or set CUDA_HOME)."
nvcc_version=$(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')

# 1. The environment.
if [ ! -x "$venv/bin/python" ]; then
  say "creating the virtual environment $venv"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv" || die "'$python -m venv' failed (Debian: apt-get install python3-venv)"
fi
vpy=$venv/bin/python
installed=$("$vpy" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null || true)
if [ "${installed%%+*}" != "$pin" ]; then
  say "installing torch==$pin into $venv (${installed:+replacing $installed; }about 3 GB with its nvidia-* wheels)"
  "$vpy" -m pip install --disable-pip-version-check -q -r "$requirements" ||
    die "pip could not install $requirements into $venv"
fi

# 2. What the wheel is. (NumPy is not needed; silence torch's warning about it.)
read -r torch_version torch_cuda torch_cudnn torch_abi torch_prefix < <("$vpy" - <<'PY' 2>/dev/null
import warnings
warnings.filterwarnings("ignore")
import torch
print(torch.__version__, torch.version.cuda or "none", torch.backends.cudnn.version() or "none",
      int(torch._C._GLIBCXX_USE_CXX11_ABI), torch.utils.cmake_prefix_path)
PY
) || die "could not import torch from $venv"
abi_word() { [ "$1" = 1 ] && echo "C++11 ABI (_GLIBCXX_USE_CXX11_ABI=1)" || echo "pre-C++11 ABI (_GLIBCXX_USE_CXX11_ABI=0)"; }
say "torch $torch_version: CUDA $torch_cuda, cuDNN $torch_cudnn, $(abi_word "$torch_abi")"
say "LibTorch CMake prefix: $torch_prefix"
say "CUDA toolkit for its CMake config: nvcc $nvcc_version ($(command -v nvcc))"
[ "$torch_cuda" != none ] || die "torch $torch_version has no CUDA; VARRATE_CUDA=ON needs the CUDA wheel"

# The C++ string ABI of Debian's compiled C++ libraries that we link (Qt, and spdlog/fmt unless header-only).
lib_abi() {  # 1 when the library exports C++11-ABI symbols (std::__cxx11 arguments, [abi:cxx11] results), else 0
  local f
  f=$(ldconfig -p | awk -v n="$1" '$1 == n { print $NF; exit }')
  [ -n "$f" ] || {
    echo "?"
    return
  }
  # (a count, not grep -q: under pipefail, grep -q ending the pipe early would fail nm with SIGPIPE)
  if [ "$(nm -D --defined-only "$f" 2>/dev/null | grep -c 'cxx11' || true)" -gt 0 ]; then echo 1; else echo 0; fi
}
qt_abi=$(lib_abi libQt6Core.so.6)

# 3. Configure and build.
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DVARRATE_CUDA=ON -DCMAKE_PREFIX_PATH="$torch_prefix"
  -DTorch_DIR="$torch_prefix/Torch")
command -v ccache >/dev/null && cmake_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
[ -n "${VARRATE_SHARED_DIR:-}" ] && cmake_args+=(-DVARRATE_SHARED_DIR="$VARRATE_SHARED_DIR")

configure() {  # configure GUI=ON|OFF LOG
  cmake -S . -B "$build" "${cmake_args[@]}" -DVARRATE_GUI="$1" >"$2" 2>&1 || {
    grep -E -A12 'CMake Error' "$2" | head -60 >&2 || true
    die "configuring $build failed (the whole log: $2)"
  }
  grep -E '^-- (VarRate:|LibTorch|Found nvtx3)' "$2" | sed 's/^-- /  /'
}
# A build directory configured for another LibTorch keeps that one's libraries in its cache: start it afresh.
if [ -f "$build/CMakeCache.txt" ]; then
  cached=$(sed -n 's/^Torch_DIR:[A-Z]*=//p' "$build/CMakeCache.txt")
  if [ -n "$cached" ] && [ "$(realpath -m "$cached")" != "$(realpath -m "$torch_prefix/Torch")" ]; then
    say "$build was configured for the LibTorch at $cached: configuring it afresh"
    rm -rf "$build/CMakeCache.txt" "$build/CMakeFiles"
  fi
fi
mkdir -p "$build"
log_dir=$build/check-libtorch2
mkdir -p "$log_dir"
say "configuring $build (Ninja, Release, GUI off, VARRATE_CUDA=ON)"
t0=$SECONDS
configure OFF "$log_dir/configure.log"
configure_s=$((SECONDS - t0))

say "building every target with -j$jobs (log: $log_dir/build.log)"
t0=$SECONDS
if ! cmake --build "$build" -j "$jobs" >"$log_dir/build.log" 2>&1; then
  grep -E -B2 -A6 'error:|undefined reference' "$log_dir/build.log" | head -80 >&2 || true
  die "the build failed after $((SECONDS - t0)) s (the whole log: $log_dir/build.log)"
fi
build_s=$((SECONDS - t0))
say "built in ${build_s} s"

# 4. The tests. The Debian packages are not made from this build (they depend on Debian's LibTorch).
count_totals() {  # LOG -> "passed failed skipped" over the suites' Qt Test "Totals:" lines
  awk '/^Totals: [0-9]+ passed, [0-9]+ failed, [0-9]+ skipped/ { p += $2; f += $4; s += $6 }
       END { printf "%d %d %d\n", p, f, s }' "$1"
}
run_ctest() {  # run_ctest NAME ARGS... ; sets ctest_rc, ctest_line, totals
  ctest_rc=0
  (cd "$build" && QT_QPA_PLATFORM=offscreen ctest --output-on-failure --timeout 1500 \
    --test-output-size-passed 8000000 --test-output-size-failed 8000000 "${@:2}") \
    >"$log_dir/ctest-$1.log" 2>&1 || ctest_rc=$?
  ctest_line=$(grep -E 'tests passed, [0-9]+ tests failed out of' "$log_dir/ctest-$1.log" | tail -1 || true)
  cp "$build/Testing/Temporary/LastTest.log" "$log_dir/LastTest-$1.log" 2>/dev/null || true
  totals=$(count_totals "$log_dir/LastTest-$1.log" 2>/dev/null || echo "0 0 0")
  grep -E '^ *[0-9]+/[0-9]+ Test +#' "$log_dir/ctest-$1.log" | sed 's/^ */  /' || true
}
say "running the test suites (log: $log_dir/ctest-cpu.log)"
t0=$SECONDS
run_ctest cpu -E '^(package_build|test_app_package)$' "${ctest_args[@]}"
test_s=$((SECONDS - t0))
cpu_rc=$ctest_rc cpu_line=$ctest_line
read -r passed failed skipped <<<"$totals"
if [ "$cpu_rc" -ne 0 ]; then
  grep -E '^(FAIL!|   Loc:|   Actual|   Expected)' "$log_dir/ctest-cpu.log" | head -40 >&2 || true
fi
grep -E '^SKIP +: ' "$log_dir/LastTest-cpu.log" | sed 's/^/  /' || true

# 5. Optionally the GUI.
gui_result="not tried (--gui tries it)"
gui_rc=0
if [ $gui = 1 ]; then
  need=$torch_abi
  say "GUI: the wheel uses the $(abi_word "$torch_abi"); Debian's Qt 6 uses the" \
    "$([ "$qt_abi" = 1 ] && echo "C++11 ABI" || echo "pre-C++11 ABI") (libQt6Core.so.6's exported std::string functions)"
  if [ "$qt_abi" != "?" ] && [ "$qt_abi" != "$need" ]; then
    say "GUI: mismatch: our code is compiled with the LibTorch's _GLIBCXX_USE_CXX11_ABI=$need, so a call into" \
      "Qt that passes or returns a std::string (QByteArray::toStdString/fromStdString, the two that Debian's Qt 6" \
      "exports; QString::toStdString calls the first) finds no symbol of that ABI in libQt6Core.so."
  fi
  say "GUI: configuring $build with VARRATE_GUI=ON and building (log: $log_dir/build-gui.log)"
  configure ON "$log_dir/configure-gui.log" >/dev/null
  t0=$SECONDS
  if cmake --build "$build" -j "$jobs" >"$log_dir/build-gui.log" 2>&1; then
    say "GUI: built in $((SECONDS - t0)) s; running gui_test_*"
    run_ctest gui -R '^gui_test_'
    read -r gp gf gs <<<"$totals"
    gui_result="linked with the $(abi_word "$torch_abi") against Debian's Qt; gui_test_*: ${ctest_line:-no result}"
    gui_result+=" (functions: $gp passed, $gf failed, $gs skipped)"
    gui_rc=$ctest_rc
  else
    gui_rc=1
    undefined=$(grep -oE "undefined reference to \`[^']*'" "$log_dir/build-gui.log" | sort | uniq -c | sort -rn || true)
    if [ -n "$undefined" ]; then
      echo "$undefined" | head -12 | sed 's/^ */  /' >&2 || true
      std_refs=$(echo "$undefined" | grep -E 'StdString|basic_string|std::string|cxx11' | awk '{ n += $1 } END { print n + 0 }')
      gui_result="does not link: $std_refs undefined reference(s) to Qt functions that take or return std::string"
      gui_result+=" (QString::toStdString is inline and calls QByteArray::toStdString, compiled into Qt). Debian's"
      gui_result+=" Qt 6 is built with _GLIBCXX_USE_CXX11_ABI=1, the wheel's LibTorch with"
      gui_result+=" _GLIBCXX_USE_CXX11_ABI=$torch_abi, and our code must use the LibTorch's setting: the GUI needs a"
      gui_result+=" LibTorch with the C++11 ABI (_GLIBCXX_USE_CXX11_ABI=1: PyPI's torch >= 2.7, or pytorch.org's"
      gui_result+=" cxx11-abi LibTorch), or GUI code that builds its std::strings itself as the CLI and the tests do."
    else
      grep -E -B2 -A6 'error:' "$log_dir/build-gui.log" | head -60 >&2 || true
      gui_result="failed to build, not at the link (see $log_dir/build-gui.log)"
    fi
  fi
  say "GUI: reconfiguring $build with VARRATE_GUI=OFF"
  configure OFF "$log_dir/configure.log" >/dev/null
fi

# Summary.
echo
echo "== check-libtorch2 summary"
echo "torch           $torch_version (pinned in $requirements), CUDA $torch_cuda, cuDNN $torch_cudnn"
echo "C++ string ABI  wheel: $(abi_word "$torch_abi"); Debian's Qt 6: $([ "$qt_abi" = 1 ] && echo "C++11 ABI" || echo "pre-C++11 ABI")"
echo "CUDA toolkit    nvcc $nvcc_version (for the wheel's CMake config; binaries link the wheel's CUDA $torch_cuda runtime)"
echo "venv            $venv"
echo "build           $build: configure ${configure_s} s, build ${build_s} s with -j$jobs, tests ${test_s} s"
echo "ctest (CPU)     ${cpu_line:-no result} (exit $cpu_rc)"
echo "test functions  $passed passed, $failed failed, $skipped skipped"
echo "GUI             $gui_result"
[ "$cpu_rc" -eq 0 ] || die "the test suites failed (see $log_dir/ctest-cpu.log)"
[ "$gui_rc" -eq 0 ] || die "the GUI check failed (see above)"
exit 0
