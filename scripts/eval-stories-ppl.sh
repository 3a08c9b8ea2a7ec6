#!/usr/bin/env bash
# Perplexity of full / varrate / flat / snapkv on the small real model of the test fixtures (paper A.1), with a basis
# calibrated on two texts and a third, different text scored. Usage: scripts/eval-stories-ppl.sh [SHARED_DIR]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
shared=${1:-../shared}
model=$shared/fixtures/stories260k
texts=resources/eval/stories260k
out=${OUT_DIR:-build/eval-stories}
mkdir -p "$out"
codec=(--rmin 4 --rank 64 --stride 32 --window 16 --obs-window 16)
build/bin/varrate calibrate --model "$model" --text-file "$texts/calib_a.txt" --text-file "$texts/calib_b.txt" \
  --out "$out/basis.safetensors" --rank 64 --stride 32 --anchors 4 --window 16
for kappa in 0.3 0.5; do
  build/bin/varrate ppl --model "$model" --basis "$out/basis.safetensors" --text-file "$texts/eval.txt" \
    --prefix-tokens 400 --budget "$kappa" "${codec[@]}" --json >"$out/ppl-$kappa.json"
  python3 - "$out/ppl-$kappa.json" <<'PY' 2>/dev/null || cat "$out/ppl-$kappa.json"
import json, sys
d = json.load(open(sys.argv[1]))
print(f"kappa {d['budget']}: " + ", ".join(f"{m['method']} {m['ppl']:.4f} ({100*m['footprint_fraction']:.2f}%)" for m in d['methods']))
PY
done
