#pragma once
// The exact/coded split of a layer (strided anchors + the recent window) and each coded token's
// residual to the mean of its c nearest anchors. Shared by the codec and the basis calibrator.
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace varrate {

// Which positions of a context of L tokens are stored exactly and which are coded. CPU int64 tensors.
struct AnchorLayout {
    int64_t n_tokens = 0;
    at::Tensor anchor_pos;  // [n_anchor] 0, stride, 2*stride, ... < L
    at::Tensor exact_pos;   // [n_exact] anchors plus the last `window` tokens, ascending
    at::Tensor coded_pos;   // [n_coded] every other position, ascending
    at::Tensor exact_mask;  // [L] bool
    int64_t n_anchors() const { return anchor_pos.size(0); }
    int64_t n_exact() const { return exact_pos.size(0); }
    int64_t n_coded() const { return coded_pos.size(0); }
};
AnchorLayout make_anchor_layout(int64_t n_tokens, int64_t stride, int64_t window);

// Joint per-token vectors z_t = [pre-RoPE keys of all KV heads ; values of all KV heads], in fp32.
at::Tensor joint_vectors(const at::Tensor& keys_pre_rope, const at::Tensor& values);  // [L, 2*G*hd]
// Inverse of joint_vectors for a set of rows: z [n, 2*G*hd] -> keys, values [G, n, hd].
std::pair<at::Tensor, at::Tensor> split_joint(const at::Tensor& z, int64_t n_kv_head, int64_t head_dim);

struct AnchorResiduals {
    at::Tensor nearest;          // [n_coded, c] int64 anchor ordinals (into anchor_pos), nearest first
    at::Tensor mean;             // [n_coded, D] fp32 mean of those anchors (z-bar)
    at::Tensor residual;         // [n_coded, D] fp32 z - z-bar
    at::Tensor energy;           // [n_coded] fp64 ||z - z-bar||^2 (of the fp32 norm)
    at::Tensor centre;           // [1, D] fp32 mean of all anchors
    at::Tensor centred_anchors;  // [n_anchor, D] fp32 anchors - centre
};
// Nearest anchors by Euclidean distance over all anchors, in fp32 on z's device. Distances use the
// |a|^2 - 2ab part of the expansion (|b|^2 is the same for every anchor of a token) after centring on the
// anchor mean (which removes most of the cancellation), in fp32 only, one GEMM per chunk; ties go to the
// lower anchor ordinal (top-k on exact (distance, ordinal) keys: the order a stable sort gives). Processed
// in chunks of `chunk` coded tokens to bound memory. with_mean = false leaves `mean` undefined (a caller that
// keeps the nearest anchors forms it again with anchor_means_out) and saves a pass over [n_coded, D].
// onednn_gemm: the distance GEMM on oneDNN's fp32 sgemm where available (codec/gemm.h), still fp32.
AnchorResiduals anchor_residuals(const at::Tensor& z, const AnchorLayout& layout, int64_t c,
                                 int64_t chunk = 2048, bool with_mean = true, bool onednn_gemm = false);
// z-bar of the rows whose nearest anchors are `nearest` [n, c] into `out` [n, D], bit for bit as
// anchor_residuals forms `mean` (so a caller may keep the indices rather than the means).
void anchor_means_out(at::Tensor& out, const AnchorResiduals& r, const at::Tensor& nearest);
// Mean of each row's centred anchors: [n_anchor, D], [n, c] -> [n, D].
at::Tensor centred_anchor_means(const at::Tensor& centred_anchors, const at::Tensor& nearest);

}  // namespace varrate
