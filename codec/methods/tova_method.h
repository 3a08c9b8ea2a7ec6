#pragma once
// TOVA (Oren et al. 2024) as kvpress's TOVAPress: tokens ranked by the attention the last token pays them,
// averaged over all query heads, the same ranking for every KV head; the last token itself scores above
// every other (kvpress's padding), and each KV head keeps int(L * kappa) tokens in original order.
#include "codec/scorer_eviction.h"

namespace varrate {

class TovaMethod : public ScorerEviction {
  public:
    explicit TovaMethod(const CodecSettings& settings) : ScorerEviction(settings, "tova") {}

  protected:
    at::Tensor scores(const LayerCapture& capture) const override;  // [G, L]
};

}  // namespace varrate
