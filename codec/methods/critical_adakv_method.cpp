#include "codec/methods/critical_adakv_method.h"

#include <ATen/ATen.h>

#include "base/stopwatch.h"
#include "codec/footprint.h"
#include "codec/headwise_eviction.h"
#include "codec/methods/adakv_method.h"

namespace varrate {

LayerAllocation CriticalAdaKVMethod::allocate(const LayerAnalysis& analysis, const CodecSettings& budget) {
    auto t = SteadyClock::now();
    const auto& a = dynamic_cast<const CriticalKVAnalysis&>(analysis);
    check_budget_settings(a, budget);
    const int64_t L = a.n_tokens, w = settings_.obs_window;
    const int64_t n_kept = snapkv_kept_tokens(budget, L, name());
    // Ada-KV's budgets per head, then CriticalKV within each: kvpress's (budget * 0.5).to(int64), and never
    // less than the safeguard that is already at the top.
    const at::Tensor counts = AdaKVMethod::keep_mask(a.order, a.global_order, L, w, n_kept).sum(1);  // [G]
    const at::Tensor first =
        (counts.to(at::kDouble) * kFirstStage).to(at::kLong).clamp_min(AdaKVMethod::safeguard_tokens(n_kept));
    const at::Tensor mask = keep_mask(a, w, first, counts);
    LayerAllocation out = headwise_allocation(name(), a.layer, mask, a.kv_sq, a.head_dim, a.element_size);
    LayerDiagnostics& d = out.diagnostics;
    d.salience = a.salience;
    d.salience_norm = a.salience_norm;
    d.timing = a.timing;
    d.timing.water_filling = lap_ms(t);
    return out;
}

}  // namespace varrate
