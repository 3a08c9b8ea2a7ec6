#include "codec/streamingllm_method.h"

#include <cmath>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"
#include "base/stopwatch.h"
#include "codec/snapkv_method.h"

namespace varrate {

namespace {

struct StreamingAnalysis : LayerAnalysis {
    int64_t head_dim = 0, element_size = 0;
    at::Tensor kv_sq;  // [G, L] fp32, eviction_kv_sq
};

}  // namespace

at::Tensor StreamingLLMMethod::kept_positions(int64_t n_tokens, double kappa) {
    if (!(kappa > 0.0 && kappa <= 1.0))
        throw Error(fmt::format("streamingllm: budget kappa={} is outside (0, 1]", kappa));
    const int64_t kept = static_cast<int64_t>(static_cast<double>(n_tokens) * kappa);
    if (kept <= kSinks) {
        double k_min = std::ceil(static_cast<double>(kSinks + 1) / static_cast<double>(n_tokens) * 1e4) / 1e4;
        while (static_cast<int64_t>(static_cast<double>(n_tokens) * k_min) <= kSinks) k_min += 1e-4;
        throw InfeasibleBudget(
            fmt::format("streamingllm: budget kappa={} keeps int(L*kappa)={} tokens, not more than the {} "
                        "sinks; the smallest "
                        "feasible kappa for L={} is {:.4f}",
                        kappa, kept, kSinks, n_tokens, k_min));
    }
    const auto opts = at::TensorOptions().dtype(at::kLong);
    return at::cat({at::arange(kSinks, opts), at::arange(n_tokens - (kept - kSinks), n_tokens, opts)});
}

std::shared_ptr<const LayerAnalysis> StreamingLLMMethod::analyse(const LayerCapture& capture) {
    const CaptureShape shape = check_capture(capture, name(), /*needs_pre_rope=*/false);
    auto a = std::make_shared<StreamingAnalysis>();
    a->layer = capture.layer;
    a->n_tokens = shape.n_tokens;
    a->head_dim = shape.head_dim;
    a->element_size = element_size(capture.keys.scalar_type());
    a->kv_sq = eviction_kv_sq(capture);
    return a;
}

LayerAllocation StreamingLLMMethod::allocate(const LayerAnalysis& analysis, const CodecSettings& budget) {
    auto t = SteadyClock::now();
    const auto& a = dynamic_cast<const StreamingAnalysis&>(analysis);
    const at::Tensor pos = kept_positions(a.n_tokens, budget.budget).to(a.kv_sq.device());
    LayerAllocation out;
    out.kept = pos.unsqueeze(0).expand({a.kv_sq.size(0), pos.size(0)}).contiguous();  // [G, kept]
    out.diagnostics = eviction_diagnostics(name(), a.layer, out.kept, a.kv_sq, a.head_dim, a.element_size);
    out.diagnostics.timing.water_filling = lap_ms(t);
    return out;
}

LayerKV StreamingLLMMethod::materialise(const LayerCapture& capture, const LayerAnalysis&,
                                        const LayerAllocation& allocation) {
    LayerKV kv = gather_kept(capture, allocation.kept);
    sync_for_timing(kv.values, settings_.precise_timing);
    return kv;
}

}  // namespace varrate
