#pragma once
// kvpress's ComposedPress([SnapKVPress(), ThinKPress()]) ("snap_think" in its evaluation registry): SnapKV
// evicts tokens, then ThinK prunes each KV head's key channels, scored over the tokens that head kept (the
// keys kvpress's ThinK sees after SnapKV) and the last 32 window queries; int(head_dim * key_channel_ratio)
// channels per head. Under kappa: the pruning is the setting's, and SnapKV keeps as many tokens per head as
// fit in what is left (n = the most with n * G * (2 * head_dim - pruned) scalars plus the kept channels'
// indices within kappa), the observation window always among them. Held by a ChannelPrunedLayer.
#include "codec/methods/snapkv_method.h"

namespace varrate {

class SnapThinKMethod : public SnapKVMethod {
  public:
    explicit SnapThinKMethod(const CodecSettings& settings) : SnapKVMethod(settings) {}
    std::string name() const override { return "snap-think"; }
    std::shared_ptr<const LayerAnalysis> analyse(const LayerCapture& capture) override;
    LayerAllocation allocate(const LayerAnalysis& analysis, const CodecSettings& budget) override;
    LayerKV materialise(const LayerCapture& capture, const LayerAnalysis& analysis,
                        const LayerAllocation& allocation) override;
    std::shared_ptr<const LayerPrefix> store(const LayerCapture& capture, const LayerAnalysis& analysis,
                                             const LayerAllocation& allocation) override;

    // Tokens each KV head keeps at `budget` (its kappa and key_channel_ratio) for L tokens, G heads of
    // head_dim at element_size bytes; throws InfeasibleBudget when they cannot hold the observation window.
    int64_t kept_tokens(const CodecSettings& budget, int64_t n_tokens, int64_t n_kv_head, int64_t head_dim,
                        int64_t element_size) const;
};

}  // namespace varrate
