#include "codec/methods/observed_attention_method.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"

namespace varrate {

at::Tensor ObservedAttentionMethod::scores(const LayerCapture& capture) const {
    const at::Tensor& a = capture.observed_attention;  // [H, L]
    const int64_t G = capture.keys.size(0), L = capture.keys.size(1);
    if (!a.defined() || a.dim() != 2 || a.size(1) != L || a.size(0) % G != 0)
        throw Error(
            fmt::format("{}: layer {} needs every prefill query's attention (an extra pass over the "
                        "context); the capture has {}",
                        name(), capture.layer, shape_str(a)));
    return a.to(at::kFloat).view({G, a.size(0) / G, L}).mean(1);  // [G, L]
}

}  // namespace varrate
