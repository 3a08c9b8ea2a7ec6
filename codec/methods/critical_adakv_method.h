#pragma once
// CriticalAdaKV over SnapKV, as kvpress's CriticalAdaKVPress(SnapKVPress()) ("critical_adakv_snapkv"):
// Ada-KV's head budgets (adakv_method.h: each head's safeguard, then one top-k over every head's SnapKV
// scores, G * int(L * kappa) in all), then CriticalKV's two stages within each head's budget: its top
// max(safeguard, int(budget * 0.5)) by SnapKV's score, the rest by (score + 1e-4) x the projected value norm.
// The heads keep different numbers of tokens: held by a head-wise eviction store.
#include "codec/headwise_eviction.h"
#include "codec/methods/criticalkv_method.h"

namespace varrate {

class CriticalAdaKVMethod : public HeadwiseMethod<CriticalKVMethod> {
  public:
    explicit CriticalAdaKVMethod(const CodecSettings& settings) : HeadwiseMethod(settings) {}
    std::string name() const override { return "critical-adakv"; }
    // CriticalKV's analysis with the layer's global order (Ada-KV's budgets).
    std::shared_ptr<const LayerAnalysis> analyse(const LayerCapture& capture) override {
        return analyse_critical(capture, /*global_order=*/true);
    }
    // A head-wise allocation (kept padded, kept_valid); throws InfeasibleBudget as Ada-KV does.
    LayerAllocation allocate(const LayerAnalysis& analysis, const CodecSettings& budget) override;
};

}  // namespace varrate
