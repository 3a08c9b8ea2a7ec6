#!/usr/bin/env bash
# On a machine with an NVIDIA GPU and a CUDA LibTorch (e.g. PyTorch's): builds varrate-train and varrate with
# CUDA (GUI and tests off), trains several demo-model recipes at once on the one GPU, each fitted to the time
# left (--minutes), and runs scripts/cuda-checks.sh meanwhile. Everything lands in OUT (default build/gpu-out):
# one exported model per recipe (OUT/A, OUT/B, ...: model + train_log.jsonl + eval_results.json), build and
# check logs. BUDGET_S: seconds for the whole script (default 540). Dependencies that the machine lacks can be
# unpacked into .devkit/ (an env.sh there is sourced when present).
set -u
OUT=${OUT:-build/gpu-out}
mkdir -p "$OUT"
T0=$(date +%s)
DEADLINE=$((T0 + ${BUDGET_S:-540}))
log=$OUT/session.log
exec > >(tee -a "$log") 2>&1
el() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
el "start"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cxx11abi", torch._C._GLIBCXX_USE_CXX11_ABI)'
which cmake ninja g++ nvcc; cmake --version | head -1; g++ --version | head -1; nproc
[ -f .devkit/env.sh ] && source .devkit/env.sh
# The wheel's LibTorch, found as scripts/check-libtorch2.sh finds it (a fresh machine has no CMAKE_PREFIX_PATH).
torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null) ||
  { echo "gpu-train-and-check: python3 has no torch: no LibTorch to build against"; exit 1; }
export CMAKE_PREFIX_PATH="$torch_prefix${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
VARRATE_SHARED=${VARRATE_SHARED:-../shared}
[ -d .devkit/root ] && DEVKIT_CMAKE_ARGS="-Dspdlog_DIR=$PWD/.devkit/root/usr/lib/x86_64-linux-gnu/cmake/spdlog -Dfmt_DIR=$PWD/.devkit/root/usr/lib/x86_64-linux-gnu/cmake/fmt"
gen=Ninja; command -v ninja >/dev/null || gen="Unix Makefiles"
el "configure"
cmake -S . -B build-gpu -G "$gen" -DCMAKE_BUILD_TYPE=Release -DVARRATE_GUI=OFF -DVARRATE_TESTS=OFF \
  -DVARRATE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DVARRATE_SHARED_DIR="$VARRATE_SHARED" \
  ${DEVKIT_CMAKE_ARGS:-} >"$OUT/configure.log" 2>&1 \
  || { tail -60 "$OUT/configure.log"; el "configure failed"; exit 1; }
grep -E "VarRate:|string ABI" "$OUT/configure.log"
el "build varrate-train"
cmake --build build-gpu -j"$(nproc)" --target varrate-train >"$OUT/build.log" 2>&1 \
  || { grep -E "error|Error" "$OUT/build.log" | head -40; tail -20 "$OUT/build.log"; el "build failed"; exit 1; }
el "built"
# Training recipes, concurrently on the one GPU; each fits the time left (minus the final eval and margin).
now=$(date +%s)
minutes=$(python3 -c "print(round(max(1.0, ($DEADLINE - $now - 75) / 60.0 * 0.85), 2))")
el "training for $minutes minutes per recipe"
common=(--device cuda --threads 2 --data-threads 4 --tokens-per-step 16384 --seed 1234 --minutes "$minutes"
        --curriculum-lengths 256,512,1024,1536,2048,3072,4096 --unlock-at 0,0,0.1,0.15,0.25,0.35,0.5
        --eval-lengths 512,1024,2048,4096 --eval-every 500 --eval-samples 4 --export-every 500
        --final-eval-samples 10 --log-every 100)
while read -r name extra; do
  mkdir -p "$OUT/$name"
  # shellcheck disable=SC2086
  nohup build-gpu/bin/varrate-train --out "$OUT/$name" "${common[@]}" $extra >"$OUT/$name/train.out" 2>&1 &
done <<'RECIPES'
A --lm-weight 0.3 --repeat-share 0.3 --lr 2e-3
B --lm-weight 0 --lr 2e-3
C --lm-weight 0.1 --repeat-share 0.3 --lr 3e-3 --warmup 200
RECIPES
sleep 20
grep -h "timing probe" "$OUT"/*/train.out

# The CLI and the CUDA checks meanwhile, niced (the trainers' data threads come first).
el "build varrate"
nice -n 10 cmake --build build-gpu -j6 --target varrate >"$OUT/build-cli.log" 2>&1 \
  || { grep -E "error|Error" "$OUT/build-cli.log" | head -40; el "CLI build failed"; }
el "CLI built"
timeout $(( DEADLINE - $(date +%s) )) nice -n 10 bash scripts/cuda-checks.sh build-gpu "$VARRATE_SHARED" "$OUT/cuda-checks" 4 >"$OUT/cuda-checks.log" 2>&1 &
checks=$!
while [ "$(date +%s)" -lt "$DEADLINE" ] && pgrep -f varrate-train >/dev/null; do
  sleep 30; el "progress"; for f in "$OUT"/*/train.out; do echo "$f: $(grep -E '^step|eval' "$f" | tail -2 | tr '\n' ' ')"; done
done
wait $checks 2>/dev/null
el "end"; cat "$OUT/cuda-checks/greedy_summary.txt" "$OUT/cuda-checks/compare_summary.txt" 2>/dev/null
grep -h "final eval\|exported" "$OUT"/*/train.out
