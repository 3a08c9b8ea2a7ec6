#include "codec/methods/random_method.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

namespace varrate {

at::Tensor RandomMethod::scores(const LayerCapture& capture) const {
    // torch.rand(G, L, generator=manual_seed(kSeed), dtype=keys.dtype) on the CPU: the same stream as torch.
    at::Generator gen = at::detail::createCPUGenerator(kSeed);
    const at::Tensor u = at::rand({capture.keys.size(0), capture.keys.size(1)}, gen,
                                  at::TensorOptions().dtype(capture.keys.scalar_type()));
    return u.to(capture.keys.device());  // [G, L]
}

}  // namespace varrate
