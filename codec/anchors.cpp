#include "codec/anchors.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"
#include "codec/gemm.h"

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
    const int64_t n_kv = keys_pre_rope.size(0), n_tok = keys_pre_rope.size(1), hd = keys_pre_rope.size(2);
    // One fp32 buffer, each half filled by a single converting copy (no intermediate fp32 tensors).
    at::Tensor z = at::empty({n_tok, 2, n_kv, hd}, keys_pre_rope.options().dtype(at::kFloat));
    z.select(1, 0).copy_(keys_pre_rope.permute({1, 0, 2}));
    z.select(1, 1).copy_(values.permute({1, 0, 2}));
    return z.view({n_tok, 2 * n_kv * hd});  // [L, D]
}

std::pair<at::Tensor, at::Tensor> split_joint(const at::Tensor& z, int64_t n_kv_head, int64_t head_dim) {
    const int64_t n = z.size(0), half = n_kv_head * head_dim;
    auto unflat = [&](const at::Tensor& t) {  // [n, G*hd] -> [G, n, hd]
        return t.reshape({n, n_kv_head, head_dim}).permute({1, 0, 2}).contiguous();
    };
    return {unflat(z.narrow(1, 0, half)), unflat(z.narrow(1, half, half))};
}

namespace {

// Exact (distance, ordinal) keys in one int64 each, so a plain top-k picks the c smallest distances with
// ties to the lower ordinal on every device, as a stable sort would, without sorting whole rows. The fp32
// bits become an int32 ordered like the float (negative values, possible after cancellation, flip their
// magnitude bits: xor with the sign smeared over them), in the high half; the ordinal fills the low half.
// Shifts and bitwise ops only: they vectorise where int64 multiplies and selects do not.
at::Tensor packed_distance_keys(const at::Tensor& dist) {  // [n, n_a] fp32 -> [n, n_a] int64
    const at::Tensor bits = (dist + 0.0).view(at::kInt);   // + 0.0 turns -0.0 into +0.0
    const at::Tensor ordered = bits.bitwise_xor(at::bitwise_right_shift(bits, 31).bitwise_and_(0x7FFFFFFF));
    const at::Tensor ordinal = at::arange(dist.size(1), bits.options().dtype(at::kLong));
    return at::bitwise_left_shift(ordered.to(at::kLong), 32).bitwise_or_(ordinal.unsqueeze(0));
}

}  // namespace

at::Tensor centred_anchor_means(const at::Tensor& centred_anchors, const at::Tensor& nearest) {
    // One fused gather-and-average (mean-mode embedding bag).
    const int64_t n = nearest.size(0), c = nearest.size(1);
    const at::Tensor offsets = at::arange(0, n * c, c, nearest.options());
    return std::get<0>(at::embedding_bag(centred_anchors, nearest.reshape({-1}), offsets,
                                         /*scale_grad_by_freq=*/false, /*mode=*/1));  // [n, D]
}

void anchor_means_out(at::Tensor& out, const AnchorResiduals& r, const at::Tensor& nearest) {
    at::add_out(out, centred_anchor_means(r.centred_anchors, nearest), r.centre);
}

AnchorResiduals anchor_residuals(const at::Tensor& z, const AnchorLayout& layout, int64_t c, int64_t chunk,
                                 bool with_mean, bool onednn_gemm) {
    if (c <= 0) throw Error(fmt::format("anchor search: number of anchors c must be positive, got {}", c));
    if (layout.n_anchors() < c)
        throw Error(fmt::format("anchor search: only {} anchors for c={} nearest", layout.n_anchors(), c));
    if (chunk <= 0) throw Error(fmt::format("anchor search: chunk must be positive, got {}", chunk));
    const auto dev = z.device();
    const at::Tensor zf = z.to(at::kFloat);
    const at::Tensor anchors = zf.index_select(0, layout.anchor_pos.to(dev));  // [n_a, D]
    const at::Tensor centre = anchors.mean(0, /*keepdim=*/true);               // [1, D]
    const at::Tensor a_c = anchors - centre;
    const at::Tensor a_c_t = a_c.t().contiguous();  // [D, n_a]
    const at::Tensor a_sq = a_c.pow(2).sum(1);      // [n_a]
    const at::Tensor coded = layout.coded_pos.to(dev);
    const int64_t n_coded = coded.size(0), dim = zf.size(1);
    const auto long_opts = coded.options();

    AnchorResiduals r;
    r.centre = centre;
    r.centred_anchors = a_c;
    r.nearest = at::empty({n_coded, c}, long_opts);
    if (with_mean) r.mean = at::empty({n_coded, dim}, zf.options());
    r.residual = at::empty({n_coded, dim}, zf.options());
    r.energy = at::empty({n_coded}, zf.options().dtype(at::kDouble));
    // Everything below works on centred vectors, which removes most of the cancellation: the chunk's rows
    // are centred as they are gathered, the anchors' mean is taken of centred anchors, and the residual is
    // the difference of the two; z-bar gets the centre back.
    for (int64_t begin = 0; begin < n_coded; begin += chunk) {
        const int64_t n = std::min(chunk, n_coded - begin);
        const at::Tensor zc = zf.index_select(0, coded.narrow(0, begin, n)).sub_(centre);  // [n, D]
        // |a|^2 - 2 z.a in fp32 and one GEMM; |z|^2 is the same for every anchor of a row, so leaving it out
        // changes no ranking and avoids adding a large term before comparing.
        at::Tensor dist;  // [n, n_a]
        if (onednn_gemm) {
            dist = a_sq.unsqueeze(0).expand({n, a_sq.size(0)}).contiguous();
            gemm_out(dist, zc, a_c_t, /*beta=*/1.0, /*alpha=*/-2.0, /*onednn=*/true);
        } else {
            dist = at::addmm(a_sq.unsqueeze(0), zc, a_c_t, /*beta=*/1.0, /*alpha=*/-2.0);
        }
        const at::Tensor best = std::get<1>(
            at::topk(packed_distance_keys(dist), c, 1, /*largest=*/false, /*sorted=*/true));  // [n, c]
        r.nearest.narrow(0, begin, n).copy_(best);
        const at::Tensor m = centred_anchor_means(a_c, best);  // [n, D]
        if (with_mean) {
            at::Tensor mean_rows = r.mean.narrow(0, begin, n);
            at::add_out(mean_rows, m, centre);
        }
        at::Tensor res_rows = r.residual.narrow(0, begin, n);
        at::sub_out(res_rows, zc, m);
        r.energy.narrow(0, begin, n).copy_(res_rows.norm(2, {1})).square_();
    }
    return r;
}

}  // namespace varrate
