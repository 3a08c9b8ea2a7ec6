#include "codec/methods/expected_attention_method.h"

#include <cmath>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"
#include "base/stopwatch.h"
#include "codec/headwise_eviction.h"
#include "codec/methods/adakv_method.h"
#include "codec/methods/snapkv_method.h"
#include "codec/settings_table.h"
#include "codec/water_filling.h"

namespace varrate {

namespace {

struct ExpectedAttentionAnalysis : LayerAnalysis {
    int64_t head_dim = 0, element_size = 0;
    at::Tensor order;         // [G, L] int64: each head's positions by decreasing score (stable)
    at::Tensor global_order;  // [G * L] int64: the layer's (head, position) by decreasing score (stable)
    at::Tensor kv_sq;         // [G, L] fp32, eviction_kv_sq
    at::Tensor salience;      // [L] CPU fp32: scores averaged over the KV heads
};

}  // namespace

at::Tensor expected_attention_scores(const LayerCapture& capture, const ExpectedAttentionOptions& options) {
    const CaptureShape shape = check_capture(capture, "expected-attention", /*needs_pre_rope=*/false);
    const int64_t G = shape.n_kv_head, L = shape.n_tokens, hd = shape.head_dim, half = hd / 2;
    if (!capture.query_mean.defined() || !capture.query_cov.defined())
        throw Error(
            fmt::format("expected-attention: layer {} has no query statistics (capture it with a prefill)",
                        capture.layer));
    const int64_t H = capture.query_mean.size(0);
    if (capture.query_mean.sizes() != at::IntArrayRef{H, hd} ||
        capture.query_cov.sizes() != at::IntArrayRef{H, hd, hd} || H % G != 0)
        throw Error(fmt::format(
            "expected-attention: layer {} query statistics are {} and {}, expected [H, {}] "
            "and [H, {}, {}] with H a multiple of {}",
            capture.layer, shape_str(capture.query_mean), shape_str(capture.query_cov), hd, hd, hd, G));
    const int64_t sinks = kQueryStatsSkip;
    if (L <= sinks)
        throw InfeasibleBudget(fmt::format(
            "expected-attention: a context of L={} tokens has none after the {} sinks", L, sinks));
    const auto dev = capture.keys.device();
    const auto f64 = at::TensorOptions().dtype(at::kDouble).device(dev);
    // The RoPE rotation averaged over positions L .. L + n_future - 1 (rotate-half layout):
    // R x = [c * x1 - s * x2, s * x1 + c * x2] with c, s the mean cos / sin of each frequency.
    const at::Tensor pos = at::arange(L, L + options.n_future, f64);
    const at::Tensor angles = at::outer(pos, capture.rope_inv_freq.to(f64));  // [n_future, half]
    const at::Tensor c = angles.cos().mean(0), s = angles.sin().mean(0);      // [half]
    at::Tensor R = at::zeros({hd, hd}, f64);
    R.narrow(0, 0, half).narrow(1, 0, half).diagonal().copy_(c);
    R.narrow(0, 0, half).narrow(1, half, half).diagonal().copy_(-s);
    R.narrow(0, half, half).narrow(1, 0, half).diagonal().copy_(s);
    R.narrow(0, half, half).narrow(1, half, half).diagonal().copy_(c);
    const at::Tensor mu = at::matmul(capture.query_mean.to(f64), R.t());                 // [H, hd]
    const at::Tensor cov = at::matmul(at::matmul(R, capture.query_cov.to(f64)), R.t());  // [H, hd, hd]

    const int64_t g = H / G;
    const at::Tensor k = capture.keys.narrow(1, sinks, L - sinks).to(at::kFloat);  // [G, n, hd]
    const at::Tensor kh = k.repeat_interleave(g, 0);                               // [H, n, hd]
    const double d = static_cast<double>(hd);
    at::Tensor logits = at::bmm(kh, mu.to(at::kFloat).unsqueeze(2)).squeeze(2) / std::sqrt(d);  // [H, n]
    logits += (at::bmm(kh, cov.to(at::kFloat)) * kh).sum(2) / (2.0 * d);
    at::Tensor scores = at::softmax(logits, 1).view({G, g, L - sinks}).mean(1);  // [G, n]
    const at::Tensor vnorm = capture.values.narrow(1, sinks, L - sinks).to(at::kFloat).norm(2, {2});
    scores = (scores + options.epsilon) * vnorm;
    return at::cat({(scores.max() + 1.0).expand({G, sinks}), scores}, 1);  // [G, L]
}

std::shared_ptr<const LayerAnalysis> ExpectedAttentionMethod::analyse(const LayerCapture& capture) {
    auto t = SteadyClock::now();
    const CaptureShape shape = check_capture(capture, name(), /*needs_pre_rope=*/false);
    auto a = std::make_shared<ExpectedAttentionAnalysis>();
    a->layer = capture.layer;
    a->n_tokens = shape.n_tokens;
    a->head_dim = shape.head_dim;
    a->element_size = element_size(capture.keys.scalar_type());
    const at::Tensor scores = expected_attention_scores(capture);  // [G, L]
    a->order = snapkv_order(scores);
    a->global_order = std::get<1>(at::sort(scores.reshape({-1}), /*stable=*/true, 0, /*descending=*/true));
    a->kv_sq = eviction_kv_sq(capture);
    a->salience = scores.mean(0).to(at::kCPU);
    sync_for_timing(a->order, settings_.precise_timing);
    a->timing.salience = lap_ms(t);
    return a;
}

LayerAllocation ExpectedAttentionMethod::allocate(const LayerAnalysis& analysis,
                                                  const CodecSettings& budget) {
    auto t = SteadyClock::now();
    const auto& a = dynamic_cast<const ExpectedAttentionAnalysis&>(analysis);
    check_budget(budget.budget, name());
    const int64_t kept = static_cast<int64_t>(static_cast<double>(a.n_tokens) * budget.budget);
    if (kept < 1)
        throw InfeasibleBudget(fmt::format("{}: budget kappa={} keeps int(L*kappa)=0 of L={} tokens", name(),
                                           budget.budget, a.n_tokens));
    // Ada-KV's head-wise share of G * kept (no window: the sinks score above everything instead).
    const at::Tensor mask = AdaKVMethod::keep_mask(a.order, a.global_order, a.n_tokens, /*window=*/0, kept);
    LayerAllocation out = headwise_allocation(name(), a.layer, mask, a.kv_sq, a.head_dim, a.element_size);
    out.diagnostics.salience = a.salience;
    out.diagnostics.salience_norm = normalise_salience(a.salience);
    out.diagnostics.timing = a.timing;
    out.diagnostics.timing.water_filling = lap_ms(t);
    return out;
}

}  // namespace varrate
