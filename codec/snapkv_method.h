#pragma once
// SnapKV eviction with kvpress's exact scoring (codec/salience.h): per KV head keep int(L * kappa)
// tokens = the observation window (always) + the top-scoring others, in original order. The cache
// physically shrinks to [n_kv_head, int(L * kappa), head_dim]. The scores and their order are the
// analysis; a budget only cuts the order.
#include "codec/method.h"

namespace varrate {

class SnapKVMethod : public CompressionMethod {
  public:
    explicit SnapKVMethod(const CodecSettings& settings) : settings_(settings) {}
    std::string name() const override { return "snapkv"; }
    const CodecSettings& settings() const override { return settings_; }
    std::shared_ptr<const LayerAnalysis> analyse(const LayerCapture& capture) override;
    LayerAllocation allocate(const LayerAnalysis& analysis, const CodecSettings& budget) override;
    LayerKV materialise(const LayerCapture& capture, const LayerAnalysis& analysis,
                        const LayerAllocation& allocation) override;

  private:
    CodecSettings settings_;
};

// Non-window positions by descending score, equal scores to the earlier position (a stable sort, on every
// device): [G, L - w] int64. scores [G, L - w] are snapkv_scores.
at::Tensor snapkv_order(const at::Tensor& scores);
// The positions each KV head keeps, ascending: [G, kept], from snapkv_order.
at::Tensor snapkv_keep_from_order(const at::Tensor& order, int64_t n_tokens, int64_t window, int64_t kept);

}  // namespace varrate
