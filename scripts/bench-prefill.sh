#!/usr/bin/env bash
# The prefill figures of docs/PREFILL.md: `varrate bench prefill --profile` on the Llama-3.2-1B shape (random
# bf16 weights, 2k and 8k tokens) and on the demo model (fp32, 16k and 32k tokens), medians of REPEATS runs
# with the per-op table of as many profiled runs. One JSON per case in OUT (default bench-prefill-<date>/).
# Needs a quiet machine: it reports the load average before and after each case.
#   scripts/bench-prefill.sh [CASE...]       CASE: 1b-2k 1b-8k demo-16k demo-32k (default: all)
# Environment: VARRATE_BIN (default build/bin/varrate), THREADS (2), REPEATS (3), CHUNK (512), ONE_B_DTYPE
# (bf16; fp32 on a CPU without bf16 matmul, where LibTorch emulates bf16 matmuls, 10-40x slower),
# MODELS (~/.cache/varrate/bench-models: where the random 1B checkpoint is written once).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin=${VARRATE_BIN:-build/bin/varrate}
threads=${THREADS:-2}
repeats=${REPEATS:-3}
chunk=${CHUNK:-512}
one_b_dtype=${ONE_B_DTYPE:-bf16}
models=${MODELS:-$HOME/.cache/varrate/bench-models}
out=${OUT:-bench-prefill-$(date +%Y%m%d-%H%M%S)}
[ -x "$bin" ] || { echo "bench-prefill: no $bin (build first, or set VARRATE_BIN)" >&2; exit 1; }
mkdir -p "$out"
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(1b-2k 1b-8k demo-16k demo-32k)

one_b=$models/llama-3.2-1b
if printf '%s\n' "${cases[@]}" | grep -q '^1b-' && [ ! -f "$one_b/config.json" ]; then
  echo "bench-prefill: writing random Llama-3.2-1B-shaped weights to $one_b" >&2
  "$bin" make-model --config resources/configs/llama-3.2-1b.json --out "$one_b" --dtype bf16 --seed 1
fi

for c in "${cases[@]}"; do
  case $c in
    1b-2k) args=(--model "$one_b" --dtype "$one_b_dtype" --tokens 2048) ;;
    1b-8k) args=(--model "$one_b" --dtype "$one_b_dtype" --tokens 8192) ;;
    demo-16k) args=(--model resources/models/varrate-demo --dtype fp32 --tokens 16384) ;;
    demo-32k) args=(--model resources/models/varrate-demo --dtype fp32 --tokens 32768) ;;
    *) echo "bench-prefill: unknown case '$c' (1b-2k 1b-8k demo-16k demo-32k)" >&2; exit 2 ;;
  esac
  echo "== $c: load before $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  "$bin" bench prefill "${args[@]}" --device cpu --threads "$threads" --repeats "$repeats" \
    --chunk-size "$chunk" --profile --json > "$out/$c.json"
  echo "== $c: load after $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  python3 - "$out/$c.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print(f"{sys.argv[1]}: {j['tokens']} tokens, median {j['prefill_s_median']:.2f} s {[round(s, 2) for s in j['prefill_s_runs']]}, "
      f"{j['achieved_gflops']:.1f} GFLOP/s of {j['gemm_peak_gflops']:.1f} peak: {j['achieved_over_peak']:.2f}")
for o in j["profile"]["ops"]:
    rate = f"{o['gflops']:.1f} GFLOP/s" if o["gflops"] else ""
    print(f"  {o['op']:<26} {o['ms']:>9.1f} ms {100 * o['share']:5.1f} %  {rate}")
PY
done
