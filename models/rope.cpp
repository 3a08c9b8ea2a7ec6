#include "models/rope.h"

#include <ATen/ATen.h>

#include <cmath>
#include <string>

#include "base/error.h"
#include "models/llama_model.h"

namespace varrate {

namespace {

// HF rotate_half: (x1, x2) -> (-x2, x1) over the two halves of the last dimension.
at::Tensor rotate_half(const at::Tensor& x) {
    const int64_t half = x.size(-1) / 2;
    return at::cat({x.narrow(-1, half, half).neg(), x.narrow(-1, 0, half)}, -1);
}

// HF _compute_llama3_parameters, op for op in fp32 (Python's `scalar / t` is `t.reciprocal() * scalar`).
at::Tensor llama3_scaled(const at::Tensor& inv_freq, const RopeScaling& s) {
    const double old_context_len = static_cast<double>(s.original_max_position_embeddings);
    const double low_freq_wavelen = old_context_len / s.low_freq_factor;
    const double high_freq_wavelen = old_context_len / s.high_freq_factor;
    const at::Tensor wavelen = inv_freq.reciprocal() * (2 * M_PI);
    at::Tensor scaled = at::where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq);
    const at::Tensor smooth = (wavelen.reciprocal() * old_context_len - s.low_freq_factor) /
                              (s.high_freq_factor - s.low_freq_factor);
    const at::Tensor smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
    const at::Tensor medium =
        (wavelen < high_freq_wavelen).logical_not() * (wavelen > low_freq_wavelen).logical_not();
    return at::where(medium, smoothed, scaled);
}

}  // namespace

at::Tensor rope_inv_freq(const ModelConfig& config) {
    const int64_t dim = config.head_dim;
    if (dim <= 0 || dim % 2 != 0)
        throw Error("RoPE: head_dim must be positive and even (got " + std::to_string(dim) + ")");
    if (!(config.rope_theta > 0)) throw Error("RoPE: rope_theta must be positive");
    const at::Tensor exponents = at::arange(0, dim, 2, at::kLong).to(at::kFloat) / static_cast<double>(dim);
    at::Tensor inv_freq = at::pow(config.rope_theta, exponents).reciprocal();  // [head_dim/2] fp32
    const RopeScaling& s = config.rope_scaling;
    switch (s.type) {
        case RopeScalingType::None:
            break;
        case RopeScalingType::Linear:
            if (!(s.factor > 0)) throw Error("RoPE: linear rope_scaling factor must be positive");
            inv_freq = inv_freq / s.factor;
            break;
        case RopeScalingType::Llama3:
            if (!(s.factor > 0) || !(s.low_freq_factor > 0) || !(s.high_freq_factor > 0) ||
                s.original_max_position_embeddings <= 0)
                throw Error(
                    "RoPE: llama3 rope_scaling needs positive factor, low_freq_factor, high_freq_factor "
                    "and original_max_position_embeddings");
            inv_freq = llama3_scaled(inv_freq, s);
            break;
    }
    return inv_freq;
}

std::pair<at::Tensor, at::Tensor> rope_cos_sin(const at::Tensor& inv_freq, int64_t begin, int64_t end,
                                               c10::ScalarType dtype) {
    const at::Tensor positions = at::arange(begin, end, inv_freq.options().dtype(at::kLong)).to(at::kFloat);
    const at::Tensor angles = at::outer(positions, inv_freq);  // [n, head_dim/2] fp32
    const at::Tensor emb = at::cat({angles, angles}, -1);      // [n, head_dim]
    return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    return x * cos + rotate_half(x) * sin;
}

void apply_rope_into(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, at::Tensor out) {
    const int64_t half = x.size(-1) / 2;
    // x * cos + rotate_half(x) * sin, half by half: (x1 cos1 - x2 sin1, x2 cos2 + x1 sin2), each product
    // rounded as apply_rope rounds it.
    at::mul_out(out, x, cos);
    out.narrow(-1, 0, half).addcmul_(x.narrow(-1, half, half), sin.narrow(-1, 0, half), -1);
    out.narrow(-1, half, half).addcmul_(x.narrow(-1, 0, half), sin.narrow(-1, half, half));
}

at::Tensor unapply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    return x * cos - rotate_half(x) * sin;
}

}  // namespace varrate
