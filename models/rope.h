#pragma once
// Rotary position embedding tables as Hugging Face computes them: inv_freq = 1/theta^(2j/d) in fp32, with
// "linear" or "llama3" scaling applied, angles = position * inv_freq, tables = cat(angles, angles).
// The rotation itself (and its inverse, which the codec uses to go back to pre-RoPE keys) is here too: the
// runtime and the demo-model trainer share it.
#include <cstdint>
#include <utility>

#include <ATen/core/Tensor.h>

#include "models/model_config.h"

namespace varrate {

// inv_freq with the config's rope scaling: [head_dim/2] fp32 on the CPU.
at::Tensor rope_inv_freq(const ModelConfig& config);

// cos/sin for positions [begin, end), computed in fp32 from `inv_freq` (on its device), then cast to `dtype`:
// each [end-begin, head_dim].
std::pair<at::Tensor, at::Tensor> rope_cos_sin(const at::Tensor& inv_freq, int64_t begin, int64_t end,
                                               c10::ScalarType dtype);

// Applies HF rotate_half RoPE: x [.., n_tok, head_dim], cos/sin [n_tok, head_dim]. Differentiable.
at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);
// The same rotation written into `out` (x's shape; may be a strided view such as a cache's next entries)
// without temporaries; the same values as apply_rope. What the runtime uses.
void apply_rope_into(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, at::Tensor out);
// Inverse rotation (post-RoPE -> pre-RoPE).
at::Tensor unapply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace varrate
