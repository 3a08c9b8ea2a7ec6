#pragma once
// StreamingLLM (Xiao et al. 2024) as kvpress's StreamingLLMPress: every KV head keeps the first 4 tokens
// (attention sinks) and the most recent int(L * kappa) - 4; the middle is evicted and the cache physically
// shrinks. A positional score on the scorer-eviction base: sinks above every other token, then recency.
#include "codec/scorer_eviction.h"

namespace varrate {

class StreamingLLMMethod : public ScorerEviction {
  public:
    static constexpr int64_t kSinks = 4;
    explicit StreamingLLMMethod(const CodecSettings& settings) : ScorerEviction(settings, "streamingllm") {}

  protected:
    at::Tensor scores(const LayerCapture& capture) const override;
    // int(L * kappa), which must hold the sinks and one recent token (else InfeasibleBudget).
    int64_t kept_tokens(int64_t n_tokens, double kappa) const override;
};

}  // namespace varrate
