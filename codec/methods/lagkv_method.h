#pragma once
// LagKV (Liang et al. 2025) as kvpress's LagKVPress (n_sink 4, lag 128, no cross scoring): after the first
// n_sink tokens the context is cut into partitions of `lag` tokens; each token of a partition is scored by
// how much its key and value spread over channels once min-max scaled by the NEXT partition's range (the std
// over channels, softmax over the partition, keys and values averaged), and the score is its rank within
// the partition divided by lag. The sinks and the last partition plus the remainder (no next partition to
// compare with) score 1. A context shorter than n_sink + 2 lag keeps the sinks and the most recent tokens.
// Query-agnostic: it reads only the cache.
#include "codec/scorer_eviction.h"

namespace varrate {

class LagKVMethod : public ScorerEviction {
  public:
    static constexpr int64_t kSinks = 4;
    static constexpr int64_t kLag = 128;
    explicit LagKVMethod(const CodecSettings& settings, int64_t lag = kLag)
        : ScorerEviction(settings, "lagkv"), lag_(lag) {}

  protected:
    at::Tensor scores(const LayerCapture& capture) const override;  // [G, L] in [0, 1]

  private:
    int64_t lag_;
};

}  // namespace varrate
