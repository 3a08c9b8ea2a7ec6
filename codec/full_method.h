#pragma once
// "full": no compression, the accuracy ceiling. The cache is returned as captured.
#include "codec/method.h"

namespace varrate {

class FullMethod : public CompressionMethod {
  public:
    explicit FullMethod(const CodecSettings& settings) : settings_(settings) {}
    std::string name() const override { return "full"; }
    LayerResult compress(const LayerCapture& capture) override;

  private:
    CodecSettings settings_;
};

}  // namespace varrate
