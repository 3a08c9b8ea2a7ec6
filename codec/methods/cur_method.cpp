#include "codec/methods/cur_method.h"

#include <ATen/ATen.h>

namespace varrate {

namespace {

// [G, L] squared norms -> each divided by the sum over its window of kWindow (the last window zero-padded).
at::Tensor window_normalised(const at::Tensor& sq) {
    const int64_t G = sq.size(0), L = sq.size(1), w = CURMethod::kWindow;
    const int64_t padded = (L + w - 1) / w * w;
    const at::Tensor p = at::constant_pad_nd(sq, {0, padded - L}).reshape({G, padded / w, w});
    return (p / p.sum(-1, /*keepdim=*/true)).reshape({G, padded}).narrow(1, 0, L);
}

}  // namespace

at::Tensor CURMethod::scores(const LayerCapture& capture) const {
    const at::Tensor k2 = capture.keys.to(at::kFloat).pow(2).sum(-1);  // [G, L]
    const at::Tensor v2 = capture.values.to(at::kFloat).pow(2).sum(-1);
    at::Tensor s = window_normalised(k2) * window_normalised(v2);
    s = s / s.sum(-1, /*keepdim=*/true);
    s.narrow(1, 0, std::min<int64_t>(kSinks, s.size(1))).fill_(1.0);
    return s;  // [G, L]
}

}  // namespace varrate
