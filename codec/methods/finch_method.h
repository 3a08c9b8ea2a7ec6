#pragma once
// FINCH (Corallo & Papotti 2024) as kvpress's FinchPress with its defaults (no chunking, normalised scores,
// keys rerotated): SnapKV whose window is the question. Each context token scores the window queries'
// softmax weight on it (fp32, over every key they see), each query's weight multiplied by its position
// (kvpress's normalisation), averaged over the window and the KV head's group, without pooling; the window
// is kept (scored above everything). Each KV head keeps its int(L x kappa) best, and their keys are turned
// to positions 0..n-1 as KeyRerotation's are, so decoding continues at n (renumbers_positions). The window
// is LayerCapture::question_tokens when the prefix ends with the question (query-aware); without one
// (query-agnostic) the last obs_window tokens stand in for it, as SnapKV's window does.
#include "codec/scorer_eviction.h"

namespace varrate {

class FinchMethod : public ScorerEviction {
  public:
    explicit FinchMethod(const CodecSettings& settings) : ScorerEviction(settings, "finch") {}
    LayerKV materialise(const LayerCapture& capture, const LayerAnalysis& analysis,
                        const LayerAllocation& allocation) override;

  protected:
    at::Tensor scores(const LayerCapture& capture) const override;  // [G, L], the window at max + 1
};

}  // namespace varrate
