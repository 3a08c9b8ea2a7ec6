#include "codec/methods/pyramidkv_method.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "base/error.h"
#include "codec/settings_table.h"

namespace varrate {

namespace {

struct Schedule {
    double max_num = 0, min_num = 0;
    bool fallback = false;
};

// kvpress's arithmetic, operation for operation in double (its compression_ratio is 1 - kappa).
Schedule schedule(const CodecSettings& s, int64_t n_tokens) {
    const double L = static_cast<double>(n_tokens), w = static_cast<double>(s.obs_window);
    const double beta = static_cast<double>(PyramidKVMethod::kBeta);
    const double max_capacity = w + L * s.budget;
    Schedule sc;
    sc.min_num = (max_capacity - w) / beta;
    sc.max_num = (max_capacity - w) * 2 - sc.min_num;
    if (sc.max_num >= L - w) {
        sc.max_num = L - w;
        sc.min_num = (max_capacity - w) * 2 - sc.max_num;
    }
    sc.fallback = !(L >= sc.max_num && sc.max_num >= sc.min_num && sc.min_num >= w);
    return sc;
}

}  // namespace

bool PyramidKVMethod::schedule_falls_back(const CodecSettings& s, int64_t n_tokens) {
    return schedule(s, n_tokens).fallback;
}

int64_t PyramidKVMethod::layer_kept_tokens(const CodecSettings& s, int64_t n_tokens, int64_t n_layers,
                                           int64_t layer) {
    if (n_layers <= 0 || layer < 0 || layer >= n_layers)
        throw Error(fmt::format("pyramidkv: layer {} of a model of {} layers", layer, n_layers));
    if (n_tokens <= s.obs_window)
        throw InfeasibleBudget(
            fmt::format("pyramidkv: a context of L={} tokens is not longer than the observation window {}; "
                        "no kappa is feasible for this L",
                        n_tokens, s.obs_window));
    check_budget(s.budget, "pyramidkv");
    const Schedule sc = schedule(s, n_tokens);
    const double L = static_cast<double>(n_tokens), w = static_cast<double>(s.obs_window);
    const double max_num = sc.max_num, min_num = sc.min_num;
    int64_t kept = 0;
    if (sc.fallback) {
        kept = std::max<int64_t>(1, static_cast<int64_t>(std::nearbyint(L * s.budget)));
    } else {
        const double steps = n_layers > 1 ? (max_num - min_num) / static_cast<double>(n_layers - 1) : 0.0;
        kept = static_cast<int64_t>(std::nearbyint(max_num - static_cast<double>(layer) * steps));
    }
    if (kept < s.obs_window) {
        // Below the window only on the fallback (the schedule keeps at least w): round(L * kappa) >= w.
        double k_min = std::ceil((w - 0.5) / L * 1e4) / 1e4;
        while (std::nearbyint(L * k_min) < w) k_min += 1e-4;
        throw InfeasibleBudget(fmt::format(
            "pyramidkv: budget kappa={} keeps {} tokens per KV head in layer {} of {}, fewer than "
            "the always-kept window of {}; the smallest feasible kappa for L={} is {:.4f}",
            s.budget, kept, layer, n_layers, s.obs_window, n_tokens, k_min));
    }
    return std::min(kept, n_tokens);
}

std::shared_ptr<const LayerAnalysis> PyramidKVMethod::analyse(const LayerCapture& capture) {
    check_layer_count(capture, "PyramidKV's depth schedule");
    return SnapKVMethod::analyse(capture);
}

LayerAllocation PyramidKVMethod::allocate(const LayerAnalysis& analysis, const CodecSettings& budget) {
    const auto& a = dynamic_cast<const SnapKVAnalysis&>(analysis);
    check_budget_settings(a, budget);
    LayerAllocation out = allocate_kept(a, layer_kept_tokens(budget, a.n_tokens, a.n_layers, a.layer));
    out.diagnostics.schedule_fallback = schedule_falls_back(budget, a.n_tokens);
    return out;
}

}  // namespace varrate
