#!/usr/bin/env bash
# One short session on a machine with an NVIDIA GPU and PyTorch (its LibTorch): builds the CLI with CUDA (GUI and
# tests off), runs scripts/cuda-checks.sh, then the bf16 needle comparison of the demo model on the GPU (the
# bf16 branch GPU users get: native bf16 matmuls): `varrate niah` in fp32 and in bf16 over the same held-out
# documents, every compressing method that runs on the GPU, kappa 0.1 and 0.2, query-agnostic, three distractors.
# Each sweep folder is packed into OUT as one tarball (records and log included, for paired differences):
# OUT holds session.log, build.log, four niah-*.tgz and cuda-checks.tgz.
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
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null) ||
  { echo "gpu-bf16-checks: python3 has no torch: no LibTorch to build against"; exit 1; }
export CMAKE_PREFIX_PATH="$torch_prefix${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
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

# The needle sweeps, same documents (seed) in each: bf16 and fp32 with this build's store (anchor sets, flat's
# ranks not stored), then both with the previous store's c ordinals and every rank (VARRATE_METADATA=ordinals;
# only the methods it changes).
# Each gets an equal share of the time left (before the CUDA checks' reserve); a sweep cut short keeps its
# records (`varrate summarize DIR` summarises them).
seed=${SEED:-2026}
samples=${SAMPLES:-40}
methods=${METHODS:-full,varrate,flat,snapkv,pyramidkv,adakv,streamingllm,expected-attention,kvzip,varrate-kvzip,kivi2}
legacy_methods=full,varrate,flat,varrate-kvzip
runs=("bf16 $methods" "fp32 $methods" "bf16 $legacy_methods ordinals" "fp32 $legacy_methods ordinals")
reserve=${CHECKS_S:-90}
for i in "${!runs[@]}"; do
  read -r dt ms scheme <<<"${runs[$i]}"
  name=niah-$dt${scheme:+-$scheme}
  t=$(( ($(left) - reserve) / (${#runs[@]} - i) ))
  [ "$t" -lt 20 ] && { el "no time left for $name"; continue; }
  el "$name (limit ${t}s)"
  VARRATE_METADATA=${scheme:-sets} timeout "$t" "$bin" niah --model resources/models/varrate-demo --lengths 1024 \
    --depths 0,25,50,75,100 --samples "$samples" --seed "$seed" --distractors 3 --budget 0.1,0.2 \
    --mode query-agnostic --methods "$ms" --max-new-tokens 10 --device cuda --dtype "$dt" --out "$OUT/$name" \
    >"$OUT/$name.out" 2>&1
  el "$name rc=$? records $(find "$OUT/$name" -name '*.json' | wc -l)"
  grep -E "correct \(" "$OUT/$name.out" | head -30
  mv "$OUT/$name.out" "$OUT/$name/" 2>/dev/null
  tar -C "$OUT" -czf "$OUT/$name.tgz" "$name" && rm -rf "${OUT:?}/$name"
done

t=$(($(left) - 5))
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
