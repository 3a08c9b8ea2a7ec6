#!/usr/bin/env bash
# Evaluates the embedded demo model (resources/models/varrate-demo) as its model card reports:
#   1. calibrates the shipped basis on generated demo-corpus documents (training seed range, never the
#      evaluation documents) and prints the per-layer residual spectrum (directions for 90 / 99 % energy)
#   2. NIAH exact match of the uncompressed model: lengths 512-4096 x depths 0-100 % x SAMPLES documents
#   3. NIAH full / varrate / flat / snapkv (METHODS) at each budget in BUDGETS, query-aware and query-agnostic,
#      COMPARE_SAMPLES documents per cell (default SAMPLES)
#   4. with RETENTION=1: what full / varrate / snapkv kept of the asked needle at kappa 0.1, with and without
#      three distractors, and which failures are the compression's own (scripts/niah-failures.py)
# Results (records, summary.json/csv, heatmap.png per sweep) go to OUT_DIR (default results/demo).
# Usage: scripts/demo-eval.sh [--skip-calibration]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
model=${MODEL:-resources/models/varrate-demo}
out=${OUT_DIR:-results/demo}
samples=${SAMPLES:-10}
compare_samples=${COMPARE_SAMPLES:-$samples}
budgets=${BUDGETS:-"0.2 0.1"}
lengths=${LENGTHS:-512,1024,2048}
bin=${BIN:-build/bin}
mkdir -p "$out"

if [ "${1:-}" != --skip-calibration ]; then
  # --rank 1024 is clamped to D (K and V of every KV head): the whole spectrum is kept; stride, anchors and
  # window as in the model's varrate-codec.json.
  "$bin/varrate" calibrate --model "$model" --demo-documents 64 --demo-length 2048 --rank 1024 \
    --stride "${STRIDE:-32}" --anchors "${ANCHORS:-4}" --window "${WINDOW:-16}" \
    --out "$model/varrate-basis.safetensors" | tee "$out/spectrum.txt"
fi

"$bin/varrate" niah --model "$model" --lengths 512,1024,2048,4096 --samples "$samples" --seed 9001 \
  --methods full --out "$out/full" | tee "$out/full.txt"

for kappa in $budgets; do
  for mode in query-aware query-agnostic; do
    "$bin/varrate" niah --model "$model" --lengths "$lengths" --samples "$compare_samples" --seed 9001 \
      --methods "${METHODS:-full,varrate,flat,snapkv}" --budget "$kappa" --mode "$mode" ${EXTRA_FLAGS:-} \
      --out "$out/kappa-$kappa-$mode" | tee "$out/kappa-$kappa-$mode.txt"
  done
done

# RETENTION=1: what full / varrate / snapkv kept of the asked needle (and of three distractors) at kappa 0.1,
# both modes, and which failures are the compression's own (the model card's explanation of SnapKV).
if [ -n "${RETENTION:-}" ]; then
  mkdir -p "$out/retention"
  for mode in query-aware query-agnostic; do
    "$bin/varrate" niah --model "$model" --lengths 512,1024,2048 --samples "$compare_samples" --seed 9001 \
      --methods full,varrate,snapkv --budget 0.1 --mode "$mode" --out "$out/retention/d0-$mode" |
      tee "$out/retention/d0-$mode.txt"
    "$bin/varrate" niah --model "$model" --lengths 1024,2048 --samples "$compare_samples" --seed 9001 \
      --distractors 3 --methods full,varrate,snapkv --budget 0.1 --mode "$mode" --out "$out/retention/d3-$mode" |
      tee "$out/retention/d3-$mode.txt"
  done
  root=$(pwd)
  (cd "$out/retention" && "$root/scripts/niah-failures.py" d0-query-aware d0-query-agnostic d3-query-aware \
    d3-query-agnostic) | tee "$out/retention/failures.txt"
fi
