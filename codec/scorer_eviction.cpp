#include "codec/scorer_eviction.h"

#include <cmath>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"
#include "base/stopwatch.h"
#include "codec/methods/snapkv_method.h"
#include "codec/settings_table.h"

namespace varrate {

namespace {

struct ScorerAnalysis : LayerAnalysis {
    int64_t head_dim = 0, element_size = 0;
    at::Tensor order;  // [G, L] int64: positions by descending score, equal scores to the earlier one
    at::Tensor kv_sq;  // [G, L] fp32, eviction_kv_sq
};

}  // namespace

at::Tensor descending_order(const at::Tensor& scores) {
    return std::get<1>(
        at::sort(scores.to(at::kFloat).neg(), /*stable=*/true, /*dim=*/-1, /*descending=*/false));
}

LayerAllocation keep_first_in_order(const LayerAnalysis& analysis, const std::string& method,
                                    const at::Tensor& order, int64_t kept, const at::Tensor& kv_sq,
                                    int64_t head_dim, int64_t element_size, SteadyClock::time_point started) {
    LayerAllocation out;
    out.kept = std::get<0>(order.narrow(1, 0, kept).sort(/*dim=*/-1));  // [G, kept] ascending
    out.diagnostics = eviction_diagnostics(method, analysis.layer, out.kept, kv_sq, head_dim, element_size);
    out.diagnostics.timing = analysis.timing;
    out.diagnostics.timing.water_filling = lap_ms(started);
    return out;
}

double smallest_kappa_keeping_more_than(int64_t floor, int64_t n_tokens) {
    double k = std::ceil(static_cast<double>(floor + 1) / static_cast<double>(n_tokens) * 1e4) / 1e4;
    while (static_cast<int64_t>(static_cast<double>(n_tokens) * k) <= floor) k += 1e-4;
    return k;
}

int64_t ScorerEviction::kappa_tokens(int64_t n_tokens, double kappa) const {
    check_budget(kappa, name_);
    return static_cast<int64_t>(static_cast<double>(n_tokens) * kappa);
}

int64_t ScorerEviction::kept_tokens(int64_t n_tokens, double kappa) const {
    const int64_t kept = kappa_tokens(n_tokens, kappa);
    if (kept < 1)
        throw InfeasibleBudget(
            fmt::format("{}: budget kappa={} keeps no token of L={}; the smallest feasible "
                        "kappa is {:.4f}",
                        name_, kappa, n_tokens, smallest_kappa_keeping_more_than(0, n_tokens)));
    return kept;
}

std::shared_ptr<const LayerAnalysis> ScorerEviction::analyse(const LayerCapture& capture) {
    auto t = SteadyClock::now();
    const CaptureShape shape = check_capture(capture, name(), /*needs_pre_rope=*/false);
    auto a = std::make_shared<ScorerAnalysis>();
    a->layer = capture.layer;
    a->n_tokens = shape.n_tokens;
    a->head_dim = shape.head_dim;
    a->element_size = element_size(capture.keys.scalar_type());
    const at::Tensor s = scores(capture);  // [G, L]
    if (s.sizes() != at::IntArrayRef{shape.n_kv_head, shape.n_tokens})
        throw Error(fmt::format("{}: layer {} scores are {}, expected [{}, {}]", name(), capture.layer,
                                shape_str(s), shape.n_kv_head, shape.n_tokens));
    a->order = descending_order(s);
    a->kv_sq = eviction_kv_sq(capture);
    sync_for_timing(a->order, settings_.precise_timing);
    a->timing.salience = lap_ms(t);
    return a;
}

LayerAllocation ScorerEviction::allocate(const LayerAnalysis& analysis, const CodecSettings& budget) {
    auto t = SteadyClock::now();
    const auto& a = dynamic_cast<const ScorerAnalysis&>(analysis);
    return keep_first_in_order(a, name(), a.order, kept_tokens(a.n_tokens, budget.budget), a.kv_sq,
                               a.head_dim, a.element_size, t);
}

LayerKV ScorerEviction::materialise(const LayerCapture& capture, const LayerAnalysis&,
                                    const LayerAllocation& allocation) {
    LayerKV kv = gather_kept(capture, allocation.kept);
    sync_for_timing(kv.values, settings_.precise_timing);
    return kv;
}

}  // namespace varrate
