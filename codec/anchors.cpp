#include "codec/anchors.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "core/error.h"

namespace varrate {

AnchorLayout make_anchor_layout(int64_t n_tokens, int64_t stride, int64_t window) {
    if (n_tokens <= 0)
        throw Error(fmt::format("anchor layout: context length must be positive, got {}", n_tokens));
    if (stride <= 0) throw Error(fmt::format("anchor layout: stride must be positive, got {}", stride));
    if (window < 0) throw Error(fmt::format("anchor layout: window must be >= 0, got {}", window));
    AnchorLayout l;
    l.n_tokens = n_tokens;
    auto cpu_long = at::TensorOptions().dtype(at::kLong);
    l.anchor_pos = at::arange(0, n_tokens, stride, cpu_long);
    at::Tensor pos = at::arange(n_tokens, cpu_long);
    l.exact_mask = (pos.remainder(stride) == 0).logical_or(pos >= n_tokens - window);
    l.exact_pos = pos.masked_select(l.exact_mask);
    l.coded_pos = pos.masked_select(l.exact_mask.logical_not());
    return l;
}

at::Tensor joint_vectors(const at::Tensor& keys_pre_rope, const at::Tensor& values) {
    const int64_t n_tok = keys_pre_rope.size(1);
    auto flat = [&](const at::Tensor& t) {  // [G, L, hd] -> [L, G*hd]
        return t.to(at::kFloat).permute({1, 0, 2}).reshape({n_tok, -1});
    };
    return at::cat({flat(keys_pre_rope), flat(values)}, 1).contiguous();
}

std::pair<at::Tensor, at::Tensor> split_joint(const at::Tensor& z, int64_t n_kv_head, int64_t head_dim) {
    const int64_t n = z.size(0), half = n_kv_head * head_dim;
    auto unflat = [&](const at::Tensor& t) {  // [n, G*hd] -> [G, n, hd]
        return t.reshape({n, n_kv_head, head_dim}).permute({1, 0, 2}).contiguous();
    };
    return {unflat(z.narrow(1, 0, half)), unflat(z.narrow(1, half, half))};
}

AnchorResiduals anchor_residuals(const at::Tensor& z, const AnchorLayout& layout, int64_t c, int64_t chunk) {
    if (c <= 0) throw Error(fmt::format("anchor search: number of anchors c must be positive, got {}", c));
    if (layout.n_anchors() < c)
        throw Error(fmt::format("anchor search: only {} anchors for c={} nearest", layout.n_anchors(), c));
    const auto dev = z.device();
    const at::Tensor zf = z.to(at::kFloat);
    const at::Tensor anchors = zf.index_select(0, layout.anchor_pos.to(dev));  // [n_a, D]
    const at::Tensor centre = anchors.mean(0, /*keepdim=*/true);               // [1, D]
    const at::Tensor a_c = anchors - centre;
    const at::Tensor a_sq = a_c.pow(2).sum(1);  // [n_a]
    const at::Tensor coded = layout.coded_pos.to(dev);
    const int64_t n_coded = coded.size(0), dim = zf.size(1);

    AnchorResiduals r;
    r.nearest = at::empty({n_coded, c}, z.options().dtype(at::kLong));
    r.mean = at::empty({n_coded, dim}, zf.options());
    r.residual = at::empty({n_coded, dim}, zf.options());
    for (int64_t begin = 0; begin < n_coded; begin += chunk) {
        const int64_t n = std::min(chunk, n_coded - begin);
        at::Tensor zt = zf.index_select(0, coded.narrow(0, begin, n));  // [n, D]
        at::Tensor zt_c = zt - centre;
        at::Tensor dist = zt_c.pow(2).sum(1, true) + a_sq.unsqueeze(0) - 2.0 * zt_c.mm(a_c.t());  // [n, n_a]
        at::Tensor order = std::get<1>(at::sort(dist, /*stable=*/true, /*dim=*/1, /*descending=*/false));
        at::Tensor nearest = order.narrow(1, 0, c).contiguous();  // [n, c]
        at::Tensor sum = anchors.index_select(0, nearest.select(1, 0));
        for (int64_t j = 1; j < c; ++j) sum = sum + anchors.index_select(0, nearest.select(1, j));
        at::Tensor mean = sum / static_cast<double>(c);
        r.nearest.narrow(0, begin, n).copy_(nearest);
        r.mean.narrow(0, begin, n).copy_(mean);
        r.residual.narrow(0, begin, n).copy_(zt - mean);
    }
    return r;
}

}  // namespace varrate
