#include "codec/methods/compactor_method.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"
#include "base/stopwatch.h"
#include "codec/methods/leverage_method.h"
#include "codec/methods/snapkv_method.h"

namespace varrate {

namespace {

// The budget-independent parts of a layer's scores: both standardised over [begin, end).
struct CompactorAnalysis : LayerAnalysis {
    int64_t head_dim = 0, element_size = 0, begin = 0, end = 0;
    at::Tensor leverage;   // [G, end - begin] fp32, z-scored
    at::Tensor attention;  // [G, end - begin] fp32, z-scored
    at::Tensor kv_sq;      // [G, L] fp32, eviction_kv_sq
};

// (x - mean) / max(std, 1e-6) over every element (torch's unbiased std), as kvpress's z-scores.
at::Tensor z_scored(const at::Tensor& x) {
    return (x - x.mean()) / x.std().clamp_min(1e-6);
}

CompactorAnalysis parts(const LayerCapture& c, const std::string& who) {
    const CaptureShape shape = check_capture(c, who, /*needs_pre_rope=*/true);
    const int64_t L = shape.n_tokens, G = shape.n_kv_head;
    CompactorAnalysis a;
    a.layer = c.layer;
    a.n_tokens = L;
    a.head_dim = shape.head_dim;
    a.element_size = element_size(c.keys.scalar_type());
    a.begin = std::min(kNonCausalBegin, L);
    a.end = L - std::min(kNonCausalEnd, L - a.begin);
    const int64_t n = a.end - a.begin;
    if (n < 2)
        throw Error(fmt::format(
            "{}: layer {} has {} tokens; it always keeps the first {} and the last {} and "
            "scores the others, so it needs at least {}",
            who, c.layer, L, kNonCausalBegin, kNonCausalEnd, kNonCausalBegin + kNonCausalEnd + 2));
    const at::Tensor& A = c.noncausal_attention;  // [H, L]
    if (!A.defined() || A.dim() != 2 || A.size(1) != L || A.size(0) % G != 0)
        throw Error(
            fmt::format("{}: layer {} needs the non-causal attention of the all-queries pass ([n_head, "
                        "{}]), the capture has {}",
                        who, c.layer, L, shape_str(A)));
    a.leverage = z_scored(leverage_scores(c.keys_pre_rope.narrow(1, a.begin, n)));  // [G, n]
    const at::Tensor per_kv = A.narrow(1, a.begin, n).to(at::kFloat).view({G, -1, n}).mean(1);
    const at::Tensor s = per_kv * c.values.narrow(1, a.begin, n).to(at::kFloat).norm(2, -1);  // [G, n]
    // avg_pool1d(kernel 3, padding 1): zero-padded neighbours, always divided by 3.
    const at::Tensor p = at::constant_pad_nd(s, {1, 1});
    a.attention = z_scored((p.narrow(1, 0, n) + p.narrow(1, 1, n) + p.narrow(1, 2, n)) / 3.0);
    a.kv_sq = eviction_kv_sq(c);
    return a;
}

// The blended scores [G, L]: sinks at the largest score of the layer.
at::Tensor blended(const CompactorAnalysis& a, double kappa) {
    const at::Tensor inner = (1.0 - kappa) * a.leverage + a.attention;         // [G, n]
    at::Tensor out = inner.max().expand({inner.size(0), a.n_tokens}).clone();  // no host read
    out.narrow(1, a.begin, a.end - a.begin).copy_(inner);
    return out;
}

}  // namespace

at::Tensor CompactorMethod::scores(const LayerCapture& capture) const {
    return blended(parts(capture, name()), settings_.budget);
}

std::shared_ptr<const LayerAnalysis> CompactorMethod::analyse(const LayerCapture& capture) {
    auto t = SteadyClock::now();
    auto a = std::make_shared<CompactorAnalysis>(parts(capture, name()));
    sync_for_timing(a->attention, settings_.precise_timing);
    a->timing.salience = lap_ms(t);
    return a;
}

LayerAllocation CompactorMethod::allocate(const LayerAnalysis& analysis, const CodecSettings& budget) {
    auto t = SteadyClock::now();
    const auto& a = dynamic_cast<const CompactorAnalysis&>(analysis);
    return keep_first_in_order(a, name(), descending_order(blended(a, budget.budget)),
                               kept_tokens(a.n_tokens, budget.budget), a.kv_sq, a.head_dim, a.element_size,
                               t);
}

}  // namespace varrate
