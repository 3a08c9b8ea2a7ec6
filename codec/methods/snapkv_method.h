#pragma once
// SnapKV eviction with kvpress's exact scoring (codec/salience.h): per KV head keep int(L * kappa)
// tokens = the observation window (always) + the top-scoring others, in original order. The cache
// physically shrinks to [n_kv_head, int(L * kappa), head_dim]. The scores and their order are the
// analysis; a budget only cuts the order.
#include "codec/method.h"

namespace varrate {

// SnapKV's analysis of a layer, shared by the methods built on its scores (PyramidKV, Ada-KV).
struct SnapKVAnalysis : LayerAnalysis {
    int64_t n_kv_head = 0, head_dim = 0, element_size = 0;
    int64_t n_layers = 0;      // the model's layers (LayerCapture::n_layers; 0 when the capture has none)
    at::Tensor scores;         // [G, L - w] fp32 on the compute device, snapkv_scores
    at::Tensor order;          // [G, L - w] int64, snapkv_order
    at::Tensor kv_sq;          // [G, L] fp32: each head's share of ||z_t||^2
    at::Tensor salience;       // [L] CPU fp32, the paper's salience (mean over heads, window at the max)
    at::Tensor salience_norm;  // [L] CPU fp32
};

class SnapKVMethod : public CompressionMethod {
  public:
    explicit SnapKVMethod(const CodecSettings& settings) : settings_(settings) {}
    std::string name() const override { return "snapkv"; }
    const CodecSettings& settings() const override { return settings_; }
    // A SnapKVAnalysis.
    std::shared_ptr<const LayerAnalysis> analyse(const LayerCapture& capture) override;
    LayerAllocation allocate(const LayerAnalysis& analysis, const CodecSettings& budget) override;
    LayerKV materialise(const LayerCapture& capture, const LayerAnalysis& analysis,
                        const LayerAllocation& allocation) override;

  protected:
    // SnapKV's analysis of `capture` into `a` (a derived method's analysis extends it).
    void analyse_into(SnapKVAnalysis& a, const LayerCapture& capture) const;
    // Throws Error when `budget`'s structural settings are not the method's.
    void check_budget_settings(const SnapKVAnalysis& a, const CodecSettings& budget) const;
    // Throws Error, naming what needs it (`reader`), for a capture that does not say how many layers the
    // model has (n_layers 0) or whose layer is outside them: per-layer budgets read both.
    void check_layer_count(const LayerCapture& capture, const std::string& reader) const;
    // Every KV head keeps `kept` tokens (the window and the top-scoring others), diagnostics named name().
    LayerAllocation allocate_kept(const SnapKVAnalysis& a, int64_t kept) const;
    // The same for given positions: kept [G, n] ascending (ChunkKV's whole chunks).
    LayerAllocation allocate_kept_positions(const SnapKVAnalysis& a, const at::Tensor& kept) const;

    CodecSettings settings_;
};

// Shared by the eviction methods (SnapKV, StreamingLLM): each KV head keeps `kept` [G, n_kept] ascending
// positions of the layer, physically.
// Per KV head and token ||k||^2 + ||v||^2 (pre-RoPE keys when captured): [G, L] fp32, what eviction loses.
at::Tensor eviction_kv_sq(const LayerCapture& capture);
// Counts, footprint and per-token error, rank and kept mask of an eviction (salience left to the method).
LayerDiagnostics eviction_diagnostics(const std::string& method, int64_t layer, const at::Tensor& kept,
                                      const at::Tensor& kv_sq, int64_t head_dim, int64_t element_size);
// The kept entries: keys/values [G, n_kept, head_dim].
LayerKV gather_kept(const LayerCapture& capture, const at::Tensor& kept);

// Non-window positions by descending score, equal scores to the earlier position (a stable sort, on every
// device): [G, L - w] int64. scores [G, L - w] are snapkv_scores.
at::Tensor snapkv_order(const at::Tensor& scores);
// The positions each KV head keeps, ascending: [G, kept], from snapkv_order.
at::Tensor snapkv_keep_from_order(const at::Tensor& order, int64_t n_tokens, int64_t window, int64_t kept);

}  // namespace varrate
