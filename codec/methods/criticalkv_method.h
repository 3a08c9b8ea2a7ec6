#pragma once
// CriticalKV (Feng et al. 2025) over SnapKV, as kvpress's CriticalKVPress(SnapKVPress()) ("critical_snapkv"
// in its evaluation registry): two stages on SnapKV's scores (the window padded with their maximum + 1). Each
// KV head first keeps its int(kappa * L * 0.5) highest-scoring tokens (at least 1); the rest of its int(L *
// kappa) go to the highest (score + 1e-4) x ||W_o v||_1, the L1 norm of what the token's value adds to the
// residual stream through each query head's slice of the output projection, averaged over the KV head's query
// heads. The cache physically shrinks as SnapKV's. critical_adakv_method.h shares the stages out per head as
// Ada-KV.
#include "codec/methods/snapkv_method.h"

namespace varrate {

// SnapKV's analysis plus what the second stage reads.
struct CriticalKVAnalysis : SnapKVAnalysis {
    at::Tensor value_norm;    // [G, L] fp32, CriticalKVMethod::projected_value_norm
    at::Tensor global_order;  // [G * (L - w)] int64: the non-window scores of all heads, descending
                              // (CriticalAdaKV only: Ada-KV's budgets)
};

class CriticalKVMethod : public SnapKVMethod {
  public:
    static constexpr double kEpsilon = 1e-4;    // added to the scores before the rescaling
    static constexpr double kFirstStage = 0.5;  // share of each head's budget kept by score alone

    explicit CriticalKVMethod(const CodecSettings& settings) : SnapKVMethod(settings) {}
    std::string name() const override { return "criticalkv"; }
    // A CriticalKVAnalysis.
    std::shared_ptr<const LayerAnalysis> analyse(const LayerCapture& capture) override;
    LayerAllocation allocate(const LayerAnalysis& analysis, const CodecSettings& budget) override;

    // Per KV head and token, ||v W_o[h]||_1 over the hidden size for each query head h of the KV head, mean
    // over those heads: [G, L] fp32. Throws Error when the capture has no output projection.
    static at::Tensor projected_value_norm(const LayerCapture& capture);
    // The two stages' keep mask [G, L] bool: per head g, its top first[g] positions by SnapKV's padded score
    // (the window first, equal scores to the earlier position), then the rest of counts[g] by (score +
    // 1e-4) x value_norm. first, counts: [G] int64.
    static at::Tensor keep_mask(const CriticalKVAnalysis& a, int64_t window, const at::Tensor& first,
                                const at::Tensor& counts);

  protected:
    // The analysis, with global_order when `global_order` (what Ada-KV's head budgets read).
    std::shared_ptr<const LayerAnalysis> analyse_critical(const LayerCapture& capture,
                                                          bool global_order) const;
};

}  // namespace varrate
