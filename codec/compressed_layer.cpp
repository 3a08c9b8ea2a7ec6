#include "codec/compressed_layer.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>

#include "base/error.h"
#include "codec/anchor_sets.h"
#include "codec/anchors.h"
#include "codec/footprint.h"
#include "codec/method.h"
#include "codec/quantize.h"
#include "models/host_read.h"
#include "models/rope.h"

namespace varrate {

namespace {

int64_t bytes_of(const at::Tensor& t) {
    return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

// Ranks [begin, begin + count) of n uniform ranks summing to total: total / n each, one more for the first
// total mod n (integer_ranks' tie order for a constant signal). [count] int64 with `options`' device.
at::Tensor uniform_split(int64_t total, int64_t n, int64_t begin, int64_t count,
                         const at::TensorOptions& options) {
    const int64_t q = n > 0 ? total / n : 0, extra = n > 0 ? total % n : 0;
    return at::arange(begin, begin + count, options.dtype(at::kLong)).lt(extra).to(at::kLong).add_(q);
}

}  // namespace

CompressedLayer::CompressedLayer(Parts parts) : p_(std::move(parts)), cache_(new_chunk_cache()) {
    const auto where = fmt::format("compressed layer {}", p_.layer);
    const int64_t L = p_.n_tokens, G = p_.n_kv_head, hd = p_.head_dim;
    if (L <= 0 || G <= 0 || hd <= 0 || hd % 2 != 0)
        throw Error(fmt::format("{}: bad shape L={} n_kv_head={} head_dim={}", where, L, G, hd));
    if (p_.stride < 1 || p_.window < 0)
        throw Error(fmt::format("{}: bad layout stride={} window={}", where, p_.stride, p_.window));
    dim_ = 2 * G * hd;
    n_anchors_ = ceil_div(L, p_.stride);
    const int64_t head = std::max<int64_t>(L - p_.window, 0);  // positions before the window
    const int64_t n_coded = head - ceil_div(head, p_.stride);
    const int64_t n_exact = L - n_coded;
    auto check = [&](const at::Tensor& t, std::vector<int64_t> shape, const char* what) {
        if (!t.defined() || t.sizes().vec() != shape)
            throw Error(fmt::format("{}: {} has shape {}, expected [{}]", where, what, shape_str(t),
                                    fmt::join(shape, ", ")));
    };
    check(p_.exact_keys, {G, n_exact, hd}, "exact keys");
    check(p_.exact_values, {G, n_exact, hd}, "exact values");
    n_coded_ = n_coded;
    c_ = p_.anchors;
    if (c_ < 1 || c_ > n_anchors_)
        throw Error(
            fmt::format("{}: {} anchors per coded token, the layer has {} anchors", where, c_, n_anchors_));
    if (p_.index_bits < anchor_index_bits(n_anchors_) || p_.index_bits > 32)
        throw Error(fmt::format("{}: {}-bit anchor indices cannot address {} anchors (needs {} to 32 bits)",
                                where, p_.index_bits, n_anchors_, anchor_index_bits(n_anchors_)));
    if (p_.set_bits != 0 &&
        (anchor_set_bits(n_anchors_, c_) == 0 || p_.set_bits < anchor_set_bits(n_anchors_, c_) ||
         p_.set_bits > kMaxAnchorSetBits))
        throw Error(fmt::format("{}: {}-bit anchor sets cannot hold {} of {} anchors (needs {} to {} bits)",
                                where, p_.set_bits, c_, n_anchors_, anchor_set_bits(n_anchors_, c_),
                                kMaxAnchorSetBits));
    if (p_.rank_bits < 0 || p_.rank_bits > 32)
        throw Error(
            fmt::format("{}: {}-bit ranks (expected 0, for uniform ranks, to 32)", where, p_.rank_bits));
    if (p_.rank_bits == 0 && (p_.rank_total < 0 || p_.rank_total > n_coded * p_.basis.size(0)))
        throw Error(fmt::format("{}: uniform ranks summing to {} for {} coded tokens and a basis of {} rows",
                                where, p_.rank_total, n_coded, p_.basis.size(0)));
    if (p_.set_bits > 0)
        check(p_.nearest, {packed_bytes(n_coded, p_.set_bits)}, "packed anchor sets");
    else
        check(p_.nearest, {packed_bytes(n_coded * c_, p_.index_bits)}, "packed anchor indices");
    check(p_.ranks, {packed_bytes(n_coded, p_.rank_bits)}, "packed ranks");
    if (p_.nearest.scalar_type() != at::kByte || p_.ranks.scalar_type() != at::kByte)
        throw Error(fmt::format("{}: anchor indices and ranks must be packed uint8 streams", where));
    if (n_coded > 0) {
        // Once, when the store is built: a set's number past C(n, c) - 1 decodes to no set; an ordinal past
        // the anchors reads past them.
        const bool sets = p_.set_bits > 0;
        const at::Tensor bad = sets ? unpack_bits(p_.nearest, p_.set_bits, 0, n_coded)
                                          .to(at::kLong)
                                          .max()
                                          .ge(anchor_set_count(n_anchors_, c_))
                                    : nearest(0, n_coded).max().ge(n_anchors_);
        if (to_host(bad).item<bool>())
            throw Error(
                sets ? fmt::format("{}: an anchor set's number is not a set of {} of {} anchors", where, c_,
                                   n_anchors_)
                     : fmt::format("{}: an anchor index is past the layer's {} anchors", where, n_anchors_));
    }
    check(p_.inv_freq, {hd / 2}, "RoPE frequencies");
    if (quantized()) {
        if (!is_supported_bits(p_.coef_bits))
            throw Error(fmt::format("{}: coefficient bits {} is not 2, 3, 4, 8 or 16", where, p_.coef_bits));
        if (!p_.codes.defined() || p_.codes.dim() != 1 || p_.codes.scalar_type() != at::kByte)
            throw Error(fmt::format("{}: quantized coefficients need packed uint8 codes", where));
    } else if (!p_.coefficients.defined() || p_.coefficients.dim() != 1) {
        throw Error(fmt::format("{}: coefficients must be one flat array", where));
    }
    if (!p_.basis.defined() || p_.basis.dim() != 2 || p_.basis.size(1) != dim_)
        throw Error(fmt::format("{}: basis must be [R, {}]", where, dim_));
    // The block plan, on the host once: where each block's coefficients start and its widest rank.
    const at::Tensor host_ranks = to_host(ranks(0, n_coded)).contiguous();
    const int64_t* r = host_ranks.data_ptr<int64_t>();
    int64_t offset = 0, groups = 0;
    for (int64_t begin = 0; begin < n_coded; begin += kBlock) {
        Block b{begin, std::min(kBlock, n_coded - begin), offset, groups, 0};
        for (int64_t i = b.begin; i < b.begin + b.count; ++i) {
            if (r[i] < 0 || r[i] > p_.basis.size(0))
                throw Error(fmt::format("{}: coded token {} has rank {}, the basis {} rows", where, i, r[i],
                                        p_.basis.size(0)));
            b.width = std::max(b.width, r[i]);
            offset += r[i];
            groups += ceil_div(r[i], kQuantGroup);
        }
        b.n_coef = offset - b.coef_offset;
        blocks_.push_back(b);
    }
    sum_ranks_ = offset;
    for (const Block& b : blocks_) max_width_ = std::max(max_width_, b.width);
    if (p_.landmark_chunk < 0 || p_.select_tokens < 0)
        throw Error(fmt::format("{}: landmark chunk {} and selected tokens {} must be >= 0", where,
                                p_.landmark_chunk, p_.select_tokens));
    if (p_.select_tokens > 0 && p_.landmark_chunk == 0)
        throw Error(
            fmt::format("{}: selective attention over {} tokens needs landmarks", where, p_.select_tokens));
    if (p_.landmark_chunk > 0) {
        check(p_.landmarks, {G, ceil_div(n_coded, p_.landmark_chunk), 2, hd}, "landmarks");
    } else if (p_.landmarks.defined() && p_.landmarks.numel() > 0) {
        throw Error(fmt::format("{}: landmarks without a landmark chunk", where));
    }
    if (quantized()) {
        if (p_.codes.size(0) != packed_bytes(offset, p_.coef_bits))
            throw Error(fmt::format("{}: {} bytes of {}-bit codes for ranks summing to {} (expected {})",
                                    where, p_.codes.size(0), p_.coef_bits, offset,
                                    packed_bytes(offset, p_.coef_bits)));
        check(p_.group_scale, {groups}, "group scales");
        check(p_.group_min, {groups}, "group minima");
    } else if (offset != p_.coefficients.size(0)) {
        throw Error(fmt::format("{}: {} coefficients for ranks summing to {}", where, p_.coefficients.size(0),
                                offset));
    }
}

at::Tensor CompressedLayer::exact_order(int64_t n_tokens, int64_t stride, int64_t window) {
    // The anchors (0, stride, ...), then the window's other positions, ascending.
    const auto cpu_long = at::TensorOptions().dtype(at::kLong);
    const at::Tensor tail = at::arange(std::max<int64_t>(n_tokens - window, 0), n_tokens, cpu_long);
    return at::cat(
        {at::arange(0, n_tokens, stride, cpu_long), tail.masked_select(tail.remainder(stride) != 0)});
}

at::Tensor CompressedLayer::nearest(int64_t begin, int64_t count) const {
    if (p_.set_bits > 0)
        return decode_anchor_sets(unpack_bits(p_.nearest, p_.set_bits, begin, count), n_anchors_, c_);
    return unpack_bits(p_.nearest, p_.index_bits, begin * c_, count * c_).to(at::kLong).view({count, c_});
}

at::Tensor CompressedLayer::ranks(int64_t begin, int64_t count) const {
    if (p_.rank_bits > 0) return unpack_bits(p_.ranks, p_.rank_bits, begin, count).to(at::kLong);
    return uniform_split(p_.rank_total, n_coded_, begin, count, p_.ranks.options());
}

void CompressedLayer::pack_metadata(Parts& parts, const at::Tensor& nearest, const at::Tensor& ranks,
                                    int64_t n_anchors, int64_t rank_cap, bool uniform_ranks) {
    parts.anchors = nearest.dim() == 2 ? nearest.size(1) : 0;
    parts.index_bits = anchor_index_bits(n_anchors);
    parts.set_bits = anchor_set_stream_bits(n_anchors, parts.anchors);
    if (parts.set_bits > 0) {
        const at::Tensor sets = encode_anchor_sets(nearest, n_anchors);
        // A set's number stands for c distinct anchors: a repeated one (possible only in a malformed file)
        // would come back as another set. Checked once, on the host, as the store is packed.
        const at::Tensor sorted = std::get<0>(at::sort(nearest.to(at::kLong), 1));
        if (!to_host(decode_anchor_sets(sets, n_anchors, parts.anchors).eq(sorted).all()).item<bool>())
            throw Error(fmt::format("compressed layer {}: a coded token's {} anchors are not distinct",
                                    parts.layer, parts.anchors));
        parts.nearest = pack_bits(sets, parts.set_bits);
    } else {
        parts.nearest = pack_bits(nearest.reshape({-1}), parts.index_bits);
    }
    parts.rank_bits = rank_bits_for(rank_cap, uniform_ranks);
    const at::Tensor r = ranks.reshape({-1}).to(at::kLong);
    if (parts.rank_bits > 0) {
        parts.ranks = pack_bits(r, parts.rank_bits);
        parts.rank_total = 0;
        return;
    }
    const int64_t n = r.size(0);
    parts.rank_total = n > 0 ? to_host(r.sum()).item<int64_t>() : 0;
    parts.ranks = at::empty({0}, r.options().dtype(at::kByte));
    if (n == 0) return;
    if (!to_host(uniform_split(parts.rank_total, n, 0, n, r.options()).eq(r).all()).item<bool>())
        throw Error(fmt::format(
            "compressed layer {}: ranks stored as uniform are not the uniform split of their sum {}",
            parts.layer, parts.rank_total));
}

at::Tensor CompressedLayer::exact_positions() const {
    // exact_order's positions, derived on the store's device from sizes alone (no host data, so no copy per
    // call; not held: the store's bytes are what the budget counts). The anchors 0, stride, ..., then the
    // window's other positions: the k-th position that is not an anchor is k + k / (stride - 1) + 1.
    const auto index = p_.exact_keys.options().dtype(at::kLong);
    const at::Tensor anchors = at::arange(0, p_.n_tokens, p_.stride, index);
    const int64_t n_window = n_exact() - n_anchors_;
    if (n_window == 0) return anchors;
    const int64_t head = std::max<int64_t>(p_.n_tokens - p_.window, 0);
    const int64_t first =
        head - ceil_div(head, p_.stride);  // positions before the window that are not anchors
    const at::Tensor k = at::arange(first, first + n_window, index);
    return at::cat({anchors, k + k.div(p_.stride - 1, "floor") + 1});
}

at::Tensor CompressedLayer::coded_position_of(const at::Tensor& ordinals, int64_t stride) {
    // The j-th coded token sits after j / (stride - 1) + 1 anchors: p = j + j / (stride - 1) + 1.
    return ordinals + ordinals.div(stride - 1, "floor") + 1;
}

at::Tensor CompressedLayer::coded_positions(int64_t begin, int64_t count) const {
    return coded_position_of(at::arange(begin, begin + count, p_.exact_keys.options().dtype(at::kLong)),
                             p_.stride);
}

int64_t CompressedLayer::resident_bytes() const {
    return bytes_of(p_.exact_keys) + bytes_of(p_.exact_values) + bytes_of(p_.nearest) + bytes_of(p_.ranks) +
           bytes_of(p_.coefficients) + bytes_of(p_.codes) + bytes_of(p_.group_scale) +
           bytes_of(p_.group_min) + bytes_of(p_.landmarks);
}

int64_t CompressedLayer::padded_scalars() const {
    int64_t total = 0;
    for (const Block& b : blocks_) total += b.count * b.width;
    return total;
}

int64_t CompressedLayer::basis_bytes() const {
    return bytes_of(p_.basis);
}

int64_t CompressedLayer::scratch_bytes(int64_t n_head, int64_t n_q, int64_t n_tail) const {
    int64_t width = 0;
    for (const Block& b : blocks_) width = std::max(width, b.width);
    const int64_t f = 4;
    const int64_t scores = n_head * n_q * (n_tokens() + n_tail) * f * 2;       // scores and probabilities
    const int64_t exact = (n_exact() * dim_ + n_anchors_ * n_head * n_q) * f;  // rotated exact rows, weights
    const int64_t block = kBlock * (width + dim_ + 2 * p_.head_dim + c_ * p_.n_kv_head * p_.head_dim) * f;
    const int64_t sums = n_head * n_q * (p_.basis.size(0) + p_.head_dim) * f;
    return scores + exact + block + sums;
}

std::pair<at::Tensor, at::Tensor> CompressedLayer::rope_tables(const at::Tensor& positions) const {
    // As rope_cos_sin: fp32 angles position * inv_freq, duplicated halves, cos/sin rounded to the table
    // dtype.
    const at::Tensor inv = p_.inv_freq.to(positions.device(), at::kFloat);
    const at::Tensor angles = positions.to(at::kFloat).unsqueeze(1) * inv.unsqueeze(0);  // [n, hd/2]
    const at::Tensor full = at::cat({angles, angles}, 1);                                // [n, hd]
    return {full.cos().to(p_.rope_dtype).to(at::kFloat), full.sin().to(p_.rope_dtype).to(at::kFloat)};
}

at::Tensor CompressedLayer::anchor_vectors() const {
    // The anchors are the leading exact rows.
    return joint_vectors(p_.exact_keys.narrow(1, 0, n_anchors_), p_.exact_values.narrow(1, 0, n_anchors_));
}

at::Tensor CompressedLayer::dequantize_padded(const at::Tensor& codes, const at::Tensor& gstart,
                                              const at::Tensor& i, const at::Tensor& keep) const {
    // Each slot's group: its index along the token's rank / 32, past the token's first group.
    const at::Tensor group = (gstart.unsqueeze(1) + i.div(kQuantGroup, "floor"))
                                 .clamp_max(std::max<int64_t>(p_.group_scale.size(0) - 1, 0))
                                 .reshape({-1});
    return (codes.to(at::kFloat) * p_.group_scale.index_select(0, group).to(at::kFloat) +
            p_.group_min.index_select(0, group).to(at::kFloat))
        .view(keep.sizes())
        .mul_(keep);
}

at::Tensor CompressedLayer::padded_coefficients(const Block& b) const {
    const at::Tensor r = ranks(b.begin, b.count);                        // [n]
    const at::Tensor start = r.cumsum(0) - r + b.coef_offset;            // [n] exclusive
    const at::Tensor i = at::arange(b.width, r.options()).unsqueeze(0);  // [1, width]
    const at::Tensor keep = i < r.unsqueeze(1);                          // [n, width]
    if (quantized()) {
        // The block's codes, then each kept slot's group: token-local index / 32 past the token's first
        // group.
        const int64_t n_coef = b.n_coef;
        const at::Tensor codes = unpack_bits(p_.codes, p_.coef_bits, b.coef_offset, n_coef);  // [n_coef]
        const at::Tensor n_groups = (r + kQuantGroup - 1).div(kQuantGroup, "floor");
        const at::Tensor gstart = n_groups.cumsum(0) - n_groups + b.group_offset;  // [n]
        const at::Tensor local = (start - b.coef_offset).unsqueeze(1) + i;         // [n, width]
        const at::Tensor slot = local.clamp_max(std::max<int64_t>(n_coef - 1, 0)).reshape({-1});
        if (n_coef == 0) return at::zeros({b.count, b.width}, p_.basis.options().dtype(at::kFloat));
        return dequantize_padded(codes.index_select(0, slot), gstart, i, keep);
    }
    // Past its rank a token's index runs into the next token's coefficients (or is clamped): masked to 0.
    const at::Tensor idx = (start.unsqueeze(1) + i).clamp_max(p_.coefficients.size(0) - 1);
    return p_.coefficients.index_select(0, idx.reshape({-1}))
        .to(at::kFloat)
        .view({b.count, b.width})
        .mul_(keep);
}

at::Tensor CompressedLayer::joint_rows(const Block& b, const at::Tensor& near_all,
                                       const at::Tensor& anchors_joint, bool with_values) const {
    // z-bar: the mean of each token's anchors (a mean-mode embedding bag), then + C V over the used rows.
    const int64_t cols = with_values ? dim_ : dim_ / 2;
    const at::Tensor near = near_all.narrow(0, b.begin, b.count);  // [n, c]
    const at::Tensor offsets = at::arange(0, b.count * c_, c_, near.options());
    const at::Tensor table = anchors_joint.narrow(1, 0, cols);
    at::Tensor z = std::get<0>(at::embedding_bag(table, near.reshape({-1}), offsets, false, 1));  // [n, cols]
    if (b.width > 0) {
        const at::Tensor V = p_.basis.narrow(0, 0, b.width).narrow(1, 0, cols).to(at::kFloat);  // [w, cols]
        z.addmm_(padded_coefficients(b), V);
    }
    return z;
}

void CompressedLayer::score_exact_and_tail(const at::Tensor& qf, const at::Tensor& tail_keys, int64_t n_q,
                                           at::Tensor& scores) const {
    const int64_t n_exact = this->n_exact(), n_tail = tail_keys.size(1);
    {
        at::Tensor s = scores.narrow(2, 0, n_exact);
        at::bmm_out(s, qf, rotated_exact_keys().transpose(1, 2));
    }
    at::Tensor s = scores.narrow(2, scores.size(2) - n_tail, n_tail);
    at::bmm_out(s, qf, tail_keys.to(at::kFloat).transpose(1, 2));
    mask_future_tail(s, n_q, qf.size(1) / n_q);
}

at::Tensor CompressedLayer::exact_and_tail_output(const at::Tensor& p, const at::Tensor& tail_values) const {
    const int64_t n_tail = tail_values.size(1);
    at::Tensor out = at::bmm(p.narrow(2, 0, n_exact()), p_.exact_values.to(at::kFloat));  // [G, gq, hd]
    return out.baddbmm_(p.narrow(2, p.size(2) - n_tail, n_tail), tail_values.to(at::kFloat));
}

at::Tensor CompressedLayer::attend(const at::Tensor& q, const at::Tensor& tail_keys,
                                   const at::Tensor& tail_values, double scale) const {
    const int64_t H = q.size(0), n_q = q.size(1), hd = p_.head_dim, G = p_.n_kv_head, g = H / G;
    if (q.dim() != 3 || q.size(2) != hd || H % G != 0)
        throw Error(fmt::format("compressed layer {}: queries must be [k * {}, n, {}], got {}", p_.layer, G,
                                hd, shape_str(q)));
    if (!tail_keys.defined() || tail_keys.size(1) < n_q)
        throw Error(fmt::format("compressed layer {}: the tail must hold the {} queries' own entries",
                                p_.layer, n_q));
    const int64_t n_tail = tail_keys.size(1), gq = g * n_q;
    // Query heads of one KV head side by side: head h*g + j reads KV head h (HF's repeat_kv).
    const at::Tensor qf = q.to(at::kFloat).reshape({G, gq, hd});  // [G, g*n_q, hd]
    if (selective())
        return attend_selective(qf, tail_keys, tail_values, scale, n_q)
            .view({H, n_q, hd})
            .to(q.scalar_type());
    const at::Tensor anchors_joint = anchor_vectors();
    const at::Tensor near_all = nearest(0, n_coded_);  // [n_coded, c], decoded once for keys and values
    const int64_t n_exact = this->n_exact(), n_coded = this->n_coded(), n_all = n_exact + n_coded + n_tail;
    at::Tensor scores = at::empty({G, gq, n_all}, qf.options());  // [G, g*n_q, exact | coded | tail]
    score_exact_and_tail(qf, tail_keys, n_q, scores);
    for (const Block& b : blocks_) {
        const at::Tensor k_pre = joint_rows(b, near_all, anchors_joint, /*with_values=*/false)  // [n, G*hd]
                                     .view({b.count, G, hd})
                                     .permute({1, 0, 2});  // [G, n, hd]
        auto [cos, sin] = rope_tables(coded_positions(b.begin, b.count));
        at::Tensor s = scores.narrow(2, n_exact + b.begin, b.count);
        at::bmm_out(s, qf, apply_rope(k_pre, cos, sin).transpose(1, 2));
    }
    scores.mul_(scale);
    const at::Tensor p = scores.softmax(2);                  // [G, gq, n_all]
    at::Tensor out = exact_and_tail_output(p, tail_values);  // [G, gq, hd]
    if (n_coded > 0) {
        const at::Tensor pc = p.narrow(2, n_exact, n_coded);  // [G, gq, n_coded]
        // sum_t p_t vbar_t: each token's weight, over c, onto its anchors, then the anchors' values.
        const at::Tensor near = near_all.reshape({-1});  // [n_coded * c]
        at::Tensor w = at::zeros({G, gq, n_anchors_}, p.options());
        w.index_add_(2, near, pc.repeat_interleave(c_, 2), 1.0 / static_cast<double>(c_));
        out.baddbmm_(w, p_.exact_values.narrow(1, 0, n_anchors_).to(at::kFloat));
        // V_v^T sum_t p_t c_t, the coefficient sum formed block by block over each block's width.
        const int64_t R = p_.basis.size(0);
        at::Tensor sum = at::zeros({G * gq, R}, p.options());  // [G*gq, R]
        for (const Block& b : blocks_) {
            if (b.width == 0) continue;
            at::Tensor part = sum.narrow(1, 0, b.width);
            part.addmm_(pc.narrow(2, b.begin, b.count).reshape({G * gq, b.count}), padded_coefficients(b));
        }
        const at::Tensor Vv =
            p_.basis.narrow(1, G * hd, G * hd).to(at::kFloat).view({R, G, hd}).permute({1, 0, 2});
        out.baddbmm_(sum.view({G, gq, R}), Vv);  // [G, gq, R] x [G, R, hd]
    }
    return out.view({H, n_q, hd}).to(q.scalar_type());
}

LayerKV CompressedLayer::reconstruct() const {
    const int64_t G = p_.n_kv_head, hd = p_.head_dim, L = p_.n_tokens;
    const at::Tensor exact_k = p_.exact_keys.to(at::kFloat), exact_v = p_.exact_values.to(at::kFloat);
    const at::Tensor anchors_joint = anchor_vectors();
    const at::Tensor near_all = nearest(0, n_coded_);  // [n_coded, c]
    at::Tensor keys = at::empty({G, L, hd}, exact_k.options()), values = at::empty_like(keys);
    {
        const at::Tensor pos = exact_positions();
        auto [cos, sin] = rope_tables(pos);
        keys.index_copy_(1, pos, apply_rope(exact_k, cos, sin));
        values.index_copy_(1, pos, exact_v);
    }
    for (const Block& b : blocks_) {
        const at::Tensor z =
            joint_rows(b, near_all, anchors_joint, /*with_values=*/true).view({b.count, 2, G, hd});
        const at::Tensor pos = coded_positions(b.begin, b.count);
        auto [cos, sin] = rope_tables(pos);
        keys.index_copy_(1, pos, apply_rope(z.select(1, 0).permute({1, 0, 2}), cos, sin));
        values.index_copy_(1, pos, z.select(1, 1).permute({1, 0, 2}));
    }
    const auto dtype = p_.exact_keys.scalar_type();
    return {keys.to(dtype), values.to(dtype)};
}

}  // namespace varrate
