#!/usr/bin/env bash
# The decode path reads tensors back on the host only through models/host_read.h's to_host(), which counts the
# reads (test_core_compressed_decode requires none per decode step). This check keeps it so: in the files a
# decode step runs through, no raw device-to-host read (`.to(at::kCPU)`, `.cpu()`) and no `.item` except on a
# line that reads through to_host() or says it is on a tensor already on the host (`host-side`).
# Usage: scripts/check-host-reads.sh [REPO]   (run by ctest as decode_path_reads_through_to_host)
set -euo pipefail
repo=${1:-$(cd "$(dirname "$0")/.." && pwd)}
files=(models/llama_model.cpp models/generate.cpp models/attention.cpp models/attention_fused.cpp
  models/kv_cache.cpp models/batch_cache.cpp models/rope.cpp models/layer_math.cpp
  codec/compressed_layer.cpp codec/quantized_layer.cpp codec/headwise_eviction.cpp codec/quantize.cpp)
bad=0
for f in "${files[@]}"; do
  [ -f "$repo/$f" ] || { echo "check-host-reads: $f is missing (update the list in $0)" >&2; exit 2; }
  while IFS= read -r hit; do
    echo "check-host-reads: $f:$hit: read through to_host() (models/host_read.h), or mark a host tensor 'host-side'" >&2
    bad=1
  done < <(grep -nE 'at::kCPU\)|\.cpu\(\)|\.item(<[a-z0-9_]+>)?\(\)' "$repo/$f" | grep -vE 'to_host\(|host-side' || true)
done
[ $bad = 0 ] && echo "check-host-reads: ${#files[@]} decode-path files read the host only through to_host()"
exit $bad
