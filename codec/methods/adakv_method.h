#pragma once
// Ada-KV (Feng et al. 2024) over SnapKV, as kvpress's AdaKVPress(SnapKVPress): SnapKV's scores
// (codec/salience.h), and per layer G * int(L * kappa) entries kept in all, shared out unevenly among the KV
// heads: every head first secures its safeguard, its top int(alpha * int(L * kappa)) scores (at least 1;
// alpha 0.20), then one top-k over the scores of all heads of the layer takes the rest. The observation
// window scores above every other token (kvpress pads it with the maximum score + 1), so every head keeps
// it: its positions count inside the safeguard and the budget. The heads then keep different numbers of
// tokens: the layer is held by a head-wise eviction store (codec/headwise_eviction.h) that decoding attends
// through. Equal scores go to the earlier position within a head and to the earlier (head, position) across
// heads (kvpress: torch.topk's order).
#include "codec/headwise_eviction.h"
#include "codec/methods/snapkv_method.h"

namespace varrate {

class AdaKVMethod : public HeadwiseMethod<SnapKVMethod> {
  public:
    static constexpr double kAlphaSafeguard = 0.20;

    explicit AdaKVMethod(const CodecSettings& settings) : HeadwiseMethod(settings) {}
    std::string name() const override { return "adakv"; }
    std::shared_ptr<const LayerAnalysis> analyse(const LayerCapture& capture) override;
    // A head-wise allocation (kept padded, kept_valid); throws InfeasibleBudget as SnapKV does.
    LayerAllocation allocate(const LayerAnalysis& analysis, const CodecSettings& budget) override;

    // Per head, the tokens the safeguard secures: max(1, int(n_kept * alpha)), the window included.
    static int64_t safeguard_tokens(int64_t n_kept);
    // The keep mask [G, L] bool: the window, each head's top safeguard_tokens(n_kept) - w others by `order`
    // (snapkv_order), then the first of `global_order` (positions g * (L - w) + t of the flattened
    // [G, L - w] scores by descending score, ties to the earlier) not secured yet, G * n_kept in all.
    static at::Tensor keep_mask(const at::Tensor& order, const at::Tensor& global_order, int64_t n_tokens,
                                int64_t window, int64_t n_kept);
};

}  // namespace varrate
