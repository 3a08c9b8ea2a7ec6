#include "codec/methods/criticalkv_method.h"

#include <algorithm>
#include <limits>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"
#include "base/stopwatch.h"
#include "codec/headwise_eviction.h"
#include "codec/scorer_eviction.h"
#include "codec/settings_table.h"

namespace varrate {

at::Tensor CriticalKVMethod::projected_value_norm(const LayerCapture& capture) {
    const CaptureShape shape = check_capture(capture, "criticalkv", /*needs_pre_rope=*/false);
    const int64_t G = shape.n_kv_head, hd = shape.head_dim;
    const at::Tensor& w = capture.o_proj;  // [hidden, H * hd]
    if (!w.defined() || w.dim() != 2 || w.size(1) % (G * hd) != 0)
        throw Error(
            fmt::format("criticalkv: layer {} has no output projection [hidden, k * {}] in its capture "
                        "(got {})",
                        capture.layer, G * hd, shape_str(w)));
    const int64_t H = w.size(1) / hd, g = H / G;
    const at::Tensor wo = w.to(at::kFloat).t().reshape({H, hd, w.size(0)});  // [H, hd, hidden]
    const at::Tensor v = capture.values.to(at::kFloat);                      // [G, L, hd]
    at::Tensor out = at::zeros({G, shape.n_tokens}, v.options());
    // One query head at a time: [L, hidden] each, never [H, L, hidden].
    for (int64_t h = 0; h < H; ++h) out[h / g] += at::mm(v[h / g], wo[h]).abs().sum(1);
    return out / static_cast<double>(g);
}

at::Tensor CriticalKVMethod::keep_mask(const CriticalKVAnalysis& a, int64_t window, const at::Tensor& first,
                                       const at::Tensor& counts) {
    const int64_t G = a.n_kv_head, L = a.n_tokens;
    // SnapKV's scores with the window at their maximum + 1, and the positions in that order (window first).
    const at::Tensor padded = at::cat({a.scores, (a.scores.max() + 1).expand({G, window})}, 1);  // [G, L]
    const at::Tensor lpos = at::arange(L, a.order.options());
    const at::Tensor order =
        at::cat({lpos.narrow(0, L - window, window).unsqueeze(0).expand({G, window}), a.order}, 1);  // [G, L]
    const at::Tensor rank = at::empty_like(order).scatter_(1, order, lpos.unsqueeze(0).expand({G, L}));
    const at::Tensor first_stage = rank < first.unsqueeze(1);
    const at::Tensor second =
        ((padded + kEpsilon) * a.value_norm).masked_fill(first_stage, std::numeric_limits<float>::infinity());
    const at::Tensor order2 =
        std::get<1>(at::sort(second.neg(), /*stable=*/true, /*dim=*/-1, /*descending=*/false));
    return headwise_mask_from_order(order2, counts, L);
}

std::shared_ptr<const LayerAnalysis> CriticalKVMethod::analyse(const LayerCapture& capture) {
    return analyse_critical(capture, /*global_order=*/false);
}

std::shared_ptr<const LayerAnalysis> CriticalKVMethod::analyse_critical(const LayerCapture& capture,
                                                                        bool global_order) const {
    auto a = std::make_shared<CriticalKVAnalysis>();
    analyse_into(*a, capture);
    auto t = SteadyClock::now();
    a->value_norm = projected_value_norm(capture);
    if (global_order)
        a->global_order =
            std::get<1>(at::sort(a->scores.reshape({-1}), /*stable=*/true, 0, /*descending=*/true));
    sync_for_timing(a->value_norm, settings_.precise_timing);
    a->timing.salience += lap_ms(t);
    return a;
}

LayerAllocation CriticalKVMethod::allocate(const LayerAnalysis& analysis, const CodecSettings& budget) {
    const auto& a = dynamic_cast<const CriticalKVAnalysis&>(analysis);
    check_budget_settings(a, budget);
    check_budget(budget.budget, name());
    const int64_t L = a.n_tokens, G = a.n_kv_head;
    const auto n_kept = static_cast<int64_t>(static_cast<double>(L) * budget.budget);
    if (n_kept < 1)
        throw InfeasibleBudget(
            fmt::format("{}: budget kappa={} keeps no token of L={}; the smallest feasible "
                        "kappa is {:.4f}",
                        name(), budget.budget, L, smallest_kappa_keeping_more_than(0, L)));
    // kvpress: int((1 - ratio) * L * first_stage_ratio), at least 1.
    const int64_t first =
        std::max<int64_t>(1, static_cast<int64_t>(budget.budget * static_cast<double>(L) * kFirstStage));
    const at::Tensor mask = keep_mask(a, settings_.obs_window, at::full({G}, first, a.order.options()),
                                      at::full({G}, n_kept, a.order.options()));
    return allocate_kept_positions(a, headwise_keep(mask).positions);  // [G, n_kept] ascending
}

}  // namespace varrate
