#pragma once
// The per-layer math of a Llama block that the inference runtime (models/llama_model.cpp) and the demo-model
// trainer (app/train, autograd) share, so that the model the trainer fits is the model the runtime runs.
// Plain ATen ops: differentiable, and the same on CPU and CUDA. RoPE is in models/rope.h.
#include <ATen/core/Tensor.h>

namespace varrate {

// HF LlamaRMSNorm: normalise in fp32, cast back to x's dtype, then scale by the weight. x [.., dim].
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

// SwiGLU's gate: silu(gate) * up, both [.., intermediate].
at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up);

}  // namespace varrate
