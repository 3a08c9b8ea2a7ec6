#pragma once
// PerLayerCompression over SnapKV, as kvpress's PerLayerCompressionPress(SnapKVPress(), ratios): SnapKV in
// every layer, each layer at its own budget. The budgets come from the layer_profile setting scaled to kappa,
// kappa_l = kappa x p_l / mean(p), so that a sweep over kappa keeps the profile's shape and the layers keep
// kappa on average (kvpress's ratios r_l are the profile p_l = 1 - r_l at kappa = mean(p)); without a profile
// every layer keeps kappa (SnapKV itself). The cache physically shrinks to each layer's count.
#include "codec/methods/snapkv_method.h"

namespace varrate {

class SnapKVPerLayerMethod : public SnapKVMethod {
  public:
    explicit SnapKVPerLayerMethod(const CodecSettings& settings) : SnapKVMethod(settings) {}
    std::string name() const override { return "snapkv-per-layer"; }
    // Throws Error for a capture without the model's layer count, or a profile of another length.
    std::shared_ptr<const LayerAnalysis> analyse(const LayerCapture& capture) override;
    LayerAllocation allocate(const LayerAnalysis& analysis, const CodecSettings& budget) override;

    // Layer `layer`'s budget: kappa x p_l / mean(p) (kappa without a profile). Throws Error for a profile
    // whose length is not n_layers, and InfeasibleBudget when the layer's budget exceeds 1.
    static double layer_budget(const CodecSettings& s, int64_t n_layers, int64_t layer);
};

}  // namespace varrate
