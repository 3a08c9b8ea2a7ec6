#include "codec/methods/think_method.h"

#include <algorithm>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"
#include "base/stopwatch.h"
#include "codec/channel_pruned_layer.h"

namespace varrate {

namespace {

struct ThinKAnalysis : LayerAnalysis {
    int64_t n_kv_head = 0, head_dim = 0, element_size = 0;
    at::Tensor scores;  // [G, hd] fp32: ThinK's channel scores
    at::Tensor key_sq;  // [G, L, hd] fp32: each key channel's energy
    at::Tensor z_sq;    // [L] fp32: ||k||^2 + ||v||^2 over the heads
};

}  // namespace

at::Tensor ThinKMethod::query_channel_norm(const LayerCapture& capture) {
    const CaptureShape shape = check_capture(capture, "think", /*needs_pre_rope=*/false);
    const at::Tensor& wq = capture.window_queries;  // [H, w_obs, hd]
    if (!wq.defined() || wq.dim() != 3 || wq.size(2) != shape.head_dim || wq.size(0) % shape.n_kv_head != 0 ||
        wq.size(1) < 1)
        throw Error(fmt::format("think: layer {} window queries are {}, expected [k * {}, >= 1, {}]",
                                capture.layer, shape_str(wq), shape.n_kv_head, shape.head_dim));
    const int64_t n = std::min<int64_t>(kWindow, wq.size(1));
    const at::Tensor q = wq.narrow(1, wq.size(1) - n, n).to(at::kFloat);
    return q.square().mean(1).view({shape.n_kv_head, -1, shape.head_dim}).mean(1);  // [G, hd]
}

int64_t ThinKMethod::pruned_channels(int64_t head_dim, double ratio) {
    if (!(ratio >= 0.0 && ratio <= 1.0))
        throw Error(fmt::format("think: key_channel_ratio must be in [0, 1], got {}", ratio));
    return static_cast<int64_t>(static_cast<double>(head_dim) * ratio);
}

at::Tensor ThinKMethod::kept_channels(const at::Tensor& scores, int64_t pruned) {
    // Ascending scores, equal ones to the lower channel (stable): the first `pruned` go.
    const at::Tensor order = std::get<1>(at::sort(scores, /*stable=*/true, /*dim=*/-1, /*descending=*/false));
    return std::get<0>(order.narrow(1, pruned, scores.size(1) - pruned).sort(/*dim=*/-1));
}

at::Tensor ThinKMethod::zero_pruned(const at::Tensor& keys, const at::Tensor& kept) {
    at::Tensor keep = at::zeros({keys.size(0), keys.size(2)}, keys.options().dtype(at::kBool));
    keep.scatter_(1, kept, true);
    return keys.masked_fill(keep.logical_not().unsqueeze(1), 0);
}

std::shared_ptr<const LayerPrefix> ThinKMethod::channel_store(int64_t layer, const at::Tensor& keys,
                                                              const at::Tensor& values,
                                                              const at::Tensor& kept) {
    ChannelPrunedLayer::Parts p;
    p.layer = layer;
    p.head_dim = keys.size(2);
    p.keys =
        keys.gather(2, kept.unsqueeze(1).expand({keys.size(0), keys.size(1), kept.size(1)})).contiguous();
    p.channels = kept.to(at::kByte);
    p.values = values.contiguous();
    return std::make_shared<const ChannelPrunedLayer>(std::move(p));
}

std::shared_ptr<const LayerAnalysis> ThinKMethod::analyse(const LayerCapture& capture) {
    auto t = SteadyClock::now();
    const CaptureShape shape = check_capture(capture, name(), /*needs_pre_rope=*/false);
    auto a = std::make_shared<ThinKAnalysis>();
    a->layer = capture.layer;
    a->n_tokens = shape.n_tokens;
    a->n_kv_head = shape.n_kv_head;
    a->head_dim = shape.head_dim;
    a->element_size = element_size(capture.keys.scalar_type());
    a->key_sq = capture.keys.to(at::kFloat).square();             // [G, L, hd]
    a->scores = query_channel_norm(capture) * a->key_sq.mean(1);  // [G, hd]
    a->z_sq = a->key_sq.sum(at::IntArrayRef{0, 2}) +
              capture.values.to(at::kFloat).square().sum(at::IntArrayRef{0, 2});
    sync_for_timing(a->scores, settings_.precise_timing);
    a->timing.salience = lap_ms(t);
    return a;
}

LayerAllocation ThinKMethod::allocate(const LayerAnalysis& analysis, const CodecSettings& budget) {
    auto t = SteadyClock::now();
    const auto& a = dynamic_cast<const ThinKAnalysis&>(analysis);
    const int64_t L = a.n_tokens, G = a.n_kv_head, hd = a.head_dim;
    const int64_t pruned = pruned_channels(hd, budget.key_channel_ratio);
    LayerAllocation out;
    out.kept_channels = kept_channels(a.scores, pruned);  // [G, hd - pruned]

    LayerDiagnostics& d = out.diagnostics;
    d.method = name();
    d.layer = a.layer;
    d.n_tokens = L;
    d.dim = 2 * G * hd;
    const int64_t per_token = G * (2 * hd - pruned);  // scalars each token keeps
    d.budget_B = L * per_token;
    d.sum_ranks = L * per_token;
    d.n_exact = pruned == 0 ? L : 0;
    d.n_coded = L - d.n_exact;
    d.min_rank = d.max_rank = per_token;
    d.mean_rank = static_cast<double>(per_token);
    d.stored_bytes = channel_pruned_bytes(L, G, hd, hd - pruned, a.element_size);
    d.full_bytes = L * d.dim * a.element_size;
    d.footprint = static_cast<double>(d.stored_bytes) / static_cast<double>(d.full_bytes);
    // What pruning loses of each token: its keys' energy in the pruned channels.
    const at::Tensor kept_sq = a.key_sq.gather(2, out.kept_channels.unsqueeze(1).expand({G, L, hd - pruned}));
    const at::Tensor lost =
        (a.key_sq.sum(at::IntArrayRef{0, 2}) - kept_sq.sum(at::IntArrayRef{0, 2})).clamp_min(0);
    d.rel_error = (lost / a.z_sq.clamp_min(1e-30)).sqrt().to(at::kCPU);  // [L]
    d.mean_rel_error = d.rel_error.to(at::kDouble).mean().item<double>();
    d.rank = at::full({L}, per_token, at::TensorOptions().dtype(at::kLong));
    d.exact = at::full({L}, pruned == 0, at::TensorOptions().dtype(at::kBool));
    d.timing = a.timing;
    d.timing.water_filling = lap_ms(t);
    return out;
}

LayerKV ThinKMethod::materialise(const LayerCapture& capture, const LayerAnalysis&,
                                 const LayerAllocation& allocation) {
    LayerKV kv{zero_pruned(capture.keys, allocation.kept_channels), capture.values};
    sync_for_timing(kv.keys, settings_.precise_timing);
    return kv;
}

std::shared_ptr<const LayerPrefix> ThinKMethod::store(const LayerCapture& capture,
                                                      const LayerAnalysis& analysis,
                                                      const LayerAllocation& allocation) {
    return channel_store(analysis.layer, capture.keys, capture.values, allocation.kept_channels);
}

}  // namespace varrate
