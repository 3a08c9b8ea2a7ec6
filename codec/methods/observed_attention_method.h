#pragma once
// ObservedAttention (H2O's heavy hitters, Zhang et al. 2023) as kvpress's ObservedAttentionPress: a token's
// score is the attention weight every prefill query puts on it, summed and divided by how many queries see
// it, averaged over its KV head's group; each KV head keeps its int(L * kappa) highest. kvpress reads the
// weights from eager attention; our runtime's attention keeps no matrix, so an extra pass computes them
// (core/probe.h, "observed": LayerCapture::observed_attention).
#include "codec/scorer_eviction.h"

namespace varrate {

class ObservedAttentionMethod : public ScorerEviction {
  public:
    explicit ObservedAttentionMethod(const CodecSettings& settings)
        : ScorerEviction(settings, "observed-attention") {}

  protected:
    // Needs LayerCapture::observed_attention.
    at::Tensor scores(const LayerCapture& capture) const override;  // [G, L]
};

}  // namespace varrate
