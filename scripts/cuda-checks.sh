#!/usr/bin/env bash
# The CUDA checks of the runtime and the codec, on a machine with an NVIDIA GPU and a build with CUDA
# (cmake -DVARRATE_GUI=OFF -DVARRATE_CUDA=ON). Writes every raw output to OUT_DIR, then a summary; exits 0 only
# when every check passed, 1 on any mismatch, 2 when there is no GPU to check (one line saying so).
#   1. greedy generation of the small real model on CUDA fp32 vs the reference ids (3 prompts): all equal
#   2. `varrate compare` of every registered method on CPU fp32 and on CUDA fp32: the same answers and
#      footprints, per-token salience within 1e-4, ranks equal on at least 99 % of the rows
#   3. every store kind through a cache file, made and answered on CUDA vs on the CPU: the compressed store
#      (varrate), quantized coefficients (flat --coef-bits 4), KIVI (kivi2) and the head-wise store (adakv):
#      the same answers
#   4. codec time / prefill time at 8k and 16k tokens on a random model of Llama-3.1-8B shape (bf16; fewer layers
#      than the real 32, since every layer costs the same and the ratio does not depend on their number);
#      figures only (SKIP_BENCH=1 leaves it out)
# Usage: scripts/cuda-checks.sh BUILD_DIR SHARED_DIR OUT_DIR [LAYERS]   (DEVICE=cpu dry-runs it without a GPU)
set -uo pipefail
build=${1:?build dir}
shared=${2:?shared dir}
out=${3:?output dir}
layers=${4:-4}
dev=${DEVICE:-cuda}  # DEVICE=cpu dry-runs the script without a GPU
bin=$build/bin
model=$shared/fixtures/stories260k
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ "$dev" != cpu ]; then
  if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then
    echo "cuda-checks: no NVIDIA GPU on this machine (nvidia-smi lists none): nothing checked; DEVICE=cpu dry-runs the script" >&2
    exit 2
  fi
fi
[ -x "$bin/varrate" ] || { echo "cuda-checks: no $bin/varrate: build first" >&2; exit 2; }
mkdir -p "$out"
failures=0
fail() { echo "MISMATCH: $*"; failures=$((failures + 1)); }

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
bad = 0
for c in json.load(open(sys.argv[1]))["cases"]:
    try:
        got = json.load(open(f"{sys.argv[2]}/generate-cuda-{c['name']}.json"))["generated_ids"]
    except Exception as e:
        print(c["name"], "no output:", e); bad += 1; continue
    want = c["generated_ids"]
    same = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
    print(f"{c['name']}: {same}/{len(want)} leading ids equal to the reference")
    bad += same != len(want) or len(got) != len(want)
print("greedy:", "ok" if bad == 0 else f"{bad} case(s) differ")
PY
grep -q "^greedy: ok" "$out/greedy_summary.txt" || fail "greedy ids on $dev differ from the reference"

echo "== 2. compare of every method on CPU fp32 vs $dev fp32"
methods=$("$bin/varrate" methods | cut -f1 | paste -sd,)
ctx=$out/context.txt
python3 - "$ctx" <<'PY'
import sys
text = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park. "
        "One day, she saw a big red ball near the tree. The ball belonged to a boy named Tom. ") * 6
open(sys.argv[1], "w").write(text)
PY
for d in cpu "$dev"; do
  "$bin/varrate" compare --model "$model" --context-file "$ctx" --question "Who had the red ball?" \
    --methods "$methods" --budget 0.3 --rmin 4 --rank 64 --stride 32 --anchors 4 --window 16 \
    --obs-window 16 --mode query-agnostic --device "$d" --dtype fp32 --json "$out/compare-$d.json" \
    --rank-log "$out/ranks-$d.csv" >"$out/compare-$d.txt" 2>&1
done
python3 - "$out" "$dev" <<'PY' | tee "$out/compare_summary.txt"
import csv, json, sys
d, dev = sys.argv[1], sys.argv[2]
bad = []
try:
    a, b = (json.load(open(f"{d}/compare-{x}.json")) for x in ("cpu", dev))
    if len(a["methods"]) != len(b["methods"]):
        bad.append(f"{len(a['methods'])} runs on the CPU, {len(b['methods'])} on {dev}")
    for ma, mb in zip(a["methods"], b["methods"]):
        same = ma["answers"] == mb["answers"]
        fa, fb = ma["footprint_fraction"], mb["footprint_fraction"]
        print(f'{ma["method"]}: answers equal {same}, footprint {fa:.5f} vs {fb:.5f}')
        if not same: bad.append(f'{ma["method"]} answers differ')
        if abs(fa - fb) > 1e-9: bad.append(f'{ma["method"]} footprint differs')
    ra, rb = (list(csv.DictReader(open(f"{d}/ranks-{x}.csv"))) for x in ("cpu", dev))
    print("rank-log rows", len(ra), len(rb))
    if len(ra) != len(rb) or any(x["method"] != y["method"] or x["position"] != y["position"] for x, y in zip(ra, rb)):
        bad.append("rank logs do not line up")
    for col in ("salience", "rank", "exact", "rel_error"):
        diff = max((abs(float(x[col]) - float(y[col])) for x, y in zip(ra, rb) if x[col] and y[col]), default=0)
        print(f"max |cpu - {dev}| {col}: {diff:.3g}")
        if col == "salience" and diff > 1e-4: bad.append(f"salience differs by {diff:.3g}")
    other = sum(x["rank"] != y["rank"] for x, y in zip(ra, rb))
    print("rows with another rank:", other)
    if other > 0.01 * max(len(ra), 1): bad.append(f"{other} rows with another rank")
except Exception as e:
    bad.append(f"compare summary failed: {e}")
print("compare:", "ok" if not bad else "; ".join(bad))
PY
grep -q "^compare: ok" "$out/compare_summary.txt" || fail "compare on $dev differs from the CPU run"

echo "== 3. every store kind through a cache file: $dev vs CPU"
while read -r method extra; do
  for d in cpu "$dev"; do
    # shellcheck disable=SC2086
    "$bin/varrate" compress --model "$model" --context-file "$ctx" --method "$method" --budget 0.4 --rmin 4 \
      --rank 64 --stride 32 --anchors 4 --window 16 --obs-window 16 $extra --device "$d" --dtype fp32 \
      --out "$out/store-$method-$d.vrkv" >"$out/store-$method-$d.txt" 2>&1 &&
      "$bin/varrate" ask --model "$model" --cache "$out/store-$method-$d.vrkv" --question "Who had the red ball?" \
        --device "$d" --dtype fp32 --json >"$out/ask-$method-$d.json" 2>>"$out/store-$method-$d.txt"
  done
  if python3 - "$out/ask-$method-cpu.json" "$out/ask-$method-$dev.json" <<'PY'; then echo "$method store: answers equal"; else fail "$method store: answers differ or missing (see $out/store-$method-*.txt)"; fi
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
key = "answers" if "answers" in a else "answer"
sys.exit(0 if a.get(key) == b.get(key) and a.get(key) is not None else 1)
PY
done <<'STORES'
varrate
flat --coef-bits 4
kivi2
adakv
STORES

summary() {
  if [ "$failures" -eq 0 ]; then echo "cuda-checks: every check passed on $dev"; else echo "cuda-checks: $failures check(s) failed on $dev"; fi
}
if [ -n "${SKIP_BENCH:-}" ]; then summary; [ "$failures" -eq 0 ]; exit; fi
echo "== 4. codec / prefill on a random Llama-3.1-8B-shaped model ($layers layers)"
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
summary
[ "$failures" -eq 0 ]
