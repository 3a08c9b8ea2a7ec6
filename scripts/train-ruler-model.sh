#!/usr/bin/env bash
# Trains the next embedded demo model: the shipped needle model (resources/models/varrate-demo) grown a
# RULER vocabulary (the wonderwords lists and RULER's templates, 8192 tokens; the rows of tokens it already
# had move over by string) and trained further on a mix of RULER-format samples of all 13 tasks at 1024 and
# 2048 tokens (--ruler-share of the steps) and the needle documents it was trained on (the rest), with copy
# attention supervised on every reference that occurs once in the context. CPU, 2 threads; checkpoints every
# 200 steps outside the repository, so a killed run continues with the same command (it resumes from the
# newest checkpoint). Then scripts/demo-eval.sh evaluates an export.
# Usage: scripts/train-ruler-model.sh   (WORK_DIR=~/.cache/varrate-demo-train/ruler, STEPS=6000)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin=${BIN:-build/bin}
work=${WORK_DIR:-$HOME/.cache/varrate-demo-train/ruler}
steps=${STEPS:-6000}
init=${INIT_FROM:-resources/models/varrate-demo}
mkdir -p "$work/checkpoints"
args=(--out "$work/model" --init-from "$init" --layers 4 --hidden 256 --heads 8 --kv-heads 2 --head-dim 32
  --intermediate 512 --untied --ruler-vocab 8192 --embed-init-std 1.0 --copy-attention 1
  --ruler-share 0.6 --ruler-lengths 1024,2048 --max-distractors 5 --max-questions 6
  --curriculum-lengths 512,1024,2048 --unlock-at 0,0,0 --threads 2 --seed 11 --steps "$steps" --warmup 100
  --lr 1e-3 --tokens-per-step 4096 --checkpoint-dir "$work/checkpoints" --checkpoint-every 200
  --export-every 500 --eval-every 500 --eval-samples 1 --eval-lengths 1024,2048 --ruler-eval-lengths 1024
  --final-eval-samples 2 --log-every 25)
latest=$(ls -d "$work"/checkpoints/step-* 2>/dev/null | sort | tail -1 || true)
if [ -n "$latest" ]; then
  # A resumed run keeps --init-from out of its identity check only if it was there at the start: same args.
  args+=(--resume "$latest")
fi
"$bin/varrate-train" "${args[@]}" 2>&1 | tee -a "$work/train.log"
echo "model in $work/model; next: OUT_DIR=resources/models/varrate-demo, copy and scripts/demo-eval.sh"
