#include "codec/salience.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"

namespace varrate {

at::Tensor window_attention(const LayerCapture& capture, int64_t obs_window) {
    const at::Tensor& keys = capture.keys;             // [G, L, hd]
    const at::Tensor& q_all = capture.window_queries;  // [H, w_cap, hd]
    if (!q_all.defined() || q_all.dim() != 3 || q_all.size(2) != keys.size(2))
        throw Error(fmt::format("salience: layer {} window queries must be [n_head, w_obs, head_dim={}]",
                                capture.layer, keys.size(2)));
    const int64_t n_kv = keys.size(0), n_tok = keys.size(1), hd = keys.size(2), n_head = q_all.size(0);
    if (obs_window <= 0 || q_all.size(1) < obs_window)
        throw Error(
            fmt::format("salience: layer {} capture holds {} window queries, the observation window needs {}",
                        capture.layer, q_all.size(1), obs_window));
    if (n_tok <= obs_window)
        throw Error(fmt::format(
            "salience: layer {} context of {} tokens is not longer than the observation window {}",
            capture.layer, n_tok, obs_window));
    if (n_head % n_kv != 0)
        throw Error(fmt::format("salience: {} query heads are not a multiple of {} KV heads", n_head, n_kv));
    const int64_t n_rep = n_head / n_kv, w = obs_window;
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    const at::Tensor q = q_all.narrow(1, q_all.size(1) - w, w).to(at::kFloat) * scale;  // [H, w, hd]
    // Query i of the window sits at position L - w + i and sees keys 0 .. L - w + i: only the window's own
    // [w, w] corner of each head's rows holds future keys.
    auto lopts = q.options().dtype(at::kLong);
    const at::Tensor future =
        at::arange(w, lopts).unsqueeze(0) > at::arange(w, lopts).unsqueeze(1);  // [w, w]
    at::Tensor out = at::empty({n_head, n_tok - w}, q.options());
    // A few KV heads at a time (about 8 MiB of logits), each one's n_rep query heads stacked as n_rep * w
    // rows of one batched GEMM: the logits are reused from one step to the next rather than allocated for
    // all heads at once.
    const int64_t step = std::clamp<int64_t>((int64_t{8} << 20) / (n_rep * w * n_tok * 4), 1, n_kv);
    for (int64_t g = 0; g < n_kv; g += step) {
        const int64_t gs = std::min(step, n_kv - g);
        const at::Tensor k = keys.narrow(0, g, gs).to(at::kFloat);  // [gs, L, hd]
        at::Tensor logits =
            at::bmm(q.narrow(0, g * n_rep, gs * n_rep).reshape({gs, n_rep * w, hd}), k.transpose(1, 2));
        logits.narrow(2, n_tok - w, w)
            .view({gs, n_rep, w, w})
            .masked_fill_(future, -std::numeric_limits<float>::infinity());  // [gs, n_rep w, L]
        // Softmax in place, exp(x - row max), its normalisation folded into the mean over the window
        // queries: one weight 1 / (w * row sum) per row, applied by a batched product over each head's rows.
        logits.sub_(at::amax(logits, {2}, /*keepdim=*/true)).exp_();
        const at::Tensor weight = logits.sum(2).mul_(static_cast<double>(w)).reciprocal_();  // [gs, n_rep w]
        const at::Tensor e = logits.view({gs * n_rep, w, n_tok}).narrow(2, 0, n_tok - w);    // [., w, L - w]
        at::Tensor rows = out.narrow(0, g * n_rep, gs * n_rep).unsqueeze(1);                 // [., 1, L - w]
        at::bmm_out(rows, weight.view({gs * n_rep, 1, w}), e);
    }
    return out;  // [H, L - w]
}

at::Tensor pool_scores(const at::Tensor& scores, int64_t kernel) {
    if (kernel <= 0 || kernel % 2 == 0)
        throw Error(fmt::format("salience: pooling kernel must be a positive odd number, got {}", kernel));
    if (kernel == 1) return scores;
    return at::avg_pool1d(scores.unsqueeze(1), {kernel}, {1}, {kernel / 2}, /*ceil_mode=*/false,
                          /*count_include_pad=*/true)
        .squeeze(1);
}

at::Tensor snapkv_scores(const LayerCapture& capture, int64_t obs_window, int64_t kernel) {
    at::Tensor pooled = pool_scores(window_attention(capture, obs_window), kernel);  // [H, L - w]
    const int64_t n_kv = capture.keys.size(0);
    return pooled.view({n_kv, -1, pooled.size(1)}).mean(1);  // [G, L - w]
}

at::Tensor varrate_salience(const LayerCapture& capture, int64_t obs_window, int64_t kernel) {
    at::Tensor s =
        pool_scores(window_attention(capture, obs_window).mean(0, /*keepdim=*/true), kernel).squeeze(0);
    at::Tensor window = s.max().expand({obs_window});  // stays on the device: no host sync
    return at::cat({s, window}, 0);                    // [L]
}

}  // namespace varrate
