#include "codec/snapkv_method.h"

#include <chrono>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "codec/footprint.h"
#include "codec/salience.h"
#include "codec/water_filling.h"
#include "core/base/error.h"

namespace varrate {

namespace {

using Clock = std::chrono::steady_clock;

struct SnapKVAnalysis : LayerAnalysis {
    int64_t n_kv_head = 0, head_dim = 0, element_size = 0;
    at::Tensor order;          // [G, L - w] int64, snapkv_order
    at::Tensor kv_sq;          // [G, L] fp32: each head's share of ||z_t||^2
    at::Tensor salience;       // [L] CPU fp32, the paper's salience (mean over heads, window at the max)
    at::Tensor salience_norm;  // [L] CPU fp32
};

}  // namespace

LayerDiagnostics eviction_diagnostics(const std::string& method, int64_t layer, const at::Tensor& kept,
                                      const at::Tensor& kv_sq, int64_t head_dim, int64_t element_size) {
    const int64_t n_kv = kv_sq.size(0), n_tok = kv_sq.size(1), n_kept = kept.size(1),
                  dim = 2 * n_kv * head_dim;
    at::Tensor kept_mask = at::zeros({n_kv, n_tok}, kept.options().dtype(at::kBool));
    kept_mask.scatter_(1, kept, true);
    // A token kept by some heads stores their share of D; an evicted head's part is lost.
    const at::Tensor lost = (kv_sq * kept_mask.logical_not()).sum(0);
    const at::Tensor err = (lost / kv_sq.sum(0).clamp_min(1e-30)).sqrt();
    const at::Tensor rank = kept_mask.to(at::kLong).sum(0) * (2 * head_dim);
    const at::Tensor rd = rank.to(at::kDouble);
    const at::Tensor stats =
        at::stack({err.to(at::kDouble).mean(), rd.min(), rd.max(), rd.mean()}).to(at::kCPU);
    const double* st = stats.data_ptr<double>();
    LayerDiagnostics d;
    d.method = method;
    d.layer = layer;
    d.n_tokens = n_tok;
    d.dim = dim;
    d.budget_B = n_kept * dim;
    d.sum_ranks = n_kept * dim;
    d.n_exact = n_kept;
    d.n_coded = 0;
    d.min_rank = static_cast<int64_t>(st[1]);
    d.max_rank = static_cast<int64_t>(st[2]);
    d.mean_rank = st[3];
    d.stored_bytes = n_kept * dim * element_size;
    d.full_bytes = n_tok * dim * element_size;
    d.footprint = static_cast<double>(n_kept) / static_cast<double>(n_tok);
    d.mean_rel_error = st[0];
    d.rank = rank.to(at::kCPU);
    d.exact = kept_mask.all(0).to(at::kCPU);
    d.rel_error = err.to(at::kCPU);
    d.kept = kept_mask.to(at::kCPU);
    return d;
}

LayerKV gather_kept(const LayerCapture& capture, const at::Tensor& kept) {
    const at::Tensor idx = kept.unsqueeze(2).expand({kept.size(0), kept.size(1), capture.keys.size(2)});
    return {capture.keys.gather(1, idx), capture.values.gather(1, idx)};
}

at::Tensor eviction_kv_sq(const LayerCapture& capture) {
    return (capture.keys_pre_rope.defined() ? capture.keys_pre_rope : capture.keys)
               .to(at::kFloat)
               .pow(2)
               .sum(2) +
           capture.values.to(at::kFloat).pow(2).sum(2);  // [G, L]
}

at::Tensor snapkv_order(const at::Tensor& scores) {
    return std::get<1>(at::sort(scores, /*stable=*/true, 1, /*descending=*/true));
}

at::Tensor snapkv_keep_from_order(const at::Tensor& order, int64_t n_tokens, int64_t window, int64_t kept) {
    const int64_t n_kv = order.size(0), n_others = kept - window;
    at::Tensor top = std::get<0>(at::sort(order.narrow(1, 0, n_others), 1));  // original order
    at::Tensor win =
        at::arange(n_tokens - window, n_tokens, top.options()).unsqueeze(0).expand({n_kv, window});
    return at::cat({top, win}, 1);  // [G, kept]
}

std::shared_ptr<const LayerAnalysis> SnapKVMethod::analyse(const LayerCapture& capture) {
    const auto t0 = Clock::now();
    const CaptureShape shape = check_capture(capture, name(), /*needs_pre_rope=*/false);
    const int64_t n_tok = shape.n_tokens, w = settings_.obs_window;
    auto a = std::make_shared<SnapKVAnalysis>();
    a->layer = capture.layer;
    a->n_tokens = n_tok;
    a->n_kv_head = shape.n_kv_head;
    a->head_dim = shape.head_dim;
    a->element_size = element_size(capture.keys.scalar_type());
    const at::Tensor scores = snapkv_scores(capture, w, settings_.pool_kernel);  // [G, L - w]
    a->order = snapkv_order(scores);
    a->kv_sq = eviction_kv_sq(capture);
    const at::Tensor salience = at::cat({scores.mean(0), scores.max().expand({w})});  // [L]
    a->salience = salience.to(at::kCPU);
    a->salience_norm =
        at::cat({normalise_salience(salience.narrow(0, 0, n_tok - w)), at::zeros({w}, scores.options())})
            .to(at::kCPU);
    sync_for_timing(a->order, settings_.precise_timing);
    a->timing.salience = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    return a;
}

LayerAllocation SnapKVMethod::allocate(const LayerAnalysis& analysis, const CodecSettings& budget) {
    const auto t0 = Clock::now();
    const auto& a = dynamic_cast<const SnapKVAnalysis&>(analysis);
    const std::string diff = structural_difference(settings_, budget);
    if (!diff.empty())
        throw Error(fmt::format("{}: layer {} was analysed with other settings ({})", name(), a.layer, diff));
    const int64_t n_tok = a.n_tokens;
    const int64_t kept = snapkv_kept_tokens(budget, n_tok);
    LayerAllocation out;
    out.kept = snapkv_keep_from_order(a.order, n_tok, settings_.obs_window, kept);  // [G, kept]

    out.diagnostics = eviction_diagnostics(name(), a.layer, out.kept, a.kv_sq, a.head_dim, a.element_size);
    LayerDiagnostics& d = out.diagnostics;
    d.salience = a.salience;
    d.salience_norm = a.salience_norm;
    d.timing = a.timing;
    d.timing.water_filling = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    return out;
}

LayerKV SnapKVMethod::materialise(const LayerCapture& capture, const LayerAnalysis& analysis,
                                  const LayerAllocation& allocation) {
    (void)analysis;
    LayerKV kv = gather_kept(capture, allocation.kept);
    sync_for_timing(kv.values, settings_.precise_timing);
    return kv;
}

}  // namespace varrate
