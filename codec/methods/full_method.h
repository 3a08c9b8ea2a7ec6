#pragma once
// "full": no compression, the accuracy ceiling. The cache is returned as captured.
#include "codec/method.h"

namespace varrate {

class FullMethod : public CompressionMethod {
  public:
    explicit FullMethod(const CodecSettings& settings) : settings_(settings) {}
    std::string name() const override { return "full"; }
    const CodecSettings& settings() const override { return settings_; }
    std::shared_ptr<const LayerAnalysis> analyse(const LayerCapture& capture) override;
    LayerAllocation allocate(const LayerAnalysis& analysis, const CodecSettings& budget) override;
    LayerKV materialise(const LayerCapture& capture, const LayerAnalysis& analysis,
                        const LayerAllocation& allocation) override;

  private:
    CodecSettings settings_;
};

}  // namespace varrate
