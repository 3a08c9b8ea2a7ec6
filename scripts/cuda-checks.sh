#!/usr/bin/env bash
# The CUDA checks of the runtime and the codec, on a machine with an NVIDIA GPU and a build with CUDA
# (cmake -DVARRATE_GUI=OFF -DVARRATE_CUDA=ON). Writes every raw output to OUT_DIR, then a summary.
#   1. greedy generation of the small real model on CUDA fp32 vs the reference ids (3 prompts)
#   2. `varrate compare` of all methods on CPU fp32 and on CUDA fp32: answers, per-token salience/rank/error
#   3. codec time / prefill time at 8k and 16k tokens on a random model of Llama-3.1-8B shape (bf16; fewer layers
#      than the real 32, since every layer costs the same and the ratio does not depend on their number)
# Usage: scripts/cuda-checks.sh BUILD_DIR SHARED_DIR OUT_DIR [LAYERS]
set -uo pipefail
build=${1:?build dir}
shared=${2:?shared dir}
out=${3:?output dir}
layers=${4:-4}
dev=${DEVICE:-cuda}  # DEVICE=cpu dry-runs the script without a GPU
bin=$build/bin
model=$shared/fixtures/stories260k
mkdir -p "$out"
cd "$(dirname "${BASH_SOURCE[0]}")/.."

echo "== 1. greedy ids on CUDA fp32"
python3 - "$model/expected_greedy.json" >"$out/greedy_cases.tsv" <<'PY'
import json, sys
for c in json.load(open(sys.argv[1]))["cases"]:
    print(c["name"], ",".join(map(str, c["prompt_ids"])), len(c["generated_ids"]), sep="\t")
PY
while IFS=$'\t' read -r name ids n; do
  "$bin/varrate" generate --model "$model" --prompt-ids "$ids" --max-new-tokens "$n" --device "$dev" --dtype fp32 \
    --json >"$out/generate-cuda-$name.json" 2>"$out/generate-cuda-$name.err"
done <"$out/greedy_cases.tsv"
python3 - "$model/expected_greedy.json" "$out" <<'PY' | tee "$out/greedy_summary.txt"
import json, sys
for c in json.load(open(sys.argv[1]))["cases"]:
    try:
        got = json.load(open(f"{sys.argv[2]}/generate-cuda-{c['name']}.json"))["generated_ids"]
    except Exception as e:
        print(c["name"], "no output:", e); continue
    want = c["generated_ids"]
    same = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    print(f"{c['name']}: {same}/{len(want)} leading ids equal to the reference")
PY

echo "== 2. compare on CPU fp32 vs CUDA fp32"
ctx=$out/context.txt
python3 - "$ctx" <<'PY'
import sys
text = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
        "One day, she saw a big red ball near the tree. The ball belonged to a boy named Tom. ") * 6
open(sys.argv[1], "w").write(text)
PY
for d in cpu "$dev"; do
  "$bin/varrate" compare --model "$model" --context-file "$ctx" --question "Who had the red ball?" \
    --methods full,varrate,flat,snapkv --budget 0.3 --rmin 4 --rank 64 --stride 32 --anchors 4 --window 16 \
    --obs-window 16 --mode query-agnostic --device "$d" --dtype fp32 --json "$out/compare-$d.json" \
    --rank-log "$out/ranks-$d.csv" >"$out/compare-$d.txt" 2>&1
done
python3 - "$out" "$dev" <<'PY' | tee "$out/compare_summary.txt"
import csv, json, sys
d = sys.argv[1]
try:
    dev = sys.argv[2]
    a, b = (json.load(open(f"{d}/compare-{x}.json")) for x in ("cpu", dev))
    for ma, mb in zip(a["methods"], b["methods"]):
        print(f'{ma["method"]}: answers equal {ma["answers"] == mb["answers"]}, footprint '
              f'{ma["footprint_fraction"]:.5f} vs {mb["footprint_fraction"]:.5f}')
    ra, rb = (list(csv.DictReader(open(f"{d}/ranks-{x}.csv"))) for x in ("cpu", dev))
    print("rank-log rows", len(ra), len(rb))
    assert all(x["method"] == y["method"] and x["position"] == y["position"] for x, y in zip(ra, rb))
    for col in ("salience", "rank", "exact", "rel_error"):
        diff = max(abs(float(x[col]) - float(y[col])) for x, y in zip(ra, rb))
        print(f"max |cpu - {dev}| {col}: {diff:.3g}")
    print("rows with another rank:", sum(x["rank"] != y["rank"] for x, y in zip(ra, rb)))
except Exception as e:
    print("compare summary failed:", e)
PY

[ -n "${SKIP_BENCH:-}" ] && exit 0
echo "== 3. codec / prefill on a random Llama-3.1-8B-shaped model ($layers layers)"
cfg=$out/llama-3.1-8b-$layers.json
python3 - resources/configs/llama-3.1-8b.json "$cfg" "$layers" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["num_hidden_layers"] = int(sys.argv[3]); json.dump(c, open(sys.argv[2], "w"))
PY
m8=${TMPDIR:-/tmp}/varrate-llama8b-$layers
[ -f "$m8/model.safetensors" ] || "$bin/varrate" make-model --config "$cfg" --out "$m8" --dtype bf16
for n in 8192 16384; do
  "$bin/varrate" bench codec --model "$m8" --tokens $n --device "$dev" --dtype bf16 --repeats 3 --json \
    >"$out/bench-codec-$n.json" 2>"$out/bench-codec-$n.err"
  tail -c 1500 "$out/bench-codec-$n.json"; echo
done
"$bin/varrate" bench prefill --model "$m8" --tokens 8192 --device "$dev" --dtype bf16 --repeats 3 --json \
  >"$out/bench-prefill-8192.json" 2>&1
echo "cuda checks done"
