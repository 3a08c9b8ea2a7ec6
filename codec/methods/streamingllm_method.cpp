#include "codec/methods/streamingllm_method.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"

namespace varrate {

at::Tensor StreamingLLMMethod::scores(const LayerCapture& capture) const {
    const int64_t G = capture.keys.size(0), L = capture.keys.size(1);
    const auto opts = at::TensorOptions().dtype(at::kFloat).device(capture.keys.device());
    at::Tensor s = at::arange(L, opts);                                 // recency
    s.narrow(0, 0, std::min(kSinks, L)).fill_(static_cast<double>(L));  // the sinks above every position
    return s.unsqueeze(0).expand({G, L});
}

int64_t StreamingLLMMethod::kept_tokens(int64_t n_tokens, double kappa) const {
    const int64_t kept = kappa_tokens(n_tokens, kappa);
    if (kept <= kSinks)
        throw InfeasibleBudget(
            fmt::format("streamingllm: budget kappa={} keeps int(L*kappa)={} tokens, not more than the {} "
                        "sinks; the smallest feasible kappa for L={} is {:.4f}",
                        kappa, kept, kSinks, n_tokens, smallest_kappa_keeping_more_than(kSinks, n_tokens)));
    return kept;
}

}  // namespace varrate
