#pragma once
// StreamingLLM (Xiao et al. 2024) as kvpress's StreamingLLMPress: every KV head keeps the first 4 tokens
// (attention sinks) and the most recent int(L * kappa) - 4; the middle is evicted and the cache physically
// shrinks. No scores: a positional baseline.
#include "codec/method.h"

namespace varrate {

class StreamingLLMMethod : public CompressionMethod {
  public:
    static constexpr int64_t kSinks = 4;

    explicit StreamingLLMMethod(const CodecSettings& settings) : settings_(settings) {}
    std::string name() const override { return "streamingllm"; }
    const CodecSettings& settings() const override { return settings_; }
    std::shared_ptr<const LayerAnalysis> analyse(const LayerCapture& capture) override;
    LayerAllocation allocate(const LayerAnalysis& analysis, const CodecSettings& budget) override;
    LayerKV materialise(const LayerCapture& capture, const LayerAnalysis& analysis,
                        const LayerAllocation& allocation) override;

    // The kept positions for a context of L tokens at kappa: [kept] int64 CPU, ascending. Throws
    // InfeasibleBudget when int(L * kappa) cannot hold the sinks and one recent token.
    static at::Tensor kept_positions(int64_t n_tokens, double kappa);

  private:
    CodecSettings settings_;
};

}  // namespace varrate
