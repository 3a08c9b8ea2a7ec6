#pragma once
// Expected Attention (kvpress ExpectedAttentionPress), query-agnostic by design: future queries are modelled
// by the mean mu and covariance S of the prompt's pre-RoPE queries (the first kQueryStatsSkip positions left
// out), rotated by the RoPE rotation averaged over the next 512 positions. A key k's expected attention is
// softmax_t(k.mu / sqrt(d) + k^T S k / (2d)) over the non-sink tokens, averaged over its GQA group, then
// (score + epsilon) * ||v||; the sinks get the maximum + 1. As kvpress runs it for the paper, inside Ada-KV
// (epsilon 0.01): G * int(L * kappa) entries per layer, each head's safeguard first, the rest by one top-k
// over all heads (codec/adakv_method.h), held by a head-wise eviction store.
#include "codec/headwise_eviction.h"
#include "codec/method.h"

namespace varrate {

struct ExpectedAttentionOptions {
    int64_t n_future = 512;  // future positions the RoPE rotation is averaged over
    double epsilon =
        1e-2;  // added before the value-norm rescaling (the paper's setting; kvpress's default 0)
};

// Expected-attention scores of every token per KV head: [n_kv_head, L] fp32. Needs the capture's query
// statistics (query_mean, query_cov).
at::Tensor expected_attention_scores(const LayerCapture& capture,
                                     const ExpectedAttentionOptions& options = {});

class ExpectedAttentionMethod : public HeadwiseMethod<CompressionMethod> {
  public:
    explicit ExpectedAttentionMethod(const CodecSettings& settings) : settings_(settings) {}
    std::string name() const override { return "expected-attention"; }
    const CodecSettings& settings() const override { return settings_; }
    std::shared_ptr<const LayerAnalysis> analyse(const LayerCapture& capture) override;
    LayerAllocation allocate(const LayerAnalysis& analysis, const CodecSettings& budget) override;

  private:
    CodecSettings settings_;
};

}  // namespace varrate
