#pragma once
// Synthetic layer captures and bases (seeded random tensors with real RoPE tables), for tests and
// benchmarks of the codec without a model.
#include <cstdint>
#include <memory>

#include <ATen/core/Tensor.h>

#include "codec/basis.h"
#include "models/llama_model.h"

namespace varrate {

struct SyntheticShape {
    int64_t n_kv_head = 2;
    int64_t n_head = 4;
    int64_t n_tokens = 256;
    int64_t head_dim = 16;
    int64_t obs_window = 64;
    double rope_theta = 10000.0;
    int64_t n_layers = 0;  // the model's layers a capture names (PyramidKV); 0: the capture's layer + 1
};

// The RoPE frequencies synthetic captures are rotated with: theta^(-2j / head_dim), [head_dim / 2] fp32 CPU.
at::Tensor synthetic_inv_freq(const SyntheticShape& shape);

// keys_pre_rope, values, window_queries ~ N(0, 1) (seeded), o_proj ~ N(0, 0.01) (hidden = n_head * head_dim);
// keys = apply_rope(keys_pre_rope) with the standard RoPE tables for positions 0..L-1. All tensors in
// `dtype` on `device`.
LayerCapture synthetic_capture(const SyntheticShape& shape, uint64_t seed, int64_t layer = 0,
                               at::ScalarType dtype = at::kFloat, at::Device device = at::kCPU);

// A basis of random orthonormal rows [rank, dim] per layer (seeded), with a flat spectrum.
std::shared_ptr<const Basis> random_basis(int64_t n_layer, int64_t dim, int64_t rank, int64_t stride,
                                          int64_t anchors, uint64_t seed);

}  // namespace varrate
