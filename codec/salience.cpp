#include "codec/salience.h"

#include <cmath>
#include <limits>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "core/base/error.h"

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
    const at::Tensor q = q_all.narrow(1, q_all.size(1) - w, w).to(at::kFloat);  // [H, w, hd]
    const at::Tensor k = keys.to(at::kFloat);
    // Query i of the window sits at position L - w + i and sees keys 0 .. L - w + i: an additive bias of
    // -inf on later keys, [w, L], repeated for the n_rep query heads that share a KV head.
    auto fopts = q.options();
    const at::Tensor future = at::arange(n_tok, fopts.dtype(at::kLong)).unsqueeze(0) >
                              (at::arange(w, fopts.dtype(at::kLong)) + (n_tok - w)).unsqueeze(1);
    const at::Tensor bias = at::zeros({w, n_tok}, fopts)
                                .masked_fill_(future, -std::numeric_limits<float>::infinity())
                                .repeat({n_rep, 1});  // [n_rep w, L]
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    // All heads in one batched GEMM, scale and mask folded in: each KV head's n_rep query heads stacked
    // as n_rep * w rows.
    const at::Tensor logits =
        at::baddbmm(bias.unsqueeze(0), q.reshape({n_kv, n_rep * w, hd}), k.transpose(1, 2), /*beta=*/1.0,
                    /*alpha=*/scale);                                         // [G, n_rep w, L]
    const at::Tensor att = at::softmax(logits, -1).view({n_head, w, n_tok});  // [H, w, L]
    return att.narrow(2, 0, n_tok - w).mean(1);                               // [H, L - w]
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
