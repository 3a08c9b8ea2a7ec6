#include "codec/methods/kvzip_method.h"

#include <cmath>
#include <limits>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"
#include "base/stopwatch.h"
#include "codec/headwise_eviction.h"
#include "codec/methods/snapkv_method.h"
#include "codec/settings_table.h"
#include "codec/water_filling.h"

namespace varrate {

namespace {

struct KVzipAnalysis : LayerAnalysis {
    int64_t n_kv_head = 0, head_dim = 0, element_size = 0, pinned = 0;
    at::Tensor scores;  // [G, L] fp32: the repeat scores, pinned positions at +inf
    at::Tensor order;   // [G * L] int64: flat (head-major) positions by descending score, ties to the earlier
    at::Tensor kv_sq;   // [G, L] fp32, eviction_kv_sq
    at::Tensor salience;  // [L] CPU fp32: the repeat scores' max over heads
};

// Entries kept of `total` at kappa, as kvpress counts them: total - int(total * (1 - kappa)).
int64_t kept_entries(int64_t total, double kappa) {
    return total - static_cast<int64_t>(static_cast<double>(total) * (1.0 - kappa));
}

}  // namespace

std::shared_ptr<const LayerAnalysis> KVzipMethod::analyse(const LayerCapture& capture) {
    auto t = SteadyClock::now();
    const CaptureShape shape = check_capture(capture, name(), /*needs_pre_rope=*/false);
    const int64_t G = shape.n_kv_head, L = shape.n_tokens;
    const at::Tensor& rs = capture.repeat_scores;
    if (!rs.defined() || rs.sizes() != at::IntArrayRef{G, L})
        throw Error(
            fmt::format("{}: layer {} needs KVzip's context-reconstruction scores [{}, {}] (a second "
                        "pass over the context, run by compare and niah); the capture has {}",
                        name(), capture.layer, G, L, shape_str(rs)));
    auto a = std::make_shared<KVzipAnalysis>();
    a->layer = capture.layer;
    a->n_tokens = L;
    a->n_kv_head = G;
    a->head_dim = shape.head_dim;
    a->element_size = element_size(capture.keys.scalar_type());
    const int64_t w = std::min(settings_.obs_window, L), sinks = std::min(kSinks, L);
    a->scores = rs.to(at::kFloat).clone();
    a->scores.narrow(1, 0, sinks).fill_(std::numeric_limits<float>::infinity());
    a->scores.narrow(1, L - w, w).fill_(std::numeric_limits<float>::infinity());
    a->pinned = G * (sinks + w - std::max<int64_t>(0, sinks + w - L));  // overlap counted once
    a->order = std::get<1>(at::sort(a->scores.reshape({-1}), /*stable=*/true, 0, /*descending=*/true));
    a->kv_sq = eviction_kv_sq(capture);
    a->salience = std::get<0>(rs.to(at::kFloat).max(0)).to(at::kCPU);
    sync_for_timing(a->order, settings_.precise_timing);
    a->timing.salience = lap_ms(t);
    return a;
}

std::vector<double> KVzipMethod::layer_budgets(
    const std::vector<std::shared_ptr<const LayerAnalysis>>& layers, const CodecSettings& budget) {
    check_budget(budget.budget, name());
    std::vector<at::Tensor> flat;
    int64_t pinned = 0;
    for (const auto& l : layers) {
        const auto& a = dynamic_cast<const KVzipAnalysis&>(*l);
        flat.push_back(a.scores.reshape({-1}));
        pinned += a.pinned;
    }
    const at::Tensor all = at::cat(flat);  // [sum over layers of G * L]
    const int64_t total = all.size(0), keep = kept_entries(total, budget.budget);
    if (keep < pinned)
        throw InfeasibleBudget(
            fmt::format("{}: budget kappa={} keeps {} of {} entries, fewer than the {} sinks and window "
                        "entries it never drops; the smallest feasible kappa is {:.4f}",
                        name(), budget.budget, keep, total, pinned,
                        std::ceil(static_cast<double>(pinned) / static_cast<double>(total) * 1e4) / 1e4));
    // One top-k over every layer's entries (ties to the earlier layer, head, position), counted per layer.
    const at::Tensor top =
        std::get<1>(at::sort(all, /*stable=*/true, 0, /*descending=*/true)).narrow(0, 0, keep);
    std::vector<int64_t> offsets;
    int64_t at_entry = 0;
    for (const at::Tensor& f : flat) {
        offsets.push_back(at_entry);
        at_entry += f.size(0);
    }
    const at::Tensor bounds = at::tensor(offsets, at::kLong).to(top.device());
    const at::Tensor layer_of = at::searchsorted(bounds, top, /*out_int32=*/false, /*right=*/true) - 1;
    const at::Tensor counts = at::bincount(layer_of, {}, static_cast<int64_t>(layers.size())).to(at::kCPU);
    std::vector<double> out;
    for (size_t l = 0; l < layers.size(); ++l)
        out.push_back(static_cast<double>(counts[static_cast<int64_t>(l)].item<int64_t>()) /
                      static_cast<double>(flat[l].size(0)));
    return out;
}

LayerAllocation KVzipMethod::allocate(const LayerAnalysis& analysis, const CodecSettings& budget) {
    auto t = SteadyClock::now();
    const auto& a = dynamic_cast<const KVzipAnalysis&>(analysis);
    const int64_t entries = a.n_kv_head * a.n_tokens;
    const int64_t keep = std::llround(budget.budget * static_cast<double>(entries));
    check_budget(budget.budget, name());
    if (keep < a.pinned)
        throw InfeasibleBudget(fmt::format(
            "{}: layer {} would keep {} of {} entries, fewer than its {} sinks and window entries", name(),
            a.layer, keep, entries, a.pinned));
    at::Tensor mask = at::zeros({entries}, a.scores.options().dtype(at::kBool));
    mask.index_fill_(0, a.order.narrow(0, 0, keep), true);
    LayerAllocation out = headwise_allocation(name(), a.layer, mask.view({a.n_kv_head, a.n_tokens}), a.kv_sq,
                                              a.head_dim, a.element_size);
    out.diagnostics.salience = a.salience;
    out.diagnostics.salience_norm = normalise_salience(a.salience);
    out.diagnostics.timing = a.timing;
    out.diagnostics.timing.water_filling = lap_ms(t);
    return out;
}

}  // namespace varrate
