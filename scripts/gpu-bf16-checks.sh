#!/usr/bin/env bash
# One short session on a machine with an NVIDIA GPU and PyTorch (its LibTorch): builds the CLI with CUDA (GUI and
# tests off), runs scripts/cuda-checks.sh, then the bf16 needle comparison of the demo model on the GPU (the
# bf16 branch GPU users get: native bf16 matmuls): `varrate niah` in fp32 and in bf16 over the same held-out
# documents, every compressing method that runs on the GPU, kappa 0.1 and 0.2, query-agnostic, three distractors.
# Each sweep folder is packed into OUT as one tarball (records and log included, for paired differences):
# OUT holds session.log, build.log, niah-bf16.tgz, niah-fp32.tgz and cuda-checks.tgz.
# Dependencies the machine lacks come from .devkit/ (../shared/scripts/gpu-devkit.sh); the fixtures from
# .devkit/shared. Every step has a time limit, so the script ends within BUDGET_S (default 480) seconds.
# Usage: OUT=dir [SEED=2026] [SAMPLES=40] [BUDGET_S=480] scripts/gpu-bf16-checks.sh
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT=${OUT:-build/gpu-out}
mkdir -p "$OUT"
T0=$(date +%s)
DEADLINE=$((T0 + ${BUDGET_S:-480}))
exec > >(tee -a "$OUT/session.log") 2>&1
el() { echo "[$(($(date +%s) - T0))s] $*"; }
left() { echo $((DEADLINE - $(date +%s))); }
el "start"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || { echo "no GPU"; exit 1; }
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
# shellcheck disable=SC1091
[ -f .devkit/env.sh ] && source .devkit/env.sh
shared=${VARRATE_SHARED:-../shared}
kit_args=()
[ -d .devkit/root ] && kit_args=(-Dspdlog_DIR="$PWD/.devkit/root/usr/lib/x86_64-linux-gnu/cmake/spdlog"
  -Dfmt_DIR="$PWD/.devkit/root/usr/lib/x86_64-linux-gnu/cmake/fmt")
gen=Ninja
command -v ninja >/dev/null || gen="Unix Makefiles"
el "configure"
timeout 120 cmake -S . -B build-gpu -G "$gen" -DCMAKE_BUILD_TYPE=Release -DVARRATE_GUI=OFF -DVARRATE_TESTS=OFF \
  -DVARRATE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DVARRATE_SHARED_DIR="$shared" "${kit_args[@]}" \
  >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; el "configure failed"; exit 1; }
grep -E "VarRate:|CUDA runtime" "$OUT/build.log"
el "build varrate"
timeout $(($(left) - 60)) cmake --build build-gpu -j"$(nproc)" --target varrate >>"$OUT/build.log" 2>&1 ||
  { grep -E "error" "$OUT/build.log" | head -30; tail -5 "$OUT/build.log"; el "build failed"; exit 1; }
el "built"
bin=build-gpu/bin/varrate

# The needle sweeps: fp32 then bf16, same documents (seed), one folder each.
seed=${SEED:-2026}
samples=${SAMPLES:-40}
methods=${METHODS:-full,varrate,flat,snapkv,pyramidkv,adakv,streamingllm,expected-attention,kvzip,varrate-kvzip,kivi2}
for dt in bf16 fp32; do
  t=$(($(left) - 90))
  [ "$t" -lt 30 ] && { el "no time left for niah $dt"; continue; }
  el "niah $dt (limit ${t}s)"
  timeout "$t" "$bin" niah --model resources/models/varrate-demo --lengths 1024 --depths 0,25,50,75,100 \
    --samples "$samples" --seed "$seed" --distractors 3 --budget 0.1,0.2 --mode query-agnostic \
    --methods "$methods" --device cuda --dtype "$dt" --out "$OUT/niah-$dt" >"$OUT/niah-$dt.out" 2>&1
  el "niah $dt rc=$?"
  tail -25 "$OUT/niah-$dt.out"
  mv "$OUT/niah-$dt.out" "$OUT/niah-$dt/" 2>/dev/null
  tar -C "$OUT" -czf "$OUT/niah-$dt.tgz" "niah-$dt" && rm -rf "${OUT:?}/niah-$dt"
done

t=$(($(left) - 10))
if [ "$t" -gt 30 ]; then
  el "cuda-checks (limit ${t}s)"
  SKIP_BENCH=${SKIP_BENCH:-} timeout "$t" bash scripts/cuda-checks.sh build-gpu "$shared" "$OUT/cuda-checks" 4 \
    >"$OUT/cuda-checks.out" 2>&1
  el "cuda-checks rc=$?"
  tail -40 "$OUT/cuda-checks.out"
  mv "$OUT/cuda-checks.out" "$OUT/cuda-checks/"
  tar -C "$OUT" -czf "$OUT/cuda-checks.tgz" cuda-checks && rm -rf "${OUT:?}/cuda-checks"
fi
el "end"
