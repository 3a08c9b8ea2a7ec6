#include "codec/methods/snap_think_method.h"

#include <cmath>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"
#include "codec/channel_pruned_layer.h"
#include "codec/methods/think_method.h"
#include "codec/settings_table.h"

namespace varrate {

namespace {

struct SnapThinKAnalysis : SnapKVAnalysis {
    at::Tensor query_norm;  // [G, hd] fp32, ThinKMethod::query_channel_norm
    at::Tensor key_sq;      // [G, L, hd] fp32, post-RoPE keys squared
};

}  // namespace

int64_t SnapThinKMethod::kept_tokens(const CodecSettings& budget, int64_t n_tokens, int64_t n_kv_head,
                                     int64_t head_dim, int64_t element_size) const {
    check_budget(budget.budget, name());
    const int64_t kept_ch = head_dim - ThinKMethod::pruned_channels(head_dim, budget.key_channel_ratio);
    const double full = static_cast<double>(n_tokens * n_kv_head * 2 * head_dim * element_size);
    // The store's bytes (channel_pruned_bytes) are affine in the tokens: the indices, plus a token's scalars.
    const auto indices =
        static_cast<double>(channel_pruned_bytes(0, n_kv_head, head_dim, kept_ch, element_size));
    const double per_token =
        static_cast<double>(channel_pruned_bytes(1, n_kv_head, head_dim, kept_ch, element_size)) - indices;
    // The slack keeps a kappa computed from a count (n * per_token + indices) / full at that count.
    const auto n =
        static_cast<int64_t>(std::floor((budget.budget * full * (1 + 1e-12) - indices) / per_token));
    const int64_t w = settings_.obs_window;
    if (n >= w && n >= 1) return std::min(n, n_tokens);
    const double smallest =
        std::ceil((static_cast<double>(std::max<int64_t>(w, 1)) * per_token + indices) / full * 1e4) / 1e4;
    if (n_tokens <= w || smallest > 1.0)
        throw InfeasibleBudget(
            fmt::format("{}: a context of L={} tokens cannot hold the observation window {} "
                        "at any kappa",
                        name(), n_tokens, w));
    throw InfeasibleBudget(
        fmt::format("{}: budget kappa={} keeps {} tokens per KV head, fewer than the "
                    "always-kept window of {}; the smallest feasible kappa for L={} is {:.4f}",
                    name(), budget.budget, std::max<int64_t>(n, 0), w, n_tokens, smallest));
}

std::shared_ptr<const LayerAnalysis> SnapThinKMethod::analyse(const LayerCapture& capture) {
    auto a = std::make_shared<SnapThinKAnalysis>();
    analyse_into(*a, capture);
    a->query_norm = ThinKMethod::query_channel_norm(capture);
    a->key_sq = capture.keys.to(at::kFloat).square();
    return a;
}

LayerAllocation SnapThinKMethod::allocate(const LayerAnalysis& analysis, const CodecSettings& budget) {
    const auto& a = dynamic_cast<const SnapThinKAnalysis&>(analysis);
    check_budget_settings(a, budget);
    const int64_t G = a.n_kv_head, hd = a.head_dim, L = a.n_tokens;
    const int64_t n = kept_tokens(budget, L, G, hd, a.element_size);
    const int64_t pruned = ThinKMethod::pruned_channels(hd, budget.key_channel_ratio);
    LayerAllocation out = allocate_kept(a, n);  // [G, n] ascending
    // ThinK over what SnapKV kept: each head's key energy per channel over its kept tokens.
    const at::Tensor kept_sq = a.key_sq.gather(1, out.kept.unsqueeze(2).expand({G, n, hd}));  // [G, n, hd]
    out.kept_channels =
        ThinKMethod::kept_channels(a.query_norm * kept_sq.mean(1), pruned);  // [G, hd - pruned]

    LayerDiagnostics& d = out.diagnostics;
    d.method = name();
    d.stored_bytes = channel_pruned_bytes(n, G, hd, hd - pruned, a.element_size);
    d.footprint = static_cast<double>(d.stored_bytes) / static_cast<double>(d.full_bytes);
    d.budget_B = n * G * (2 * hd - pruned);
    // A token a head kept holds 2 * hd - pruned of that head's 2 * hd scalars; it loses the pruned
    // channels' key energy there, and everything in the heads that evicted it.
    const at::Tensor rank_scale =
        at::full({}, static_cast<double>(2 * hd - pruned) / static_cast<double>(2 * hd));
    d.rank = (d.rank.to(at::kDouble) * rank_scale).round().to(at::kLong);
    d.sum_ranks = d.rank.sum().item<int64_t>();
    d.min_rank = d.rank.min().item<int64_t>();
    d.max_rank = d.rank.max().item<int64_t>();
    d.mean_rank = d.rank.to(at::kDouble).mean().item<double>();
    if (pruned > 0) d.n_exact = 0;
    at::Tensor keep_ch = at::zeros({G, hd}, out.kept.options().dtype(at::kBool));
    keep_ch.scatter_(1, out.kept_channels, true);
    const at::Tensor pruned_sq = a.key_sq.masked_fill(keep_ch.unsqueeze(1), 0).sum(2);  // [G, L]
    at::Tensor kept_mask = at::zeros({G, L}, out.kept.options().dtype(at::kBool));
    kept_mask.scatter_(1, out.kept, true);
    const at::Tensor lost = at::where(kept_mask, pruned_sq, a.kv_sq).sum(0);  // [L]
    d.rel_error = (lost / a.kv_sq.sum(0).clamp_min(1e-30)).sqrt().clamp_max(1.0).to(at::kCPU, at::kFloat);
    d.mean_rel_error = d.rel_error.to(at::kDouble).mean().item<double>();
    if (pruned > 0) d.exact = at::zeros_like(d.exact);
    return out;
}

LayerKV SnapThinKMethod::materialise(const LayerCapture& capture, const LayerAnalysis& analysis,
                                     const LayerAllocation& allocation) {
    LayerKV kv = SnapKVMethod::materialise(capture, analysis, allocation);
    kv.keys = ThinKMethod::zero_pruned(kv.keys, allocation.kept_channels);
    return kv;
}

std::shared_ptr<const LayerPrefix> SnapThinKMethod::store(const LayerCapture& capture,
                                                          const LayerAnalysis& analysis,
                                                          const LayerAllocation& allocation) {
    const LayerKV kv = gather_kept(capture, allocation.kept);
    return ThinKMethod::channel_store(analysis.layer, kv.keys, kv.values, allocation.kept_channels);
}

}  // namespace varrate
