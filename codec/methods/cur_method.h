#pragma once
// CurDKV (Sengupta et al. 2025) as kvpress's CURPress with its defaults (kv_product, local approximation over
// windows of 16, 4 sinks, no random projection): a token's score is the product of its key's and its value's
// squared norms, each normalised within its window of 16 consecutive tokens (approximate leverage), the
// product normalised over the context; the first 4 tokens score 1 (kept).
#include "codec/scorer_eviction.h"

namespace varrate {

class CURMethod : public ScorerEviction {
  public:
    static constexpr int64_t kSinks = 4;
    static constexpr int64_t kWindow = 16;
    explicit CURMethod(const CodecSettings& settings) : ScorerEviction(settings, "cur") {}

  protected:
    at::Tensor scores(const LayerCapture& capture) const override;  // [G, L]
};

}  // namespace varrate
