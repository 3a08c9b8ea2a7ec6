#include "codec/methods/adakv_method.h"

#include <algorithm>
#include <chrono>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"
#include "codec/footprint.h"
#include "codec/headwise_eviction.h"

namespace varrate {

namespace {

using Clock = std::chrono::steady_clock;

struct AdaKVAnalysis : SnapKVAnalysis {
    at::Tensor global_order;  // [G * (L - w)] int64: the layer's non-window scores by descending score
};

}  // namespace

int64_t AdaKVMethod::safeguard_tokens(int64_t n_kept) {
    // kvpress: int(n_kept * alpha_safeguard), then max(1, .) when alpha > 0 and n_kept > 0.
    const int64_t n_safe = static_cast<int64_t>(static_cast<double>(n_kept) * kAlphaSafeguard);
    return n_kept > 0 ? std::max<int64_t>(1, n_safe) : 0;
}

at::Tensor AdaKVMethod::keep_mask(const at::Tensor& order, const at::Tensor& global_order, int64_t n_tokens,
                                  int64_t window, int64_t n_kept) {
    const int64_t n_kv = order.size(0), n_others = n_tokens - window;
    // The safeguard beyond the window: each head's top secured[g] others.
    const int64_t secured = std::max<int64_t>(0, safeguard_tokens(n_kept) - window);
    const at::Tensor counts = at::full({n_kv}, secured, order.options());
    const at::Tensor safe = headwise_mask_from_order(order, counts, n_others).reshape({-1});  // [G (L - w)]
    // The rest: the best not yet secured of all heads' others, in the global order.
    const int64_t rest = n_kv * (n_kept - window - secured);
    const at::Tensor free_in_order = safe.index_select(0, global_order).logical_not();
    const at::Tensor take = free_in_order & (free_in_order.to(at::kLong).cumsum(0) <= rest);
    at::Tensor others = safe.clone();
    others.index_fill_(0, global_order.masked_select(take), true);
    return at::cat({others.view({n_kv, n_others}), at::ones({n_kv, window}, others.options())},
                   1);  // [G, L]
}

std::shared_ptr<const LayerAnalysis> AdaKVMethod::analyse(const LayerCapture& capture) {
    auto a = std::make_shared<AdaKVAnalysis>();
    analyse_into(*a, capture);
    const auto t0 = Clock::now();
    // Stable: equal scores keep the earlier flat position (head-major), as snapkv_order does within a head.
    a->global_order = std::get<1>(at::sort(a->scores.reshape({-1}), /*stable=*/true, 0, /*descending=*/true));
    sync_for_timing(a->global_order, settings_.precise_timing);
    a->timing.salience += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    return a;
}

LayerAllocation AdaKVMethod::allocate(const LayerAnalysis& analysis, const CodecSettings& budget) {
    const auto t0 = Clock::now();
    const auto& a = dynamic_cast<const AdaKVAnalysis&>(analysis);
    check_budget_settings(a, budget);
    const int64_t n_kept = snapkv_kept_tokens(budget, a.n_tokens, name());
    const at::Tensor mask = keep_mask(a.order, a.global_order, a.n_tokens, settings_.obs_window, n_kept);
    LayerAllocation out = headwise_allocation(name(), a.layer, mask, a.kv_sq, a.head_dim, a.element_size);
    LayerDiagnostics& d = out.diagnostics;
    d.salience = a.salience;
    d.salience_norm = a.salience_norm;
    d.timing = a.timing;
    d.timing.water_filling = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    return out;
}

}  // namespace varrate
