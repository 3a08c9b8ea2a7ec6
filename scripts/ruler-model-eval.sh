#!/usr/bin/env bash
# Held-out figures of a RULER-trained demo model (scripts/train-ruler-model.sh) against the shipped one:
#   1. RULER, all 11 tasks at 1024 and 2048 tokens, the full cache, SAMPLES samples per task and length, on a
#      seed no training step or training check draws (RULER training samples use seeds below 2^63; the
#      trainer's periodic checks use 2^63 + 0x5452414953);
#   2. needle accuracy of the full cache on the model card's 200 held-out documents (seed 2026, 1024 tokens,
#      three distractors).
# Usage: MODEL=DIR scripts/ruler-model-eval.sh   (OUT_DIR=results/ruler-model, SAMPLES=10, THREADS=2)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
model=${MODEL:?MODEL=DIR of the exported model}
out=${OUT_DIR:-results/ruler-model}
bin=${BIN:-build/bin}
mkdir -p "$out"
"$bin/varrate" eval --model "$model" --tasks all --lengths 1024,2048 --samples "${SAMPLES:-10}" \
  --seed 9223372036854775809 --methods full --dtype fp32 --threads "${THREADS:-2}" --out "$out/ruler" |
  tee "$out/ruler.txt"
"$bin/varrate" niah --model "$model" --lengths 1024 --depths 0,25,50,75,100 --samples 40 --seed 2026 \
  --distractors 3 --methods full --max-new-tokens 10 --dtype fp32 --threads "${THREADS:-2}" \
  --out "$out/niah" | tee "$out/niah.txt"
