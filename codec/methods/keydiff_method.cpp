#include "codec/methods/keydiff_method.h"

#include <ATen/ATen.h>

namespace varrate {

at::Tensor KeyDiffMethod::scores(const LayerCapture& capture) const {
    // torch's F.normalize (eps 1e-12 on the norm) and F.cosine_similarity (eps 1e-8 on each norm).
    const at::Tensor k = capture.keys.to(at::kFloat);  // [G, L, hd]
    const at::Tensor unit = k / k.norm(2, {-1}, /*keepdim=*/true).clamp_min(1e-12);
    const at::Tensor anchor = unit.mean(1, /*keepdim=*/true);  // [G, 1, hd]
    const at::Tensor dot = (k * anchor).sum(-1);               // [G, L]
    const at::Tensor norms = k.norm(2, {-1}).clamp_min(1e-8) * anchor.norm(2, {-1}).clamp_min(1e-8);
    return (dot / norms).neg();
}

}  // namespace varrate
