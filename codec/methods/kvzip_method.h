#pragma once
// KVzip (Kim et al. 2025, as kvpress's KVzipPress): query-agnostic eviction by context reconstruction. The
// scores come from an extra pass (core/probe.h: the context fed back after "Repeat the previous context
// exactly.", a token's score the largest attention weight a repeat query of its KV head's group puts on it).
// One selection across every layer, head and token: the lowest scores are dropped until kappa of all
// entries remain, so layers and heads keep different numbers (held by a head-wise eviction store,
// codec/headwise_eviction.h). The first 4 tokens (sinks) are never dropped; as the paper configures KVzip,
// neither are the last w_obs tokens (as SnapKV pins its window).
#include "codec/headwise_eviction.h"
#include "codec/method.h"

namespace varrate {

class KVzipMethod : public HeadwiseMethod<CompressionMethod> {
  public:
    static constexpr int64_t kSinks = 4;

    explicit KVzipMethod(const CodecSettings& settings) : settings_(settings) {}
    std::string name() const override { return "kvzip"; }
    const CodecSettings& settings() const override { return settings_; }
    // Needs LayerCapture::repeat_scores.
    std::shared_ptr<const LayerAnalysis> analyse(const LayerCapture& capture) override;
    // Reads the layer's share of the selection from `budget.budget` as layer_budgets() set it (an exact count
    // of kept entries over G * L); alone, a layer keeps its own top kappa of G * L.
    LayerAllocation allocate(const LayerAnalysis& analysis, const CodecSettings& budget) override;
    std::vector<double> layer_budgets(const std::vector<std::shared_ptr<const LayerAnalysis>>& layers,
                                      const CodecSettings& budget) override;

  private:
    CodecSettings settings_;
};

}  // namespace varrate
