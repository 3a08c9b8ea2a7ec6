#pragma once
// VarRate (paper Algorithm 1) and its uniform-rank ablation "flat", one implementation: anchors + window
// exact, every other token coded as its residual to the mean of its c nearest anchors, projected on the
// leading r_t rows of the layer's basis (the coefficients of the paper's full-rank projection that its
// truncation keeps, without computing the others); keys re-rotated to post-RoPE.
#include <memory>
#include <vector>

#include "codec/allocation_signal.h"
#include "codec/basis.h"
#include "codec/compressed_layer.h"
#include "codec/method.h"

namespace varrate {

enum class RankAllocation {
    Salience,  // VarRate: water-filling of B by a salience signal (the paper's: window attention)
    Uniform,   // flat: B spread as evenly as integers allow
    TopK,      // binary: the most salient tokens at R, the others at r_min (one in between takes the rest)
};

// Binary allocation: the floor((B - n r_min) / (R - r_min)) most salient tokens at R, the next one at r_min
// plus what is left, the others at r_min (sum B). s_hat [n]; returns [n] int64 on its device.
at::Tensor top_k_ranks(const at::Tensor& s_hat, int64_t budget, int64_t r_min, int64_t rank_cap);

class VarRateMethod : public CompressionMethod {
  public:
    // `registered_name`: what name() returns (default "varrate", or "flat" for uniform ranks). `scorer`:
    // the salience when `signal` is SalienceSignal::Scorer (varrate@<method>).
    VarRateMethod(const CodecSettings& settings, std::shared_ptr<const Basis> basis,
                  RankAllocation allocation, SalienceSignal signal = SalienceSignal::Window,
                  std::string registered_name = {}, bool across_layers = false, TokenSalience scorer = {});
    std::string name() const override { return name_; }
    const CodecSettings& settings() const override { return settings_; }
    // Salience, anchors, residuals and their energies. allocate() projects each coded token on the basis
    // up to its rank (its error follows from the coefficients; nothing is reconstructed) and materialise()
    // reconstructs from those coefficients.
    std::shared_ptr<const LayerAnalysis> analyse(const LayerCapture& capture) override;
    LayerAllocation allocate(const LayerAnalysis& analysis, const CodecSettings& budget) override;
    LayerKV materialise(const LayerCapture& capture, const LayerAnalysis& analysis,
                        const LayerAllocation& allocation) override;
    // With across_layers: each layer's budget from one water-filling of the summed budget over every
    // layer's coded tokens by their raw salience (scaled by its maximum over all layers, not per layer), so a
    // layer whose attention concentrates on more tokens gets more; the total stays kappa's. Unquantized
    // coefficients only. Without: empty (kappa in every layer).
    std::vector<double> layer_budgets(const std::vector<std::shared_ptr<const LayerAnalysis>>& layers,
                                      const CodecSettings& budget) override;
    // From the other allocation's analysis (VarRate <-> flat) on the same basis and settings: only the
    // salience differs.
    std::shared_ptr<const LayerAnalysis> derive(const LayerCapture& capture,
                                                const LayerAnalysis& other) override;

    // analyse() with an explicit raw salience [L] (any device; only its coded entries matter). A constant
    // salience gives exactly the flat codec's ranks and output. salience_ms is reported as the salience time.
    std::shared_ptr<const LayerAnalysis> analyse_with_salience(const LayerCapture& capture,
                                                               const at::Tensor& salience,
                                                               double salience_ms = 0);

    // Per-layer water-filling of the window salience (varrate itself; not flat, topk or the across-layer
    // variant, whose analyses the capture does not share).
    bool uses_window_salience() const override {
        return signal_ == SalienceSignal::Window && allocation_ == RankAllocation::Salience &&
               !across_layers_;
    }
    std::shared_ptr<const LayerAnalysis> analyse_with_window_salience(const LayerCapture& capture,
                                                                      const at::Tensor& salience) override {
        return analyse_with_salience(capture, salience);
    }

    // The layer held compressed at its accounted size (codec/compressed_layer.h) rather than reconstructed,
    // rotated as the capture's RoPE (its frequencies and its tables' dtype).
    std::shared_ptr<const LayerPrefix> store(const LayerCapture& capture, const LayerAnalysis& analysis,
                                             const LayerAllocation& allocation) override;

    // A self-calibrated basis is part of what a decoder of this context needs: charged to the budget at
    // cache precision (and used at that precision) unless paper_accounting.
    bool basis_charged() const;

    // Quantized coefficients are divided by this before grouping ([rank] fp32 on `device`: the square root of
    // the basis's spectrum, each row's typical coefficient magnitude), undefined when the basis has no
    // spectrum.
    at::Tensor coefficient_scale(int64_t layer, int64_t rank, const at::Device& device) const;

  private:
    // The raw salience [L] of the method's signal (or its scorer).
    at::Tensor raw_salience(const LayerCapture& capture) const;
    // The allocation's rank groups with their coefficients (projected now when it read its errors from a
    // table); throws when the allocation does not match the analysis.
    std::vector<RankGroup> coefficient_groups(const LayerAnalysis& analysis,
                                              const LayerAllocation& allocation);
    // The leading `rank` rows of layer's basis on `device` (fp32; rounded to the cache dtype when charged).
    const at::Tensor& basis_on(int64_t layer, int64_t rank, const at::Device& device,
                               at::ScalarType cache_dtype);
    // The same rows in bf16, held once per layer, for reconstructing a bf16 cache with bf16 GEMMs.
    const at::Tensor& bf16_basis_on(int64_t layer, int64_t rank, const at::Device& device);

    CodecSettings settings_;
    std::shared_ptr<const Basis> basis_;
    RankAllocation allocation_;
    // Flat's ranks are all B / n_coded (+1 for the first B mod n_coded): the store keeps none of them.
    bool uniform_ranks() const { return allocation_ == RankAllocation::Uniform; }
    SalienceSignal signal_;
    TokenSalience scorer_;
    std::string name_;
    bool across_layers_ = false;
    std::vector<at::Tensor> device_basis_;  // per layer: the leading R rows, resident on the compute device
    std::vector<at::ScalarType> device_basis_dtype_;  // per layer: the precision device_basis_ was rounded to
    std::vector<at::Tensor> bf16_basis_;              // per layer: device_basis_ rounded to bf16
    std::vector<at::Tensor>
        scaled_basis_;  // per layer: device_basis_ rows times coefficient_scale (quantized)
};

}  // namespace varrate
