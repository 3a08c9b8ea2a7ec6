#!/usr/bin/env bash
# Creates the Python environment of the oracle scripts OUTSIDE the repository (CI needs no Python: the
# references these scripts write are committed). Usage: scripts/oracles/make-venv.sh
# VARRATE_ORACLE_VENV: where (default ~/.cache/varrate/oracle-venv). PYTHON: the interpreter (python3, >= 3.10).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv=${VARRATE_ORACLE_VENV:-$HOME/.cache/varrate/oracle-venv}
python=${PYTHON:-python3}

mkdir -p "$(dirname "$venv")"
venv_abs=$(cd "$(dirname "$venv")" && pwd)/$(basename "$venv")
case "$venv_abs/" in
    "$repo"/*) echo "make-venv: $venv_abs is inside the repository; choose another VARRATE_ORACLE_VENV" >&2; exit 2 ;;
esac
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
    { echo "make-venv: $python is older than Python 3.10 (kvpress needs >= 3.10)" >&2; exit 2; }

[ -x "$venv_abs/bin/python" ] || "$python" -m venv "$venv_abs"
"$venv_abs/bin/python" -m pip install --upgrade pip
# torch's default wheel pulls ~3 GB of CUDA libraries; the download is the slow part.
"$venv_abs/bin/python" -m pip install -r "$here/requirements.txt"
"$venv_abs/bin/python" - <<'PY'
import torch, transformers, kvpress, tokenizers
from importlib.metadata import version
print("oracle venv ready: torch", torch.__version__, "transformers", transformers.__version__,
      "kvpress", version("kvpress"), "tokenizers", tokenizers.__version__)
PY
echo "$venv_abs"
