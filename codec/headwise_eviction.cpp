#include "codec/headwise_eviction.h"

#include <limits>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"
#include "models/host_read.h"

namespace varrate {

namespace {

int64_t bytes_of(const at::Tensor& t) {
    return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

}  // namespace

HeadwiseKeep headwise_keep(const at::Tensor& keep_mask) {
    if (!keep_mask.defined() || keep_mask.dim() != 2 || keep_mask.scalar_type() != at::kBool)
        throw Error(fmt::format("head-wise eviction: the keep mask must be [n_kv_head, L] bool, got {}",
                                shape_str(keep_mask)));
    const int64_t n_tok = keep_mask.size(1);
    const at::Tensor counts = keep_mask.sum(1);  // [G]
    const int64_t n_max = to_host(counts.max()).item<int64_t>();
    if (n_max == 0) throw Error("head-wise eviction: the keep mask keeps no position in any KV head");
    // Each kept position goes to its slot, the number kept before it in its row (no sort: LibTorch 1.13's
    // stable sort of a byte tensor does not keep the order); the others go to a spare column, dropped.
    const at::Tensor slot =
        (keep_mask.to(at::kLong).cumsum(1) - 1).masked_fill(keep_mask.logical_not(), n_max);
    const at::Tensor pos = at::arange(n_tok, counts.options()).unsqueeze(0).expand(keep_mask.sizes());
    at::Tensor buf = at::full({keep_mask.size(0), n_max + 1}, n_tok - 1, counts.options());
    buf.scatter_(1, slot, pos);
    HeadwiseKeep out;
    out.valid = at::arange(n_max, counts.options()).unsqueeze(0) < counts.unsqueeze(1);  // [G, n_max]
    out.positions = buf.narrow(1, 0, n_max).masked_fill(out.valid.logical_not(), n_tok - 1).contiguous();
    return out;
}

at::Tensor headwise_mask_from_order(const at::Tensor& order, const at::Tensor& counts, int64_t n_tokens) {
    if (order.dim() != 2 || counts.dim() != 1 || counts.size(0) != order.size(0))
        throw Error(fmt::format("head-wise eviction: order {} and counts {} do not match", shape_str(order),
                                shape_str(counts)));
    const at::Tensor c = counts.to(order.device(), at::kLong);
    const at::Tensor take = at::arange(order.size(1), order.options()).unsqueeze(0) < c.unsqueeze(1);
    at::Tensor mask = at::zeros({order.size(0), n_tokens}, order.options().dtype(at::kBool));
    mask.scatter_(1, order, take);
    return mask;
}

LayerDiagnostics mask_eviction_diagnostics(const std::string& method, int64_t layer,
                                           const at::Tensor& keep_mask, const at::Tensor& kv_sq,
                                           int64_t head_dim, int64_t element_size) {
    const int64_t n_kv = kv_sq.size(0), n_tok = kv_sq.size(1), dim = 2 * n_kv * head_dim;
    // A token kept by some heads stores their share of D; an evicted head's part is lost.
    const at::Tensor lost = (kv_sq * keep_mask.logical_not()).sum(0);
    const at::Tensor err = (lost / kv_sq.sum(0).clamp_min(1e-30)).sqrt();
    const at::Tensor rank = keep_mask.to(at::kLong).sum(0) * (2 * head_dim);
    const at::Tensor rd = rank.to(at::kDouble);
    const at::Tensor stats =
        to_host(at::stack({err.to(at::kDouble).mean(), rd.min(), rd.max(), rd.mean(), rd.sum()}));
    const double* st = stats.data_ptr<double>();
    const int64_t entries = static_cast<int64_t>(st[4]) / (2 * head_dim);  // kept (head, token) pairs
    LayerDiagnostics d;
    d.method = method;
    d.layer = layer;
    d.n_tokens = n_tok;
    d.dim = dim;
    d.budget_B = entries * 2 * head_dim;
    d.sum_ranks = d.budget_B;
    d.n_exact = entries / n_kv;
    d.n_coded = 0;
    d.min_rank = static_cast<int64_t>(st[1]);
    d.max_rank = static_cast<int64_t>(st[2]);
    d.mean_rank = st[3];
    d.stored_bytes = entries * 2 * head_dim * element_size;
    d.full_bytes = n_tok * dim * element_size;
    d.footprint = static_cast<double>(entries) / static_cast<double>(n_kv * n_tok);
    d.mean_rel_error = st[0];
    d.rank = to_host(rank);
    d.exact = to_host(keep_mask.all(0));
    d.rel_error = to_host(err);
    d.kept = to_host(keep_mask);
    return d;
}

LayerAllocation headwise_allocation(const std::string& method, int64_t layer, const at::Tensor& keep_mask,
                                    const at::Tensor& kv_sq, int64_t head_dim, int64_t element_size) {
    if (keep_mask.dim() != 2 || keep_mask.sizes() != kv_sq.sizes())
        throw Error(fmt::format("{}: layer {} keep mask {} does not match the tokens {}", method, layer,
                                shape_str(keep_mask), shape_str(kv_sq)));
    HeadwiseKeep keep = headwise_keep(keep_mask);
    LayerAllocation out;
    out.kept = std::move(keep.positions);
    out.kept_valid = std::move(keep.valid);
    out.diagnostics = mask_eviction_diagnostics(method, layer, keep_mask, kv_sq, head_dim, element_size);
    return out;
}

LayerKV headwise_materialise(const LayerCapture& capture, const LayerAllocation& allocation) {
    if (!allocation.kept.defined() || !allocation.kept_valid.defined())
        throw Error(fmt::format(
            "head-wise eviction: layer {} allocation has no padded positions and validity", capture.layer));
    const at::Tensor& kept = allocation.kept;  // [G, n_max]
    const at::Tensor idx = kept.unsqueeze(2).expand({kept.size(0), kept.size(1), capture.keys.size(2)});
    const at::Tensor pad = allocation.kept_valid.logical_not().unsqueeze(2);
    return {capture.keys.gather(1, idx).masked_fill_(pad, 0),
            capture.values.gather(1, idx).masked_fill_(pad, 0)};
}

std::shared_ptr<const LayerPrefix> headwise_store(const LayerCapture& capture,
                                                  const LayerAllocation& allocation) {
    const LayerKV kv = headwise_materialise(capture, allocation);
    HeadwiseEvictedLayer::Parts p;
    p.layer = capture.layer;
    p.n_context = capture.keys.size(1);
    p.keys = kv.keys;
    p.values = kv.values;
    p.valid = allocation.kept_valid.to(kv.keys.device());
    return std::make_shared<const HeadwiseEvictedLayer>(std::move(p));
}

HeadwiseEvictedLayer::HeadwiseEvictedLayer(Parts parts) : p_(std::move(parts)) {
    const auto where = fmt::format("head-wise evicted layer {}", p_.layer);
    if (!p_.keys.defined() || p_.keys.dim() != 3 || p_.keys.size(0) <= 0 || p_.keys.size(2) <= 0)
        throw Error(
            fmt::format("{}: keys must be [n_kv_head, n_max, head_dim], got {}", where, shape_str(p_.keys)));
    if (!p_.values.defined() || p_.values.sizes() != p_.keys.sizes() ||
        p_.values.scalar_type() != p_.keys.scalar_type())
        throw Error(fmt::format("{}: values {} do not match keys {}", where, shape_str(p_.values),
                                shape_str(p_.keys)));
    if (!p_.valid.defined() || p_.valid.scalar_type() != at::kBool || p_.valid.dim() != 2 ||
        p_.valid.size(0) != p_.keys.size(0) || p_.valid.size(1) != p_.keys.size(1))
        throw Error(fmt::format("{}: the validity mask must be [{}, {}] bool, got {}", where, p_.keys.size(0),
                                p_.keys.size(1), shape_str(p_.valid)));
    if (p_.n_context < p_.keys.size(1))
        throw Error(fmt::format("{}: {} entries per head from a context of {}", where, p_.keys.size(1),
                                p_.n_context));
}

at::Tensor HeadwiseEvictedLayer::counts() const {
    return to_host(p_.valid.sum(1));
}

int64_t HeadwiseEvictedLayer::resident_bytes() const {
    return bytes_of(p_.keys) + bytes_of(p_.values) + bytes_of(p_.valid);
}

at::Tensor HeadwiseEvictedLayer::attend(const at::Tensor& q, const at::Tensor& tail_keys,
                                        const at::Tensor& tail_values, double scale) const {
    const int64_t G = p_.keys.size(0), hd = p_.keys.size(2), n_max = p_.keys.size(1);
    if (q.dim() != 3 || q.size(2) != hd || q.size(0) % G != 0)
        throw Error(fmt::format("head-wise evicted layer {}: queries must be [k * {}, n, {}], got {}",
                                p_.layer, G, hd, shape_str(q)));
    const int64_t H = q.size(0), n_q = q.size(1), g = H / G, gq = g * n_q;
    if (!tail_keys.defined() || tail_keys.dim() != 3 || tail_keys.size(1) < n_q)
        throw Error(fmt::format("head-wise evicted layer {}: the tail must hold the {} queries' own entries",
                                p_.layer, n_q));
    const int64_t n_tail = tail_keys.size(1);
    const at::Tensor qf = q.to(at::kFloat).reshape({G, gq, hd});           // [G, g*n_q, hd]
    at::Tensor scores = at::empty({G, gq, n_max + n_tail}, qf.options());  // [G, gq, store | tail]
    {
        at::Tensor s = scores.narrow(2, 0, n_max);
        at::bmm_out(s, qf, p_.keys.to(at::kFloat).transpose(1, 2));
        s.masked_fill_(p_.valid.logical_not().unsqueeze(1), -std::numeric_limits<float>::infinity());
    }
    {
        at::Tensor s = scores.narrow(2, n_max, n_tail);
        at::bmm_out(s, qf, tail_keys.to(at::kFloat).transpose(1, 2));
        mask_future_tail(s, n_q, g);
    }
    scores.mul_(scale);
    const at::Tensor p = scores.softmax(2);                                     // [G, gq, n_all]
    at::Tensor out = at::bmm(p.narrow(2, 0, n_max), p_.values.to(at::kFloat));  // [G, gq, hd]
    out.baddbmm_(p.narrow(2, n_max, n_tail), tail_values.to(at::kFloat));
    return out.view({H, n_q, hd}).to(q.scalar_type());
}

LayerKV HeadwiseEvictedLayer::reconstruct() const {
    const at::Tensor c = counts();
    const int64_t lo = c.min().item<int64_t>(), hi = c.max().item<int64_t>();  // host-side: counts() read it
    if (lo != hi)
        throw Error(fmt::format(
            "head-wise evicted layer {}: its KV heads keep between {} and {} tokens, which no dense cache "
            "holds exactly; decode through the store (attention reads it as it is) rather than densifying it",
            p_.layer, lo, hi));
    const int64_t G = p_.keys.size(0), hd = p_.keys.size(2);
    const at::Tensor sel = p_.valid.unsqueeze(2).expand_as(p_.keys);
    return {p_.keys.masked_select(sel).view({G, lo, hd}), p_.values.masked_select(sel).view({G, lo, hd})};
}

}  // namespace varrate
