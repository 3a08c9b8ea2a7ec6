#pragma once
// KeyDiff (Park et al. 2025) as kvpress's KeyDiffPress (its one-shot form; the paper's block-wise iteration
// is kvpress's BlockPress around it): every KV head keeps the int(L * kappa) tokens whose post-RoPE keys are
// least similar (cosine) to the head's mean normalised key, in original order.
#include "codec/scorer_eviction.h"

namespace varrate {

class KeyDiffMethod : public ScorerEviction {
  public:
    explicit KeyDiffMethod(const CodecSettings& settings) : ScorerEviction(settings, "keydiff") {}

  protected:
    at::Tensor scores(const LayerCapture& capture) const override;  // [G, L]: -cos(k, anchor)
};

}  // namespace varrate
