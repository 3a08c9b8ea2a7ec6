#!/usr/bin/env bash
# The Python package (python/) in a fresh virtual environment outside the repository: installs torch, then
# `pip install ./python kvpress` exactly as a user does (the extension compiles codec/, models/ and base/ against
# that torch), runs the kvpress example and the pytest suite. CI does not run it (it installs no Python packages).
#
# Usage: scripts/python-package.sh [--fresh] [--wheel] [-- PYTEST_ARGS...]
#   --fresh  delete the environment first (default: reuse it; pip then rebuilds the package incrementally)
#   --wheel  also build a wheel into python/dist (pip wheel --no-deps -w python/dist ./python; it runs beside the
#            torch version it was built against)
# Environment: VARRATE_PY_VENV (default $HOME/.cache/varrate/python-venv), PYTHON (default python3, >= 3.10).
# Needs what scripts/setup.sh installs (cmake >= 3.24, ninja, a C++17 compiler, spdlog, fmt, nlohmann-json,
# Eigen, PCRE2, utf8proc) and, for torch's CUDA wheel, a CUDA toolkit with nvcc (Caffe2's CMake config asks for
# one; any version).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv=${VARRATE_PY_VENV:-$HOME/.cache/varrate/python-venv}
python=${PYTHON:-python3}
fresh=0
wheel=0
pytest_args=()
while [ $# -gt 0 ]; do
  case $1 in
    --fresh) fresh=1 ;;
    --wheel) wheel=1 ;;
    --) shift; pytest_args=("$@"); break ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "python-package: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case "$(cd "$(dirname "$venv")" 2>/dev/null && pwd)/" in
  "$PWD"/*) echo "python-package: $venv is inside the repository; choose another VARRATE_PY_VENV" >&2; exit 2 ;;
esac

[ $fresh = 1 ] && rm -rf "$venv"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip() { "$venv/bin/python" -m pip "$@"; }
pip install -q --upgrade pip
torch_pin=$(grep '^torch==' python/requirements-test.txt)
pip install -q "$torch_pin"
start=$(date +%s)
pip install -q -r python/requirements-test.txt ./python
echo "python-package: pip install ./python (with kvpress, pytest) took $(( $(date +%s) - start )) s"
"$venv/bin/python" -c 'import varrate, torch; print("varrate", varrate.__version__, "on torch", torch.__version__, "cuda", torch.cuda.is_available())'

echo "python-package: the example (python/examples/kvpress_example.py)"
"$venv/bin/python" python/examples/kvpress_example.py
echo "python-package: pytest python/tests"
"$venv/bin/python" -m pytest -q python/tests "${pytest_args[@]}"
if [ $wheel = 1 ]; then
  pip wheel --no-deps -w python/dist ./python
  ls -l python/dist
fi
