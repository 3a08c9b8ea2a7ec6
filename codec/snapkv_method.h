#pragma once
// SnapKV eviction with kvpress's exact scoring (codec/salience.h): per KV head keep int(L * kappa)
// tokens = the observation window (always) + the top-scoring others, in original order. The cache
// physically shrinks to [n_kv_head, int(L * kappa), head_dim].
#include "codec/method.h"

namespace varrate {

class SnapKVMethod : public CompressionMethod {
  public:
    explicit SnapKVMethod(const CodecSettings& settings) : settings_(settings) {}
    std::string name() const override { return "snapkv"; }
    LayerResult compress(const LayerCapture& capture) override;

  private:
    CodecSettings settings_;
};

// The positions each KV head keeps, ascending: [G, kept]. scores [G, L - w] are snapkv_scores.
at::Tensor snapkv_keep_indices(const at::Tensor& scores, int64_t n_tokens, int64_t window, int64_t kept);

}  // namespace varrate
