#include "codec/methods/duo_attention_method.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"
#include "base/stopwatch.h"
#include "codec/headwise_eviction.h"
#include "codec/methods/snapkv_method.h"
#include "codec/settings_table.h"
#include "codec/water_filling.h"
#include "models/rope.h"

namespace varrate {

namespace {

struct DuoAttentionAnalysis : LayerAnalysis {
    int64_t n_kv_head = 0, head_dim = 0, element_size = 0;
    at::Tensor scores;  // [G] fp32: each KV head's score (duo_attention_head_scores)
    at::Tensor kv_sq;   // [G, L] fp32, eviction_kv_sq
};

// Entries a streaming head drops of its L tokens (the middle between the sinks and the recent ones).
int64_t dropped_per_streaming_head(int64_t L, const CodecSettings& s) {
    return std::max<int64_t>(0, L - s.streaming_sink - s.streaming_recent);
}

// The fewest of `heads` heads of L tokens each whose streaming keeps at most kappa of their entries, counted
// as kvpress counts kept entries (total - int(total x (1 - kappa))). Throws InfeasibleBudget when every head
// streaming still keeps more.
int64_t streaming_heads(const std::string& who, int64_t heads, int64_t L, const CodecSettings& s) {
    if (s.streaming_sink + s.streaming_recent < 1)
        throw Error(
            fmt::format("{}: a streaming head must keep a token: --streaming-sink {} and "
                        "--streaming-recent {} keep none",
                        who, s.streaming_sink, s.streaming_recent));
    const int64_t total = heads * L, span = dropped_per_streaming_head(L, s);
    const int64_t drop = static_cast<int64_t>(static_cast<double>(total) * (1.0 - s.budget));
    if (drop <= 0) return 0;
    if (drop > heads * span)
        throw InfeasibleBudget(fmt::format(
            "{}: budget kappa={} keeps {} of {} entries, but a streaming head keeps its first {} and last {} "
            "of the L={} tokens (--streaming-sink, --streaming-recent); the smallest feasible kappa is "
            "{:.4f}",
            who, s.budget, total - drop, total, s.streaming_sink, s.streaming_recent, L,
            std::ceil(static_cast<double>(total - heads * span) / static_cast<double>(total) * 1e4) / 1e4));
    return (drop + span - 1) / span;
}

}  // namespace

at::Tensor duo_attention_head_scores(const LayerCapture& capture) {
    const CaptureShape shape = check_capture(capture, "duo-attention", /*needs_pre_rope=*/true);
    const int64_t G = shape.n_kv_head, hd = shape.head_dim, P = DuoAttentionMethod::kPatternLength;
    if (!capture.query_mean_all.defined() || capture.query_mean_all.dim() != 2 ||
        capture.query_mean_all.size(1) != hd || capture.query_mean_all.size(0) % G != 0)
        throw Error(
            fmt::format("duo-attention: layer {} needs the mean query of every position [H, {}] with H a "
                        "multiple of {} (capture it with a prefill); the capture has {}",
                        capture.layer, hd, G, shape_str(capture.query_mean_all)));
    const int64_t H = capture.query_mean_all.size(0), g = H / G;
    const auto [cos, sin] = rope_cos_sin(capture.rope_inv_freq, 0, P, at::kFloat);  // [P, hd] each
    const at::Tensor q = capture.query_mean_all.to(at::kFloat).unsqueeze(1);        // [H, 1, hd]
    const at::Tensor q_last = apply_rope(q, cos.narrow(0, P - 1, 1), sin.narrow(0, P - 1, 1));
    const at::Tensor k_mean = capture.keys_pre_rope.to(at::kFloat).mean(1, /*keepdim=*/true);  // [G, 1, hd]
    const at::Tensor k =
        apply_rope(k_mean.expand({G, P, hd}), cos, sin).repeat_interleave(g, 0);  // [H, P, hd]
    const at::Tensor logits =
        at::bmm(q_last, k.transpose(1, 2)).squeeze(1) / std::sqrt(static_cast<double>(hd));
    // The area under the cumulated attention curve: near 1 when the last query looks at the first keys (a
    // head that needs the distant past), near 1/2 or below when it looks at the recent ones.
    const at::Tensor area = at::softmax(logits, 1).cumsum(1).mean(1);  // [H]
    return area.view({G, g}).mean(1);                                  // [G]
}

std::shared_ptr<const LayerAnalysis> DuoAttentionMethod::analyse(const LayerCapture& capture) {
    auto t = SteadyClock::now();
    const CaptureShape shape = check_capture(capture, name(), /*needs_pre_rope=*/true);
    auto a = std::make_shared<DuoAttentionAnalysis>();
    a->layer = capture.layer;
    a->n_tokens = shape.n_tokens;
    a->n_kv_head = shape.n_kv_head;
    a->head_dim = shape.head_dim;
    a->element_size = element_size(capture.keys.scalar_type());
    a->scores = duo_attention_head_scores(capture);
    a->kv_sq = eviction_kv_sq(capture);
    sync_for_timing(a->scores, settings_.precise_timing);
    a->timing.salience = lap_ms(t);
    return a;
}

std::vector<double> DuoAttentionMethod::layer_budgets(
    const std::vector<std::shared_ptr<const LayerAnalysis>>& layers, const CodecSettings& budget) {
    check_budget(budget.budget, name());
    std::vector<at::Tensor> scores, layer_of;
    int64_t heads = 0;
    const int64_t L = layers.empty() ? 0 : layers.front()->n_tokens;
    for (size_t l = 0; l < layers.size(); ++l) {
        const auto& a = dynamic_cast<const DuoAttentionAnalysis&>(*layers[l]);
        if (a.n_tokens != L)
            throw Error(
                fmt::format("{}: layer {} has {} tokens, layer 0 {}", name(), a.layer, a.n_tokens, L));
        scores.push_back(a.scores);
        layer_of.push_back(
            at::full({a.n_kv_head}, static_cast<int64_t>(l), a.scores.options().dtype(at::kLong)));
        heads += a.n_kv_head;
    }
    // One ranking of every layer's heads (ties to the earlier layer and head, as each layer's own below).
    const int64_t n = streaming_heads(name(), heads, L, budget);
    const at::Tensor order = std::get<1>(at::sort(at::cat(scores), /*stable=*/true, 0, /*descending=*/false));
    const at::Tensor counts = at::bincount(at::cat(layer_of).index_select(0, order.narrow(0, 0, n)), {},
                                           static_cast<int64_t>(layers.size()))
                                  .to(at::kCPU);
    std::vector<double> out;
    const double span = static_cast<double>(dropped_per_streaming_head(L, budget));
    for (size_t l = 0; l < layers.size(); ++l) {
        const double total =
            static_cast<double>(dynamic_cast<const DuoAttentionAnalysis&>(*layers[l]).n_kv_head * L);
        // Half an entry below the count's footprint, so that allocate()'s rounding gives the count back.
        out.push_back(
            (total - static_cast<double>(counts[static_cast<int64_t>(l)].item<int64_t>()) * span - 0.5) /
            total);
    }
    return out;
}

LayerAllocation DuoAttentionMethod::allocate(const LayerAnalysis& analysis, const CodecSettings& budget) {
    auto t = SteadyClock::now();
    const auto& a = dynamic_cast<const DuoAttentionAnalysis&>(analysis);
    check_budget(budget.budget, name());
    const int64_t G = a.n_kv_head, L = a.n_tokens;
    const int64_t n = streaming_heads(name(), G, L, budget);
    const auto dev = a.scores.device();
    const at::Tensor order = std::get<1>(at::sort(a.scores, /*stable=*/true, 0, /*descending=*/false));
    const at::Tensor streaming = at::zeros({G}, at::TensorOptions().dtype(at::kBool).device(dev))
                                     .index_fill_(0, order.narrow(0, 0, n), true);
    const at::Tensor pos = at::arange(L, at::TensorOptions().dtype(at::kLong).device(dev));
    const at::Tensor middle = (pos >= budget.streaming_sink) & (pos < L - budget.streaming_recent);  // [L]
    const at::Tensor keep = ~(streaming.unsqueeze(1) & middle.unsqueeze(0));                         // [G, L]
    LayerAllocation out = headwise_allocation(name(), a.layer, keep, a.kv_sq, a.head_dim, a.element_size);
    // A token's salience: the share of the layer's heads that keep it.
    out.diagnostics.salience = keep.to(at::kFloat).mean(0).to(at::kCPU);
    out.diagnostics.salience_norm = normalise_salience(out.diagnostics.salience);
    out.diagnostics.timing = a.timing;
    out.diagnostics.timing.water_filling = lap_ms(t);
    return out;
}

}  // namespace varrate
