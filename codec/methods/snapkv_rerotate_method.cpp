#include "codec/methods/snapkv_rerotate_method.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"

namespace varrate {

at::Tensor SnapKVRerotateMethod::rerotate(const at::Tensor& keys, const at::Tensor& kept,
                                          const at::Tensor& inv_freq) {
    const int64_t G = keys.size(0), hd = keys.size(2), n = kept.size(1), half = hd / 2;
    if (!inv_freq.defined() || inv_freq.numel() != half)
        throw Error(fmt::format("snapkv-rerotate: RoPE frequencies are {}, expected [{}]",
                                shape_str(inv_freq), half));
    const at::Tensor k = keys.gather(1, kept.unsqueeze(2).expand({G, n, hd})).to(at::kFloat);  // [G, n, hd]
    const at::Tensor delta = at::arange(n, kept.options()).unsqueeze(0).to(at::kFloat) - kept.to(at::kFloat);
    const at::Tensor freqs = delta.unsqueeze(2) * inv_freq.to(k.device(), at::kFloat);  // [G, n, hd / 2]
    const at::Tensor emb = at::cat({freqs, freqs}, 2);
    const at::Tensor rotated_half = at::cat({k.narrow(2, half, half).neg(), k.narrow(2, 0, half)}, 2);
    return (k * emb.cos() + rotated_half * emb.sin()).to(keys.scalar_type());
}

LayerKV SnapKVRerotateMethod::materialise(const LayerCapture& capture, const LayerAnalysis& analysis,
                                          const LayerAllocation& allocation) {
    LayerKV kv = SnapKVMethod::materialise(capture, analysis, allocation);
    kv.keys = rerotate(capture.keys, allocation.kept, capture.rope_inv_freq);
    sync_for_timing(kv.keys, settings_.precise_timing);
    return kv;
}

}  // namespace varrate
