#include "codec/methods/snapkv_per_layer_method.h"

#include <numeric>

#include <fmt/format.h>

#include "base/error.h"
#include "codec/footprint.h"

namespace varrate {

double SnapKVPerLayerMethod::layer_budget(const CodecSettings& s, int64_t n_layers, int64_t layer) {
    const std::vector<double>& p = s.layer_profile;
    if (p.empty()) return s.budget;
    if (static_cast<int64_t>(p.size()) != n_layers)
        throw Error(fmt::format("snapkv-per-layer: layer_profile has {} entries, the model has {} layers",
                                p.size(), n_layers));
    if (layer < 0 || layer >= n_layers)
        throw Error(fmt::format("snapkv-per-layer: layer {} of a model of {} layers", layer, n_layers));
    const double mean = std::accumulate(p.begin(), p.end(), 0.0) / static_cast<double>(p.size());
    const double kappa = s.budget * p[static_cast<size_t>(layer)] / mean;
    if (kappa > 1.0)
        throw InfeasibleBudget(fmt::format(
            "snapkv-per-layer: at kappa={} layer {}'s budget kappa x {:g} / {:g} (its profile entry over the "
            "profile's mean) is {:.4f}, more than the whole layer; the largest feasible kappa is {:.4f}",
            s.budget, layer, p[static_cast<size_t>(layer)], mean, kappa,
            mean / *std::max_element(p.begin(), p.end())));
    return kappa;
}

std::shared_ptr<const LayerAnalysis> SnapKVPerLayerMethod::analyse(const LayerCapture& capture) {
    check_layer_count(capture, "the per-layer profile");
    layer_budget(settings_, capture.n_layers, capture.layer);  // the profile's length, before any budget
    return SnapKVMethod::analyse(capture);
}

LayerAllocation SnapKVPerLayerMethod::allocate(const LayerAnalysis& analysis, const CodecSettings& budget) {
    const auto& a = dynamic_cast<const SnapKVAnalysis&>(analysis);
    check_budget_settings(a, budget);
    CodecSettings layer = budget;
    layer.budget = layer_budget(budget, a.n_layers, a.layer);
    return allocate_kept(a, snapkv_kept_tokens(layer, a.n_tokens, name()));
}

}  // namespace varrate
