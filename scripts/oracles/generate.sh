#!/usr/bin/env bash
# Regenerates every oracle reference under tests/data/oracles/ (checkpoints by `varrate make-model`,
# references by transformers and kvpress) deterministically: CPU, fixed seeds, one thread.
# Usage: scripts/oracles/generate.sh [--only NAME...]   (after scripts/oracles/make-venv.sh and a build)
# VARRATE_BIN: the varrate executable (default build/bin/varrate, relative to the repository).
# VARRATE_ORACLE_VENV: the environment make-venv.sh created (default ~/.cache/varrate/oracle-venv).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv=${VARRATE_ORACLE_VENV:-$HOME/.cache/varrate/oracle-venv}
bin=${VARRATE_BIN:-build/bin/varrate}
case "$bin" in /*) ;; *) bin="$repo/$bin" ;; esac
[ -x "$venv/bin/python" ] || { echo "generate: no environment at $venv (run scripts/oracles/make-venv.sh)" >&2; exit 2; }
[ -x "$bin" ] || { echo "generate: no varrate executable at $bin (build it, or set VARRATE_BIN)" >&2; exit 2; }
export CUDA_VISIBLE_DEVICES="" OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 PYTHONHASHSEED=0
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
cd "$repo"
exec "$venv/bin/python" "$here/generate.py" --bin "$bin" "$@"
