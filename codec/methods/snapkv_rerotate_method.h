#pragma once
// KeyRerotation over SnapKV, as kvpress's KeyRerotationPress(SnapKVPress()): SnapKV's kept tokens, their keys
// rotated from their positions to 0..n-1 in kept order (each post-RoPE key turned by RoPE's angles for
// i - p_i, RoPE's frequencies in fp32, as kvpress), so that the cache reads as a context of n tokens and
// decoding continues at position n (the registry's renumbers_positions; kvpress's pipeline takes the cache's
// length as the context's). Values as SnapKV keeps them.
#include "codec/methods/snapkv_method.h"

namespace varrate {

class SnapKVRerotateMethod : public SnapKVMethod {
  public:
    explicit SnapKVRerotateMethod(const CodecSettings& settings) : SnapKVMethod(settings) {}
    std::string name() const override { return "snapkv-rerotate"; }
    LayerKV materialise(const LayerCapture& capture, const LayerAnalysis& analysis,
                        const LayerAllocation& allocation) override;

    // keys [G, L, hd] post-RoPE at positions 0..L-1, kept [G, n] ascending: the kept keys turned to
    // positions 0..n-1, [G, n, hd] in keys' dtype. inv_freq: [hd / 2] fp32.
    static at::Tensor rerotate(const at::Tensor& keys, const at::Tensor& kept, const at::Tensor& inv_freq);
};

}  // namespace varrate
