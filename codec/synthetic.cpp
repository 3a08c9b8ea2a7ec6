#include "codec/synthetic.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

namespace varrate {

at::Tensor synthetic_inv_freq(const SyntheticShape& s) {
    const auto f64 = at::TensorOptions().dtype(at::kDouble);
    return at::pow(s.rope_theta, -at::arange(0, s.head_dim, 2, f64) / static_cast<double>(s.head_dim))
        .to(at::kFloat);
}

LayerCapture synthetic_capture(const SyntheticShape& s, uint64_t seed, int64_t layer, at::ScalarType dtype,
                               at::Device device) {
    at::Generator gen = at::detail::createCPUGenerator(seed);
    auto f32 = at::TensorOptions().dtype(at::kFloat);
    LayerCapture c;
    c.layer = layer;
    c.n_layers = s.n_layers > 0 ? s.n_layers : layer + 1;
    const at::Tensor k_pre = at::normal(0.0, 1.0, {s.n_kv_head, s.n_tokens, s.head_dim}, gen, f32);
    const at::Tensor v = at::normal(0.0, 1.0, {s.n_kv_head, s.n_tokens, s.head_dim}, gen, f32);
    const at::Tensor q = at::normal(0.0, 1.0, {s.n_head, s.obs_window, s.head_dim}, gen, f32);
    // Drawn after the others, so that the captures of earlier builds are unchanged.
    const at::Tensor o_proj = at::normal(0.0, 0.1, {s.n_head * s.head_dim, s.n_head * s.head_dim}, gen, f32);
    const at::Tensor inv_freq = synthetic_inv_freq(s);
    const at::Tensor angles = at::outer(at::arange(s.n_tokens, f32), inv_freq);
    const at::Tensor emb = at::cat({angles, angles}, -1);  // [L, head_dim]
    const at::Tensor cos = emb.cos().to(dtype), sin = emb.sin().to(dtype);
    c.keys_pre_rope = k_pre.to(dtype);
    // Post-RoPE keys from the (rounded) pre-RoPE keys, as the runtime produces them.
    c.keys = apply_rope(c.keys_pre_rope.to(at::kFloat), cos.to(at::kFloat), sin.to(at::kFloat)).to(dtype);
    c.values = v.to(dtype);
    c.window_queries = q.to(dtype);
    c.o_proj = o_proj.to(dtype);
    c.rope_cos = cos;
    c.rope_sin = sin;
    c.rope_inv_freq = inv_freq;
    for (at::Tensor* t : {&c.keys_pre_rope, &c.keys, &c.values, &c.window_queries, &c.o_proj, &c.rope_cos,
                          &c.rope_sin, &c.rope_inv_freq})
        *t = t->to(device);
    return c;
}

std::shared_ptr<const Basis> random_basis(int64_t n_layer, int64_t dim, int64_t rank, int64_t stride,
                                          int64_t anchors, uint64_t seed) {
    at::Generator gen = at::detail::createCPUGenerator(seed);
    std::vector<at::Tensor> layers, spectra;
    for (int64_t i = 0; i < n_layer; ++i) {
        at::Tensor g = at::normal(0.0, 1.0, {dim, rank}, gen, at::TensorOptions().dtype(at::kDouble));
        at::Tensor q = std::get<0>(at::linalg_qr(g, "reduced"));  // [dim, rank] orthonormal columns
        layers.push_back(q.t().to(at::kFloat).contiguous());
        spectra.push_back(at::ones({dim}, at::TensorOptions().dtype(at::kFloat)));
    }
    BasisInfo info;
    info.model_fingerprint = "synthetic";
    info.dim = dim;
    info.rank = rank;
    info.stride = stride;
    info.anchors = anchors;
    return std::make_shared<const Basis>(info, std::move(layers), std::move(spectra));
}

}  // namespace varrate
