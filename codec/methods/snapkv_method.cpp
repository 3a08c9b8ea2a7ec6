#include "codec/methods/snapkv_method.h"

#include <chrono>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"
#include "codec/footprint.h"
#include "codec/headwise_eviction.h"
#include "codec/salience.h"
#include "codec/water_filling.h"

namespace varrate {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

LayerDiagnostics eviction_diagnostics(const std::string& method, int64_t layer, const at::Tensor& kept,
                                      const at::Tensor& kv_sq, int64_t head_dim, int64_t element_size) {
    at::Tensor kept_mask = at::zeros(kv_sq.sizes(), kept.options().dtype(at::kBool));
    kept_mask.scatter_(1, kept, true);
    return mask_eviction_diagnostics(method, layer, kept_mask, kv_sq, head_dim, element_size);
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
    auto a = std::make_shared<SnapKVAnalysis>();
    analyse_into(*a, capture);
    return a;
}

void SnapKVMethod::analyse_into(SnapKVAnalysis& analysis, const LayerCapture& capture) const {
    const auto t0 = Clock::now();
    const CaptureShape shape = check_capture(capture, name(), /*needs_pre_rope=*/false);
    const int64_t n_tok = shape.n_tokens, w = settings_.obs_window;
    SnapKVAnalysis* a = &analysis;
    a->layer = capture.layer;
    a->n_tokens = n_tok;
    a->n_kv_head = shape.n_kv_head;
    a->head_dim = shape.head_dim;
    a->element_size = element_size(capture.keys.scalar_type());
    const at::Tensor scores = snapkv_scores(capture, w, settings_.pool_kernel);  // [G, L - w]
    a->n_layers = capture.n_layers;
    a->scores = scores;
    a->order = snapkv_order(scores);
    a->kv_sq = eviction_kv_sq(capture);
    const at::Tensor salience = at::cat({scores.mean(0), scores.max().expand({w})});  // [L]
    a->salience = salience.to(at::kCPU);
    a->salience_norm =
        at::cat({normalise_salience(salience.narrow(0, 0, n_tok - w)), at::zeros({w}, scores.options())})
            .to(at::kCPU);
    sync_for_timing(a->order, settings_.precise_timing);
    a->timing.salience = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

LayerAllocation SnapKVMethod::allocate(const LayerAnalysis& analysis, const CodecSettings& budget) {
    const auto& a = dynamic_cast<const SnapKVAnalysis&>(analysis);
    check_budget_settings(a, budget);
    return allocate_kept(a, snapkv_kept_tokens(budget, a.n_tokens, name()));
}

void SnapKVMethod::check_budget_settings(const SnapKVAnalysis& a, const CodecSettings& budget) const {
    const std::string diff = structural_difference(settings_, budget);
    if (!diff.empty())
        throw Error(fmt::format("{}: layer {} was analysed with other settings ({})", name(), a.layer, diff));
}

void SnapKVMethod::check_layer_count(const LayerCapture& capture, const std::string& reader) const {
    if (capture.n_layers <= 0)
        throw Error(
            fmt::format("{}: layer {} capture does not say how many layers the model has "
                        "(LayerCapture::n_layers is 0); {} needs it",
                        name(), capture.layer, reader));
    if (capture.layer < 0 || capture.layer >= capture.n_layers)
        throw Error(fmt::format("{}: capture of layer {} from a model of {} layers", name(), capture.layer,
                                capture.n_layers));
}

LayerAllocation SnapKVMethod::allocate_kept(const SnapKVAnalysis& a, int64_t kept) const {
    return allocate_kept_positions(
        a, snapkv_keep_from_order(a.order, a.n_tokens, settings_.obs_window, kept));  // [G, kept]
}

LayerAllocation SnapKVMethod::allocate_kept_positions(const SnapKVAnalysis& a, const at::Tensor& kept) const {
    const auto t0 = Clock::now();
    LayerAllocation out;
    out.kept = kept;
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
