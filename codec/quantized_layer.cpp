#include "codec/quantized_layer.h"

#include <algorithm>
#include <limits>

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "base/error.h"
#include "codec/method.h"
#include "codec/quantize.h"

namespace varrate {

namespace {

int64_t bytes_of(const at::Tensor& t) {
    return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

}  // namespace

int64_t QuantizedLayer::value_group(int64_t head_dim) {
    return head_dim % kQuantGroup == 0 ? kQuantGroup : head_dim;
}

QuantizedLayer::Parts QuantizedLayer::quantize(const at::Tensor& keys, const at::Tensor& values, int64_t bits,
                                               int64_t residual, int64_t layer) {
    if (!keys.defined() || keys.dim() != 3 || !values.defined() || values.sizes() != keys.sizes())
        throw Error(fmt::format("kivi: layer {} keys {} and values {} must be [n_kv_head, L, head_dim]",
                                layer, shape_str(keys), shape_str(values)));
    const int64_t G = keys.size(0), L = keys.size(1), hd = keys.size(2), gv = value_group(hd);
    Parts p;
    p.layer = layer;
    p.n_tokens = L;
    p.n_kv_head = G;
    p.head_dim = hd;
    p.bits = bits;
    p.n_quant = L > residual ? (L - residual) / kTokenGroup * kTokenGroup : 0;
    const int64_t nq = p.n_quant, ng = nq / kTokenGroup;
    // Keys per channel: [G, nq, hd] -> [nq / 32, G, hd, 32], one group per row of 32 tokens.
    const at::Tensor k =
        keys.narrow(1, 0, nq).to(at::kFloat).view({G, ng, kTokenGroup, hd}).permute({1, 0, 3, 2});
    QuantizedGroups kq = quantize_groups(k.reshape({-1, kTokenGroup}), bits);
    p.key_codes = pack_bits(kq.codes, bits);
    p.key_scale = kq.scale.view({ng, G, hd});
    p.key_min = kq.min.view({ng, G, hd});
    // Values per token: [G, nq, hd] -> [nq, G, hd / gv, gv].
    const at::Tensor v = values.narrow(1, 0, nq).to(at::kFloat).permute({1, 0, 2});
    QuantizedGroups vq = quantize_groups(v.reshape({-1, gv}), bits);
    p.value_codes = pack_bits(vq.codes, bits);
    p.value_scale = vq.scale.view({nq, G, hd / gv});
    p.value_min = vq.min.view({nq, G, hd / gv});
    // The residual owns its memory (the capture it came from is dropped).
    p.residual_keys = keys.narrow(1, nq, L - nq).clone();
    p.residual_values = values.narrow(1, nq, L - nq).clone();
    return p;
}

QuantizedLayer::QuantizedLayer(Parts parts) : p_(std::move(parts)) {
    const auto where = fmt::format("quantized layer {}", p_.layer);
    const int64_t L = p_.n_tokens, G = p_.n_kv_head, hd = p_.head_dim, nq = p_.n_quant;
    if (L <= 0 || G <= 0 || hd <= 0 || nq < 0 || nq > L || nq % kTokenGroup != 0)
        throw Error(fmt::format("{}: bad shape L={} n_kv_head={} head_dim={} quantized tokens {}", where, L,
                                G, hd, nq));
    if (!is_supported_bits(p_.bits))
        throw Error(fmt::format("{}: {} bits is not 2, 3, 4 or 8", where, p_.bits));
    auto check = [&](const at::Tensor& t, std::vector<int64_t> shape, const char* what) {
        if (!t.defined() || t.sizes().vec() != shape)
            throw Error(fmt::format("{}: {} has shape {}, expected [{}]", where, what, shape_str(t),
                                    fmt::join(shape, ", ")));
    };
    const int64_t codes = nq * G * hd, gv = value_group(hd);
    check(p_.key_codes, {packed_bytes(codes, p_.bits)}, "key codes");
    check(p_.value_codes, {packed_bytes(codes, p_.bits)}, "value codes");
    check(p_.key_scale, {nq / kTokenGroup, G, hd}, "key scales");
    check(p_.key_min, {nq / kTokenGroup, G, hd}, "key minima");
    check(p_.value_scale, {nq, G, hd / gv}, "value scales");
    check(p_.value_min, {nq, G, hd / gv}, "value minima");
    check(p_.residual_keys, {G, L - nq, hd}, "residual keys");
    check(p_.residual_values, {G, L - nq, hd}, "residual values");
}

int64_t QuantizedLayer::resident_bytes() const {
    return bytes_of(p_.key_codes) + bytes_of(p_.value_codes) + bytes_of(p_.key_scale) + bytes_of(p_.key_min) +
           bytes_of(p_.value_scale) + bytes_of(p_.value_min) + bytes_of(p_.residual_keys) +
           bytes_of(p_.residual_values);
}

int64_t QuantizedLayer::scratch_bytes(int64_t n_head, int64_t n_q, int64_t n_tail) const {
    const int64_t scores = n_head * n_q * (p_.n_tokens + n_tail) * 4 * 2;  // scores and probabilities
    // A block's codes as int64, their bit expansion (3 bits: 8 x a byte) and the dequantized fp32 rows.
    const int64_t block = std::min(kBlock, p_.n_quant) * p_.n_kv_head * p_.head_dim * (8 + 8 + 4);
    return scores + block;
}

at::Tensor QuantizedLayer::keys_block(int64_t begin, int64_t count) const {
    const int64_t G = p_.n_kv_head, hd = p_.head_dim, ng = count / kTokenGroup, g0 = begin / kTokenGroup;
    const at::Tensor codes = unpack_bits(p_.key_codes, p_.bits, begin * G * hd, count * G * hd)
                                 .to(at::kFloat)
                                 .view({ng, G, hd, kTokenGroup});
    const at::Tensor x = codes * p_.key_scale.narrow(0, g0, ng).to(at::kFloat).unsqueeze(3) +
                         p_.key_min.narrow(0, g0, ng).to(at::kFloat).unsqueeze(3);  // [ng, G, hd, 32]
    return x.permute({1, 0, 3, 2}).reshape({G, count, hd});
}

at::Tensor QuantizedLayer::values_block(int64_t begin, int64_t count) const {
    const int64_t G = p_.n_kv_head, hd = p_.head_dim, gv = value_group(hd);
    const at::Tensor codes = unpack_bits(p_.value_codes, p_.bits, begin * G * hd, count * G * hd)
                                 .to(at::kFloat)
                                 .view({count, G, hd / gv, gv});
    const at::Tensor x = codes * p_.value_scale.narrow(0, begin, count).to(at::kFloat).unsqueeze(3) +
                         p_.value_min.narrow(0, begin, count).to(at::kFloat).unsqueeze(3);
    return x.view({count, G, hd}).permute({1, 0, 2});  // [G, count, hd]
}

at::Tensor QuantizedLayer::attend(const at::Tensor& q, const at::Tensor& tail_keys,
                                  const at::Tensor& tail_values, double scale) const {
    const int64_t H = q.size(0), n_q = q.size(1), hd = p_.head_dim, G = p_.n_kv_head;
    if (q.dim() != 3 || q.size(2) != hd || H % G != 0)
        throw Error(fmt::format("quantized layer {}: queries must be [k * {}, n, {}], got {}", p_.layer, G,
                                hd, shape_str(q)));
    if (!tail_keys.defined() || tail_keys.size(1) < n_q)
        throw Error(
            fmt::format("quantized layer {}: the tail must hold the {} queries' own entries", p_.layer, n_q));
    const int64_t g = H / G, gq = g * n_q, n_tail = tail_keys.size(1), nq = p_.n_quant;
    const int64_t n_res = p_.n_tokens - nq, n_all = p_.n_tokens + n_tail;
    const at::Tensor qf = q.to(at::kFloat).reshape({G, gq, hd});  // [G, g*n_q, hd]
    at::Tensor scores = at::empty({G, gq, n_all}, qf.options());  // [G, gq, quantized | residual | tail]
    for (int64_t b = 0; b < nq; b += kBlock) {
        const int64_t n = std::min(kBlock, nq - b);
        at::Tensor s = scores.narrow(2, b, n);
        at::bmm_out(s, qf, keys_block(b, n).transpose(1, 2));
    }
    {
        at::Tensor s = scores.narrow(2, nq, n_res);
        at::bmm_out(s, qf, p_.residual_keys.to(at::kFloat).transpose(1, 2));
    }
    {
        at::Tensor s = scores.narrow(2, p_.n_tokens, n_tail);
        at::bmm_out(s, qf, tail_keys.to(at::kFloat).transpose(1, 2));
        mask_future_tail(s, n_q, g);
    }
    scores.mul_(scale);
    const at::Tensor p = scores.softmax(2);                                               // [G, gq, n_all]
    at::Tensor out = at::bmm(p.narrow(2, nq, n_res), p_.residual_values.to(at::kFloat));  // [G, gq, hd]
    out.baddbmm_(p.narrow(2, p_.n_tokens, n_tail), tail_values.to(at::kFloat));
    for (int64_t b = 0; b < nq; b += kBlock) {
        const int64_t n = std::min(kBlock, nq - b);
        out.baddbmm_(p.narrow(2, b, n), values_block(b, n));
    }
    return out.view({H, n_q, hd}).to(q.scalar_type());
}

LayerKV QuantizedLayer::reconstruct() const {
    const auto dtype = p_.residual_keys.scalar_type();
    const at::Tensor k = at::cat({keys_block(0, p_.n_quant), p_.residual_keys.to(at::kFloat)}, 1);
    const at::Tensor v = at::cat({values_block(0, p_.n_quant), p_.residual_values.to(at::kFloat)}, 1);
    return {k.to(dtype), v.to(dtype)};
}

}  // namespace varrate
