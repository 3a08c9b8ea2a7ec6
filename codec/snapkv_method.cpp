#include "codec/snapkv_method.h"

#include <chrono>

#include <ATen/ATen.h>

#include "codec/footprint.h"
#include "codec/salience.h"
#include "codec/water_filling.h"

namespace varrate {

at::Tensor snapkv_keep_indices(const at::Tensor& scores, int64_t n_tokens, int64_t window, int64_t kept) {
    const int64_t n_kv = scores.size(0), n_others = kept - window;
    // Stable descending sort: equal scores go to the earlier position, on every device.
    at::Tensor order = std::get<1>(at::sort(scores, /*stable=*/true, 1, /*descending=*/true));
    at::Tensor top = std::get<0>(at::sort(order.narrow(1, 0, n_others), 1));  // original order
    at::Tensor win =
        at::arange(n_tokens - window, n_tokens, top.options()).unsqueeze(0).expand({n_kv, window});
    return at::cat({top, win}, 1);  // [G, kept]
}

LayerResult SnapKVMethod::compress(const LayerCapture& capture) {
    const auto t0 = std::chrono::steady_clock::now();
    const CaptureShape shape = check_capture(capture, name(), /*needs_pre_rope=*/false);
    const int64_t n_tok = shape.n_tokens, n_kv = shape.n_kv_head, hd = shape.head_dim, dim = 2 * n_kv * hd;
    const int64_t w = settings_.obs_window;
    const int64_t kept = snapkv_kept_tokens(settings_, n_tok);

    const at::Tensor scores = snapkv_scores(capture, w, settings_.pool_kernel);  // [G, L - w]
    const at::Tensor idx = snapkv_keep_indices(scores, n_tok, w, kept);          // [G, kept]
    const at::Tensor gather_idx = idx.unsqueeze(2).expand({n_kv, kept, hd});
    LayerResult out;
    out.kv.keys = capture.keys.gather(1, gather_idx);
    out.kv.values = capture.values.gather(1, gather_idx);
    sync_for_timing(out.kv.values, settings_.precise_timing);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

    // Diagnostics. A token kept by some heads stores their share of D; an evicted head's part is lost, so
    // the relative error is the norm of the evicted parts over the norm of z.
    at::Tensor kept_mask = at::zeros({n_kv, n_tok}, idx.options().dtype(at::kBool));
    kept_mask.scatter_(1, idx, true);
    const at::Tensor kv_sq = (capture.keys_pre_rope.defined() ? capture.keys_pre_rope : capture.keys)
                                 .to(at::kFloat)
                                 .pow(2)
                                 .sum(2) +
                             capture.values.to(at::kFloat).pow(2).sum(2);  // [G, L]
    const at::Tensor lost = (kv_sq * kept_mask.logical_not()).sum(0);
    const at::Tensor err = (lost / kv_sq.sum(0).clamp_min(1e-30)).sqrt();
    const at::Tensor rank = kept_mask.to(at::kLong).sum(0) * (2 * hd);
    at::Tensor salience = at::cat({scores.mean(0), scores.max().expand({w})});  // [L], the paper's salience
    at::Tensor norm =
        at::cat({normalise_salience(salience.narrow(0, 0, n_tok - w)), at::zeros({w}, scores.options())});
    const at::Tensor stats = at::stack({err.to(at::kDouble).mean(), rank.to(at::kDouble).min(),
                                        rank.to(at::kDouble).max(), rank.to(at::kDouble).mean()})
                                 .to(at::kCPU);
    const double* st = stats.data_ptr<double>();

    LayerDiagnostics& d = out.diagnostics;
    d.method = name();
    d.layer = capture.layer;
    d.n_tokens = n_tok;
    d.dim = dim;
    d.budget_B = kept * dim;
    d.sum_ranks = kept * dim;
    d.n_exact = kept;
    d.n_coded = 0;
    d.min_rank = static_cast<int64_t>(st[1]);
    d.max_rank = static_cast<int64_t>(st[2]);
    d.mean_rank = st[3];
    d.stored_bytes = kept * dim * element_size(capture.keys.scalar_type());
    d.full_bytes = n_tok * dim * element_size(capture.keys.scalar_type());
    d.footprint = static_cast<double>(kept) / static_cast<double>(n_tok);
    d.mean_rel_error = st[0];
    d.timing.salience = ms;
    d.salience = salience.to(at::kCPU);
    d.salience_norm = norm.to(at::kCPU);
    d.rank = rank.to(at::kCPU);
    d.exact = kept_mask.all(0).to(at::kCPU);
    d.rel_error = err.to(at::kCPU);
    d.kept = kept_mask.to(at::kCPU);
    return out;
}

}  // namespace varrate
