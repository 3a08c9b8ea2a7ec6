#pragma once
// KIVI (Liu et al. 2024), the quantization axis the paper compares with: keys per channel and values per
// token quantized to b bits (min/max, groups of 32), the most recent 128 tokens kept at cache precision, held
// packed (codec/quantized_layer.h). Its footprint follows from the bits, not from kappa: ~19 % of a 16-bit
// cache at 2 bits and ~31 % at 4 bits for long contexts (the residual weighs more on short ones).
#include "codec/method.h"

namespace varrate {

class KiviMethod : public CompressionMethod {
  public:
    static constexpr int64_t kResidual = 128;  // recent tokens kept at cache precision (KIVI's R)

    KiviMethod(const CodecSettings& settings, int64_t bits);
    std::string name() const override { return "kivi" + std::to_string(bits_); }
    const CodecSettings& settings() const override { return settings_; }
    // Quantizes the layer (nothing depends on the budget).
    std::shared_ptr<const LayerAnalysis> analyse(const LayerCapture& capture) override;
    LayerAllocation allocate(const LayerAnalysis& analysis, const CodecSettings& budget) override;
    // The dequantized layer (reconstruct once).
    LayerKV materialise(const LayerCapture& capture, const LayerAnalysis& analysis,
                        const LayerAllocation& allocation) override;
    // The packed layer.
    std::shared_ptr<const LayerPrefix> store(const LayerCapture& capture, const LayerAnalysis& analysis,
                                             const LayerAllocation& allocation) override;

  private:
    CodecSettings settings_;
    int64_t bits_;
};

}  // namespace varrate
