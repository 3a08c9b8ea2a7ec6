#pragma once
// Compactor (Chari & Van Durme 2025) as kvpress's CompactorPress with its defaults: the first 8 and the last
// 4 tokens are always kept; each other token scores blending x z(leverage) + z(non-causal attention), where
// blending is the compression ratio (1 - kappa), leverage is LeverageScorePress's (sketch 48, seeded as
// ours is) over the pre-RoPE keys of that span, and the attention part is kvpress's NonCausalAttnPress over
// the span: every query's unscaled softmax within its chunk of 256 summed per key
// (LayerCapture::noncausal_attention, from the all-queries pass), averaged over the KV head's query heads,
// times the value's norm, smoothed over 3 neighbours. z() standardises over every KV head and token of the
// layer. The score mixes by the budget, so the analysis keeps both parts and the allocation blends them.
#include "codec/scorer_eviction.h"

namespace varrate {

class CompactorMethod : public ScorerEviction {
  public:
    explicit CompactorMethod(const CodecSettings& settings) : ScorerEviction(settings, "compactor") {}
    std::shared_ptr<const LayerAnalysis> analyse(const LayerCapture& capture) override;
    LayerAllocation allocate(const LayerAnalysis& analysis, const CodecSettings& budget) override;

  protected:
    at::Tensor scores(const LayerCapture& capture) const override;  // [G, L] at the settings' budget
};

}  // namespace varrate
