#pragma once
// Approximate leverage scores (Chari & Van Durme 2025, Compactor's geometric half) as kvpress's
// LeverageScorePress (sketch 48): per KV head, the pre-RoPE keys centred over the context, projected on a
// Gaussian sketch Phi [head_dim, 48] / sqrt(48), and each token scored by its leverage x_t^T (X^T X)^-1 x_t
// (Cholesky with jitter 1e-2, raised tenfold until it factors), clamped at 0; high leverage (an outlier
// direction) is kept. kvpress draws Phi from torch's global generator unseeded; we draw it from a CPU
// generator seeded with 0 in every layer (as torch.manual_seed(0) before each layer), moved to the device.
#include "codec/scorer_eviction.h"

namespace varrate {

class LeverageMethod : public ScorerEviction {
  public:
    static constexpr int64_t kSketch = 48;
    static constexpr uint64_t kSeed = 0;
    explicit LeverageMethod(const CodecSettings& settings) : ScorerEviction(settings, "leverage") {}

  protected:
    at::Tensor scores(const LayerCapture& capture) const override;  // [G, L], >= 0
};

// The leverage scores of pre-RoPE keys [G, n, hd] (n >= 1), centred over those n: [G, n] fp32, >= 0.
at::Tensor leverage_scores(const at::Tensor& keys_pre_rope);

}  // namespace varrate
