#!/usr/bin/env bash
# The press table of the methods kvpress offers and their varrate@ twins on the embedded model (held-out seed
# 2026, the model card's): NIAH with three distractors (200 documents at 1024 tokens, five depths) in both
# modes and the RULER tasks at 1024 tokens (all but cwe, too long for 1024 with this tokenizer), kappa 0.1 and
# 0.2; then paired differences against full and against varrate (scripts/niah-paired.py). Resumable: rerun with the same OUT to finish an interrupted run.
# Usage: scripts/measure-presses.sh OUT [THREADS]   (VARRATE_BIN: the varrate executable, default build/bin/varrate;
# METHODS, SAMPLES, RULER_SAMPLES override the defaults)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/measure-presses.sh OUT [THREADS]}
threads=${2:-1}
bin=${VARRATE_BIN:-build/bin/varrate}
presses="knorm,keydiff,tova,random,lagkv,cur,leverage,observed-attention,streamingllm"
twins=$(echo "$presses" | sed 's/\([^,]*\)/varrate@\1/g')
methods=${METHODS:-full,varrate,flat,snapkv,chunkkv,$presses,$twins}
samples=${SAMPLES:-40}
model=resources/models/varrate-demo
for mode in query-agnostic query-aware; do
    "$bin" niah --model "$model" --lengths 1024 --depths 0,25,50,75,100 --samples "$samples" --seed 2026 \
        --distractors 3 --budget 0.1,0.2 --mode "$mode" --max-new-tokens 10 --threads "$threads" \
        --methods "$methods" --dtype fp32 --out "$out/niah-$mode" > "$out/niah-$mode.log" 2>&1
    for against in full varrate; do
        python3 scripts/niah-paired.py "$out/niah-$mode" --against "$against" --bootstrap 2000 \
            --json "$out/niah-$mode-vs-$against.json" > "$out/niah-$mode-vs-$against.md"
    done
done
# cwe is left out: its smallest prompt takes 959 of the demo tokenizer's tokens, too many for 1024 (issue 36).
tasks=niah_single_1,niah_single_2,niah_single_3,niah_multikey_1,niah_multikey_2,niah_multikey_3,niah_multivalue
tasks=$tasks,niah_multiquery,vt,fwe
"$bin" eval --model "$model" --tasks "$tasks" --lengths 1024 --samples "${RULER_SAMPLES:-5}" --seed 2026 \
    --budget 0.1,0.2 --mode query-agnostic --threads "$threads" --methods "$methods" --dtype fp32 \
    --bootstrap 2000 --out "$out/ruler" > "$out/ruler.log" 2>&1
echo "measure-presses: wrote $out (niah-*.md: paired tables; ruler/summary.json)"
