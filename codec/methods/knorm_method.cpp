#include "codec/methods/knorm_method.h"

#include <ATen/ATen.h>

namespace varrate {

at::Tensor KnormMethod::scores(const LayerCapture& capture) const {
    return capture.keys.to(at::kFloat).norm(2, {-1}).neg();  // [G, L]
}

}  // namespace varrate
