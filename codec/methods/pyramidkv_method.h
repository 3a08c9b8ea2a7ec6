#pragma once
// PyramidKV (Cai et al. 2024) as kvpress's PyramidKVPress: SnapKV's scores and kept sets (codec/salience.h,
// codec/snapkv_method.h), with the number kept per KV head set per layer by a linear depth schedule at the
// same mean as SnapKV's: lower layers keep more, higher layers fewer. The cache physically shrinks to each
// layer's count. The schedule needs the model's layer count (LayerCapture::n_layers).
#include "codec/methods/snapkv_method.h"

namespace varrate {

class PyramidKVMethod : public SnapKVMethod {
  public:
    static constexpr int64_t kBeta = 20;  // kvpress's default: the pyramid's steepness (min = mean / beta)

    explicit PyramidKVMethod(const CodecSettings& settings) : SnapKVMethod(settings) {}
    std::string name() const override { return "pyramidkv"; }
    // Throws Error for a capture without the model's layer count (n_layers 0) or with a layer outside it.
    std::shared_ptr<const LayerAnalysis> analyse(const LayerCapture& capture) override;
    LayerAllocation allocate(const LayerAnalysis& analysis, const CodecSettings& budget) override;

    // Tokens kept per KV head at `layer` of `n_layers` (the window included), as kvpress's
    // PyramidKVPress.get_layer_budget at compression_ratio 1 - kappa, window w = obs_window:
    //   mean = L * kappa, min = mean / beta, max = 2 * mean - min; when max >= L - w: max = L - w and
    //   min = 2 * mean - max; the schedule is valid when L >= max >= min >= w, and then keeps
    //   round(max - layer * (max - min) / (n_layers - 1)) (round half to even, as Python's round);
    //   otherwise every layer keeps SnapKV's count as kvpress computes it there, max(1, round(L * kappa)).
    // The layers then keep L * kappa on average, as SnapKV does (up to rounding). Throws InfeasibleBudget
    // when the count is below the always-kept window (as SnapKV) and Error for kappa outside (0, 1].
    static int64_t layer_kept_tokens(const CodecSettings& s, int64_t n_tokens, int64_t n_layers,
                                     int64_t layer);
    // Whether the schedule is invalid at this L and kappa (L >= max >= min >= w fails: min = L kappa / beta
    // below the window w, i.e. L kappa < beta w), so that every layer keeps SnapKV's count.
    static bool schedule_falls_back(const CodecSettings& s, int64_t n_tokens);
};

}  // namespace varrate
