#pragma once
// VarRate (paper Algorithm 1) and its uniform-rank ablation "flat", one implementation: anchors + window
// exact, every other token coded as its residual to the mean of its c nearest anchors, projected on the
// leading r_t rows of the layer's basis (the coefficients of the paper's full-rank projection that its
// truncation keeps, without computing the others); keys re-rotated to post-RoPE.
#include <memory>
#include <vector>

#include "codec/basis.h"
#include "codec/compressed_layer.h"
#include "codec/method.h"

namespace varrate {

enum class RankAllocation {
    Salience,  // VarRate: water-filling of B by SnapKV window salience
    Uniform,   // flat: B spread as evenly as integers allow
};

class VarRateMethod : public CompressionMethod {
  public:
    VarRateMethod(const CodecSettings& settings, std::shared_ptr<const Basis> basis,
                  RankAllocation allocation);
    std::string name() const override { return allocation_ == RankAllocation::Salience ? "varrate" : "flat"; }
    const CodecSettings& settings() const override { return settings_; }
    // Salience, anchors, residuals and their energies. allocate() projects each coded token on the basis
    // up to its rank (its error follows from the coefficients; nothing is reconstructed) and materialise()
    // reconstructs from those coefficients.
    std::shared_ptr<const LayerAnalysis> analyse(const LayerCapture& capture) override;
    LayerAllocation allocate(const LayerAnalysis& analysis, const CodecSettings& budget) override;
    LayerKV materialise(const LayerCapture& capture, const LayerAnalysis& analysis,
                        const LayerAllocation& allocation) override;
    // From the other allocation's analysis (VarRate <-> flat) on the same basis and settings: only the
    // salience differs.
    std::shared_ptr<const LayerAnalysis> derive(const LayerCapture& capture,
                                                const LayerAnalysis& other) override;

    // analyse() with an explicit raw salience [L] (any device; only its coded entries matter). A constant
    // salience gives exactly the flat codec's ranks and output. salience_ms is reported as the salience time.
    std::shared_ptr<const LayerAnalysis> analyse_with_salience(const LayerCapture& capture,
                                                               const at::Tensor& salience,
                                                               double salience_ms = 0);

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
    std::vector<at::Tensor> device_basis_;  // per layer: the leading R rows, resident on the compute device
    std::vector<at::ScalarType> device_basis_dtype_;  // per layer: the precision device_basis_ was rounded to
    std::vector<at::Tensor> bf16_basis_;              // per layer: device_basis_ rounded to bf16
    std::vector<at::Tensor>
        scaled_basis_;  // per layer: device_basis_ rows times coefficient_scale (quantized)
};

}  // namespace varrate
