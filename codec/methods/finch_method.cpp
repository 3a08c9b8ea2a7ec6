#include "codec/methods/finch_method.h"

#include <cmath>
#include <limits>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"
#include "codec/methods/snapkv_method.h"
#include "codec/methods/snapkv_rerotate_method.h"

namespace varrate {

at::Tensor FinchMethod::scores(const LayerCapture& c) const {
    const CaptureShape shape = check_capture(c, name(), /*needs_pre_rope=*/false);
    const int64_t G = shape.n_kv_head, L = shape.n_tokens, hd = shape.head_dim;
    const int64_t w = c.question_tokens > 0 ? c.question_tokens : settings_.obs_window;
    const at::Tensor& q_all = c.window_queries;  // [H, w_cap, hd]
    if (!q_all.defined() || q_all.dim() != 3 || q_all.size(1) < w)
        throw Error(fmt::format("{}: layer {} needs the last {} queries ({}), the capture kept {}", name(),
                                c.layer, w, c.question_tokens > 0 ? "the question's" : "the window's",
                                shape_str(q_all)));
    if (L <= w)
        throw Error(fmt::format("{}: layer {} holds {} tokens, no context before its window of {}", name(),
                                c.layer, L, w));
    const int64_t H = q_all.size(0), g = H / G;
    const at::Tensor q = q_all.narrow(1, q_all.size(1) - w, w).to(at::kFloat).reshape({G, g * w, hd});
    at::Tensor logits =
        at::bmm(q, c.keys.to(at::kFloat).transpose(1, 2)) / std::sqrt(static_cast<double>(hd));
    // Query i of the window sits at L - w + i and sees keys 0 .. L - w + i.
    const auto lopts = q.options().dtype(at::kLong);
    const at::Tensor future =
        at::arange(L, lopts).unsqueeze(0) > (L - w + at::arange(w, lopts)).unsqueeze(1);  // [w, L]
    logits = logits.view({G, g, w, L}).masked_fill(future, -std::numeric_limits<float>::infinity());
    const at::Tensor weights = at::softmax(logits, -1).to(c.keys.scalar_type()).to(at::kFloat);
    // kvpress weighs each query's row by its position (the keys it sees, less one) before the mean.
    const at::Tensor position = at::arange(L - w, L, q.options()).view({w, 1});
    const at::Tensor s = (weights.narrow(-1, 0, L - w) * position).mean(2).mean(1);  // [G, L - w]
    return at::cat({s, (s.max() + 1).expand({G, w})}, 1);                            // no host read
}

LayerKV FinchMethod::materialise(const LayerCapture& capture, const LayerAnalysis& analysis,
                                 const LayerAllocation& allocation) {
    LayerKV kv = ScorerEviction::materialise(capture, analysis, allocation);
    kv.keys = SnapKVRerotateMethod::rerotate(capture.keys, allocation.kept, capture.rope_inv_freq);
    sync_for_timing(kv.keys, settings_.precise_timing);
    return kv;
}

}  // namespace varrate
