#include "codec/methods/lagkv_method.h"

#include <ATen/ATen.h>

namespace varrate {

namespace {

// [G, P, lag, hd] partitions -> [G, P - 1, lag]: each token of partitions 0..P-2 scaled by the next
// partition's per-channel range, its std over channels (unbiased, as torch's), softmax over the partition.
at::Tensor lag_relative_scores(const at::Tensor& parts) {
    const int64_t P = parts.size(1);
    const at::Tensor ref = parts.narrow(1, 1, P - 1);
    const at::Tensor cur = parts.narrow(1, 0, P - 1);
    const at::Tensor lo = std::get<0>(ref.min(-2, /*keepdim=*/true));  // [G, P - 1, 1, hd]
    const at::Tensor hi = std::get<0>(ref.max(-2, /*keepdim=*/true));
    return ((cur - lo) / (hi - lo)).std(-1, /*unbiased=*/true).softmax(-1);
}

}  // namespace

at::Tensor LagKVMethod::scores(const LayerCapture& capture) const {
    const int64_t G = capture.keys.size(0), L = capture.keys.size(1), hd = capture.keys.size(2);
    const auto opts = capture.keys.options().dtype(at::kFloat);
    if (L < kSinks + 2 * lag_) {
        // Too short to compare partitions: the sinks, then recency.
        at::Tensor s = at::ones({G, L}, opts);
        if (L > kSinks)
            s.narrow(1, kSinks, L - kSinks)
                .copy_(
                    (at::arange(L - kSinks, opts) / static_cast<double>(L - kSinks)).expand({G, L - kSinks}));
        return s;
    }
    const int64_t end = kSinks + (L - kSinks) / lag_ * lag_;
    const int64_t tail = lag_ + L - end;  // the last whole partition and the remainder
    const int64_t P = (end - kSinks) / lag_;
    auto parts = [&](const at::Tensor& x) {  // [G, P, lag, hd]
        return x.narrow(1, kSinks, end - kSinks).to(at::kFloat).reshape({G, P, lag_, hd});
    };
    const at::Tensor kv =
        (lag_relative_scores(parts(capture.keys)) + lag_relative_scores(parts(capture.values))) / 2;
    // Rank within the partition (argsort of argsort), over lag: [G, P - 1, lag].
    const at::Tensor rank = kv.argsort(/*dim=*/-1, /*descending=*/false)
                                .argsort(/*dim=*/-1, /*descending=*/false)
                                .to(at::kFloat) /
                            static_cast<double>(lag_);
    return at::cat(
        {at::ones({G, kSinks}, opts), rank.reshape({G, (P - 1) * lag_}), at::ones({G, tail}, opts)},
        1);  // [G, L]
}

}  // namespace varrate
