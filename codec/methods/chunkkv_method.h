#pragma once
// ChunkKV (Liu et al. 2025) as kvpress's ChunkKVPress(SnapKVPress(), chunk_length=20): SnapKV's scores (the
// observation window at their maximum + 1) summed over KV heads, averaged per chunk of 20 consecutive tokens
// (the remainder is a chunk of its own), and whole chunks kept, the same for every KV head: max(1,
// int(n_chunks * kappa)) of the highest-scoring chunks. Where those hold more than int(L * kappa) tokens (a
// short remainder chunk lets kvpress overshoot its ratio), the lowest-scoring of them are dropped until they
// fit. Contexts shorter than one chunk fall back to SnapKV, as kvpress does.
#include "codec/methods/snapkv_method.h"

namespace varrate {

class ChunkKVMethod : public SnapKVMethod {
  public:
    static constexpr int64_t kChunk = 20;
    explicit ChunkKVMethod(const CodecSettings& settings) : SnapKVMethod(settings) {}
    std::string name() const override { return "chunkkv"; }
    LayerAllocation allocate(const LayerAnalysis& analysis, const CodecSettings& budget) override;
};

}  // namespace varrate
