#pragma once
// Knorm (Devoto et al. 2024) as kvpress's KnormPress: every KV head keeps the int(L * kappa) tokens whose
// post-RoPE keys have the smallest L2 norm (a low key norm goes with high attention), in original order.
#include "codec/scorer_eviction.h"

namespace varrate {

class KnormMethod : public ScorerEviction {
  public:
    explicit KnormMethod(const CodecSettings& settings) : ScorerEviction(settings, "knorm") {}

  protected:
    at::Tensor scores(const LayerCapture& capture) const override;  // [G, L]: -||k||
};

}  // namespace varrate
