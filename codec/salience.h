#pragma once
// SnapKV's observation-window attention scores (kvpress SnapKVPress.score, computed in fp32):
// softmax over the full causal row of the last w_obs queries, window columns dropped, mean over the
// window queries, average pool along positions (count_include_pad), then per GQA group or over all heads.
#include <cstdint>

#include <ATen/core/Tensor.h>

#include "models/llama_model.h"

namespace varrate {

// Mean attention weight the last w_obs queries put on each non-window token, per query head.
at::Tensor window_attention(const LayerCapture& capture, int64_t obs_window);  // [H, L - w_obs] fp32
// Average pool along the last dim: kernel k, stride 1, padding k/2, zero padding counted (torch default).
at::Tensor pool_scores(const at::Tensor& scores, int64_t kernel);  // [rows, n] -> [rows, n]
// kvpress SnapKV scores: pooled per query head, then mean over each GQA group.
at::Tensor snapkv_scores(const LayerCapture& capture, int64_t obs_window, int64_t kernel);  // [G, L - w_obs]
// The paper's salience (eq. 4): window attention averaged over all H heads, pooled; the window's own
// positions (no score of their own) get the maximum score, as kvpress pads them.
at::Tensor varrate_salience(const LayerCapture& capture, int64_t obs_window, int64_t kernel);  // [L] fp32

}  // namespace varrate
