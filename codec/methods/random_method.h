#pragma once
// Random eviction as kvpress's RandomPress(seed=0): every (KV head, token) scores an i.i.d. uniform draw,
// each KV head keeps its int(L * kappa) highest. kvpress seeds a fresh generator on every call, so every
// layer draws the same scores; so do we (CPU generator, moved to the compute device: the draw is the same on
// every device). kvpress's default is unseeded (a different run each time); a baseline that cannot be
// repeated is no baseline, so the seed is fixed at 0.
#include "codec/scorer_eviction.h"

namespace varrate {

class RandomMethod : public ScorerEviction {
  public:
    static constexpr uint64_t kSeed = 0;
    explicit RandomMethod(const CodecSettings& settings) : ScorerEviction(settings, "random") {}

  protected:
    at::Tensor scores(const LayerCapture& capture) const override;  // [G, L] uniform in [0, 1)
};

}  // namespace varrate
