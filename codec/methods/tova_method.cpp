#include "codec/methods/tova_method.h"

#include <ATen/ATen.h>

#include "codec/salience.h"

namespace varrate {

at::Tensor TovaMethod::scores(const LayerCapture& capture) const {
    const int64_t G = capture.keys.size(0);
    const at::Tensor last = window_attention(capture, /*obs_window=*/1).mean(0);  // [L - 1], all query heads
    const at::Tensor s = at::cat({last, (last.max() + 1).reshape({1})});          // [L]
    return s.unsqueeze(0).expand({G, s.size(0)});
}

}  // namespace varrate
