#include "codec/channel_pruned_layer.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"
#include "codec/method.h"
#include "models/host_read.h"

namespace varrate {

int64_t channel_pruned_bytes(int64_t n_tokens, int64_t n_kv_head, int64_t head_dim, int64_t n_kept,
                             int64_t element_size) {
    return n_kv_head * (n_tokens * (n_kept + head_dim) * element_size + n_kept);
}

ChannelPrunedLayer::ChannelPrunedLayer(Parts parts) : p_(std::move(parts)) {
    const std::string who = fmt::format("channel-pruned layer {}", p_.layer);
    if (!p_.values.defined() || p_.values.dim() != 3)
        throw Error(
            fmt::format("{}: values must be [n_kv_head, L, head_dim], got {}", who, shape_str(p_.values)));
    const int64_t G = p_.values.size(0), L = p_.values.size(1), hd = p_.values.size(2);
    if (hd != p_.head_dim || hd > 256)
        throw Error(fmt::format("{}: values have {} channels for a head_dim of {} (at most 256)", who, hd,
                                p_.head_dim));
    if (!p_.keys.defined() || p_.keys.dim() != 3 || p_.keys.size(0) != G || p_.keys.size(1) != L ||
        p_.keys.size(2) > hd)
        throw Error(fmt::format("{}: keys must be [{}, {}, n_kept <= {}], got {}", who, G, L, hd,
                                shape_str(p_.keys)));
    if (p_.keys.scalar_type() != p_.values.scalar_type() || p_.keys.device() != p_.values.device())
        throw Error(fmt::format("{}: keys and values differ in dtype or device", who));
    const int64_t n_kept = p_.keys.size(2);
    if (!p_.channels.defined() || p_.channels.scalar_type() != at::kByte ||
        p_.channels.sizes() != at::IntArrayRef{G, n_kept})
        throw Error(fmt::format("{}: channels must be [{}, {}] uint8, got {}", who, G, n_kept,
                                shape_str(p_.channels)));
    if (n_kept > 0) {
        const at::Tensor c = to_host(p_.channels).to(at::kLong);
        const bool ascending =
            n_kept == 1 || (c.narrow(1, 1, n_kept - 1) > c.narrow(1, 0, n_kept - 1)).all().item<bool>();
        if (!ascending || c.max().item<int64_t>() >= hd)
            throw Error(fmt::format("{}: each head's kept channels must be ascending and below {}", who, hd));
    }
}

int64_t ChannelPrunedLayer::resident_bytes() const {
    auto bytes = [](const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); };
    return bytes(p_.keys) + bytes(p_.channels) + bytes(p_.values);
}

at::Tensor ChannelPrunedLayer::attend(const at::Tensor& q, const at::Tensor& tail_keys,
                                      const at::Tensor& tail_values, double scale) const {
    const int64_t G = p_.values.size(0), L = length(), hd = p_.head_dim, n_kept = kept_channels();
    if (q.dim() != 3 || q.size(2) != hd || q.size(0) % G != 0)
        throw Error(fmt::format("channel-pruned layer {}: queries must be [k * {}, n, {}], got {}", p_.layer,
                                G, hd, shape_str(q)));
    const int64_t H = q.size(0), n_q = q.size(1), g = H / G, gq = g * n_q;
    if (!tail_keys.defined() || tail_keys.dim() != 3 || tail_keys.size(1) < n_q)
        throw Error(fmt::format("channel-pruned layer {}: the tail must hold the {} queries' own entries",
                                p_.layer, n_q));
    const int64_t n_tail = tail_keys.size(1);
    const at::Tensor qf = q.to(at::kFloat).reshape({G, gq, hd});  // [G, g*n_q, hd]
    // Each query's kept channels: the pruned ones multiply zeros.
    const at::Tensor idx = p_.channels.to(at::kLong).unsqueeze(1).expand({G, gq, n_kept});
    const at::Tensor q_kept = qf.gather(2, idx);                       // [G, gq, n_kept]
    at::Tensor scores = at::empty({G, gq, L + n_tail}, qf.options());  // [G, gq, store | tail]
    {
        at::Tensor s = scores.narrow(2, 0, L);
        at::bmm_out(s, q_kept, p_.keys.to(at::kFloat).transpose(1, 2));
    }
    {
        at::Tensor s = scores.narrow(2, L, n_tail);
        at::bmm_out(s, qf, tail_keys.to(at::kFloat).transpose(1, 2));
        mask_future_tail(s, n_q, g);
    }
    scores.mul_(scale);
    const at::Tensor p = scores.softmax(2);                                 // [G, gq, L + n_tail]
    at::Tensor out = at::bmm(p.narrow(2, 0, L), p_.values.to(at::kFloat));  // [G, gq, hd]
    out.baddbmm_(p.narrow(2, L, n_tail), tail_values.to(at::kFloat));
    return out.view({H, n_q, hd}).to(q.scalar_type());
}

LayerKV ChannelPrunedLayer::reconstruct() const {
    const int64_t G = p_.values.size(0), L = length(), n_kept = kept_channels();
    at::Tensor keys = at::zeros(p_.values.sizes(), p_.values.options());  // [G, L, hd]
    keys.scatter_(2, p_.channels.to(at::kLong).unsqueeze(1).expand({G, L, n_kept}), p_.keys);
    return {keys, p_.values};
}

}  // namespace varrate
