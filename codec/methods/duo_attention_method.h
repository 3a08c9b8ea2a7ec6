#pragma once
// DuoAttention (Xiao et al. 2024), as kvpress's DuoAttentionPress with on_the_fly_scoring: every KV head of
// every layer is either a retrieval head, which keeps all tokens, or a streaming head, which keeps the first
// streaming_sink and the last streaming_recent (settings; kvpress's on-the-fly pattern: 128 and 256). A
// head's score is how slowly its attention accumulates on a synthetic sequence: the mean pre-RoPE query and
// key (Qwen3: after the norms) repeated over kPatternLength positions and rotated, the last query's softmax
// over those keys, the mean of its cumulative sum, averaged over the KV head's query heads. The
// lowest-scoring heads across every layer stream. kvpress averages the means over 50 BookSum texts (a pattern
// per model, from a dataset this tool has no access to, computed once per model); here they come from the
// document being compressed (LayerCapture::query_mean_all and the pre-RoPE keys). The budget sets how many
// heads stream (kvpress's head_compression_ratio x heads): the fewest whose streaming brings the kept entries
// within kappa. With L <= sink + recent streaming keeps every token, and below (sink + recent) / L no count
// fits (InfeasibleBudget says the smallest kappa that does).
#include "codec/headwise_eviction.h"
#include "codec/method.h"

namespace varrate {

// Each KV head's DuoAttention score from the capture's means: [n_kv_head] fp32 on the capture's device.
// Needs keys_pre_rope and query_mean_all.
at::Tensor duo_attention_head_scores(const LayerCapture& capture);

class DuoAttentionMethod : public HeadwiseMethod<CompressionMethod> {
  public:
    // kvpress's on-the-fly scores: the synthetic sequence's length.
    static constexpr int64_t kPatternLength = 500;

    explicit DuoAttentionMethod(const CodecSettings& settings) : settings_(settings) {}
    std::string name() const override { return "duo-attention"; }
    const CodecSettings& settings() const override { return settings_; }
    std::shared_ptr<const LayerAnalysis> analyse(const LayerCapture& capture) override;
    // Streams the layer's lowest-scoring heads, as many as `budget.budget` leaves room for (layer_budgets
    // gives each layer its share of the selection across layers; alone, a layer meets kappa by itself), each
    // keeping `budget`'s streaming_sink and streaming_recent tokens.
    LayerAllocation allocate(const LayerAnalysis& analysis, const CodecSettings& budget) override;
    std::vector<double> layer_budgets(const std::vector<std::shared_ptr<const LayerAnalysis>>& layers,
                                      const CodecSettings& budget) override;

  private:
    CodecSettings settings_;
};

}  // namespace varrate
