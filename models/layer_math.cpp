#include "models/layer_math.h"

#include <ATen/ATen.h>

namespace varrate {

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
    const at::Tensor xf = x.to(at::kFloat);
    const at::Tensor normed = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
    return weight * normed.to(x.scalar_type());
}

at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up) {
    return at::silu(gate) * up;
}

}  // namespace varrate
