#include "core/probe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"
#include "base/stopwatch.h"
#include "codec/registry.h"
#include "core/prompt.h"
#include "core/session.h"
#include "models/tokenizer/tokenizer.h"

namespace varrate {

namespace {

// Reads `ids` after the captured prefix with its full cache and hands each layer's queries of those ids
// ([n_head, n, head_dim] post-RoPE) and the layer's keys ([n_kv_head, L + n, head_dim], the prefix's then
// theirs) to `use`. The capture's tensors are not modified.
void probe_pass(const LlamaModel& model, const PrefillCapture& capture, const std::vector<int64_t>& ids,
                const std::function<void(int64_t, const at::Tensor&, const at::Tensor&)>& use,
                const JobControl& job) {
    if (ids.empty()) throw Error("probe: nothing to read after the prefix");
    std::vector<LayerKV> layers;
    layers.reserve(capture.layers.size());
    for (const LayerCapture& c : capture.layers) layers.push_back({c.keys, c.values});
    KVCache cache = cache_from_layers(model, layers, capture.next_position);
    ForwardOptions opt;
    opt.observer_window = static_cast<int64_t>(ids.size());
    opt.cancel = job.cancel;
    opt.observer = [&](const LayerCapture& cap) -> std::optional<LayerKV> {
        use(cap.layer, cap.window_queries, cap.keys);
        return std::nullopt;
    };
    model.forward(ids, cache, opt);
}

// Softmax attention weights of queries q [H, n, hd] over keys k [G, m, hd] whose last n are the queries' own
// (causal among themselves): [G, g * n, m] fp32, the g query heads of a KV head stacked.
at::Tensor probe_weights(const at::Tensor& q, const at::Tensor& k) {
    const int64_t H = q.size(0), n = q.size(1), hd = q.size(2), G = k.size(0);
    const at::Tensor qg = q.to(at::kFloat).reshape({G, (H / G) * n, hd});
    at::Tensor s = at::bmm(qg, k.to(at::kFloat).transpose(1, 2)) / std::sqrt(static_cast<double>(hd));
    mask_future_tail(s, n, H / G);
    return at::softmax(s, 2);  // [G, g * n, m]
}

}  // namespace

ProbeNeeds probe_needs(const std::vector<std::string>& methods) {
    ProbeNeeds needs;
    for (const std::string& m : methods) {
        const MethodProbe p = method_probe(m);
        needs.question |= p == MethodProbe::Question;
        needs.repeat |= p == MethodProbe::Repeat;
        needs.observed |= p == MethodProbe::Observed;
        needs.noncausal |= p == MethodProbe::NonCausal;
    }
    return needs;
}

void add_question_attention(const LlamaModel& model, PrefillCapture& capture, const std::vector<int64_t>& ids,
                            const JobControl& job) {
    const int64_t L = static_cast<int64_t>(capture.ids.size()), n = static_cast<int64_t>(ids.size());
    probe_pass(
        model, capture, ids,
        [&](int64_t l, const at::Tensor& q, const at::Tensor& k) {
            const int64_t H = q.size(0), G = k.size(0);
            const at::Tensor w = probe_weights(q, k).narrow(2, 0, L);  // [G, g * n, L]
            capture.layers[l].question_attention = w.view({G, H / G, n, L}).mean(2).reshape({H, L});
        },
        job);
}

RepeatPrompt repeat_prompt(const Session& session, bool chat) {
    const Tokenizer& tok = session.tokenizer();
    RepeatPrompt p;
    p.first = tok.encode("\n\nRepeat the previous context exactly.", false);
    p.later = tok.encode("\n\nRepeat the part of the previous context exactly, starting with", false);
    if (chat) {
        // kvpress: the chat template's text before and after a user turn's content.
        const ChatFrame frame = chat_frame(tok);
        p.prefix_length = static_cast<int64_t>(frame.prefix_ids.size());
        p.suffix = frame.suffix_ids;
    } else {
        p.suffix = tok.encode("\n", false);
    }
    return p;
}

void add_repeat_scores(const LlamaModel& model, PrefillCapture& capture, const RepeatPrompt& prompt,
                       const JobControl& job, int64_t chunk) {
    const int64_t L = static_cast<int64_t>(capture.ids.size()), prefix = prompt.prefix_length;
    if (L == 0 || capture.layers.empty()) throw Error("kvzip: the capture is empty");
    if (chunk <= 0) throw Error("kvzip: the reconstruction chunk must be positive");
    if (prefix < 0 || prefix >= L)
        throw Error(fmt::format(
            "kvzip: a chat prefix of {} ids leaves nothing of the {}-id context to reconstruct", prefix, L));
    for (LayerCapture& c : capture.layers)
        c.repeat_scores = at::zeros({c.keys.size(0), L}, c.keys.options().dtype(at::kFloat));
    // The chunks cover [prefix, L): the chat header is not part of what the model is asked to repeat.
    const int64_t n_chunks = (L - prefix + chunk - 1) / chunk;
    for (int64_t ci = 0; ci < n_chunks; ++ci) {
        check_cancel(job);
        job.report("kvzip reconstruction", ci, n_chunks);
        const int64_t begin = prefix + ci * chunk, end = std::min(L, begin + chunk), len = end - begin;
        std::vector<int64_t> ids = ci == 0 ? prompt.first : prompt.later;
        if (ci > 0) {
            const int64_t from = std::max<int64_t>(begin - kRepeatOverlap, begin - chunk);
            ids.insert(ids.end(), capture.ids.begin() + from, capture.ids.begin() + begin);
        }
        ids.insert(ids.end(), prompt.suffix.begin(), prompt.suffix.end());
        ids.insert(ids.end(), capture.ids.begin() + begin, capture.ids.begin() + end);
        const int64_t n = static_cast<int64_t>(ids.size()), sinks = std::min(kRepeatSinks, begin);
        probe_pass(
            model, capture, ids,
            [&](int64_t l, const at::Tensor& q, const at::Tensor& k) {
                // Keys the repeat queries are scored over: the sinks, the chunk, the repeat ids themselves.
                const at::Tensor sub = at::cat(
                    {k.narrow(1, 0, sinks), k.narrow(1, begin, len), k.narrow(1, k.size(1) - n, n)}, 1);
                const at::Tensor w = probe_weights(q, sub).narrow(2, sinks, len);  // [G, g * n, len]
                capture.layers[l].repeat_scores.narrow(1, begin, len).copy_(std::get<0>(w.max(1)));
            },
            job);
    }
    job.report("kvzip reconstruction", n_chunks, n_chunks);
}

namespace {

// H2O's observed attention of one layer: [H, L] fp32.
at::Tensor observed_attention(const at::Tensor& q, const at::Tensor& keys) {
    const at::Tensor k = keys.to(at::kFloat);  // [G, L, hd]
    const int64_t H = q.size(0), G = k.size(0), g = H / G, hd = q.size(2), L = k.size(1);
    const auto opts = k.options();
    at::Tensor sum = at::zeros({G, g, L}, opts);
    // Blocks of queries, about 2^26 weights each: the [H, block, L] weights, never the [H, L, L] matrix.
    const int64_t block = std::max<int64_t>(1, (int64_t{1} << 26) / std::max<int64_t>(1, H * L));
    const at::Tensor key_pos = at::arange(L, opts.dtype(at::kLong));
    for (int64_t b0 = 0; b0 < L; b0 += block) {
        const int64_t n = std::min(block, L - b0);
        const at::Tensor qb = q.narrow(1, b0, n).to(at::kFloat).reshape({G, g * n, hd});
        at::Tensor s = at::bmm(qb, k.transpose(1, 2)) / std::sqrt(static_cast<double>(hd));  // [G, g n, L]
        const at::Tensor future =
            key_pos.unsqueeze(0) > (b0 + at::arange(n, opts.dtype(at::kLong))).unsqueeze(1);  // [n, L]
        s = s.view({G, g, n, L}).masked_fill(future, -std::numeric_limits<float>::infinity());
        sum += at::softmax(s, -1).sum(2);
    }
    const at::Tensor seen_by = at::arange(L, 0, -1, opts);  // L - t queries see position t
    return (sum / seen_by).reshape({H, L});
}

// Compactor's non-causal chunked attention of one layer: [H, L] fp32 (LayerCapture::noncausal_attention).
// The span is cut into chunks of kNonCausalChunk, the last padded with zero queries and keys (kvpress pads
// so: a zero key's logit 0 stays in every softmax of its chunk, a zero query spreads 1/chunk over it).
at::Tensor noncausal_attention(const at::Tensor& q, const at::Tensor& keys) {
    const int64_t H = q.size(0), G = keys.size(0), g = H / G, hd = q.size(2), L = keys.size(1);
    at::Tensor out = at::zeros({H, L}, keys.options().dtype(at::kFloat));
    const int64_t begin = std::min(kNonCausalBegin, L);
    const int64_t end = L - std::min(kNonCausalEnd, L - begin), n = end - begin;
    if (n == 0) return out;
    const int64_t C = kNonCausalChunk, chunks = (n + C - 1) / C, pad = chunks * C - n;
    at::Tensor qs = q.narrow(1, begin, n).to(at::kFloat).view({G, g, n, hd});  // [G, g, n, hd]
    at::Tensor ks = keys.narrow(1, begin, n).to(at::kFloat);                   // [G, n, hd]
    if (pad > 0) {
        qs = at::constant_pad_nd(qs, {0, 0, 0, pad});
        ks = at::constant_pad_nd(ks, {0, 0, 0, pad});
    }
    const at::Tensor kc = ks.view({G, 1, chunks, C, hd});
    const at::Tensor qc = qs.view({G, g, chunks, C, hd});
    // Blocks of chunks, about 2^26 weights each.
    const int64_t block = std::max<int64_t>(1, (int64_t{1} << 26) / (H * C * C));
    std::vector<at::Tensor> sums;
    for (int64_t c0 = 0; c0 < chunks; c0 += block) {
        const int64_t m = std::min(block, chunks - c0);
        const at::Tensor dots = at::matmul(qc.narrow(2, c0, m), kc.narrow(2, c0, m).transpose(-2, -1));
        sums.push_back(at::softmax(dots, -1).sum(-2));  // [G, g, m, C]: over the chunk's queries
    }
    out.narrow(1, begin, n).copy_(at::cat(sums, 2).reshape({H, chunks * C}).narrow(1, 0, n));
    return out;
}

}  // namespace

void add_all_query_attention(const LlamaModel& model, PrefillCapture& capture, bool observed, bool noncausal,
                             const JobControl& job) {
    if (!observed && !noncausal) return;
    const int64_t L = static_cast<int64_t>(capture.ids.size());
    if (L == 0 || capture.layers.empty()) throw Error("the all-queries pass: the capture is empty");
    if (capture.next_position != L)
        throw Error(
            fmt::format("the all-queries pass (observed and non-causal attention): the capture continues "
                        "an earlier cache (its {} ids end at position {}); it reads the context from "
                        "position 0",
                        L, capture.next_position));
    KVCache cache = model.new_cache();
    ForwardOptions opt;
    opt.chunk_size = L;  // one chunk: the observer sees every query of the context
    opt.observer_window = L;
    opt.cancel = job.cancel;
    opt.observer = [&](const LayerCapture& cap) -> std::optional<LayerKV> {
        LayerCapture& out = capture.layers[static_cast<size_t>(cap.layer)];
        if (observed) out.observed_attention = observed_attention(cap.window_queries, cap.keys);
        if (noncausal) out.noncausal_attention = noncausal_attention(cap.window_queries, cap.keys);
        return std::nullopt;
    };
    model.forward(capture.ids, cache, opt);
}

void add_observed_attention(const LlamaModel& model, PrefillCapture& capture, const JobControl& job) {
    add_all_query_attention(model, capture, true, false, job);
}

double probe_time_ms(const PrefillCapture& capture, MethodProbe probe) {
    switch (probe) {
        case MethodProbe::None:
            return 0.0;
        case MethodProbe::Question:
            return capture.question_ms;
        case MethodProbe::Repeat:
            return capture.repeat_ms;
        case MethodProbe::Observed:
        case MethodProbe::NonCausal:
            return capture.observed_ms;
    }
    return 0.0;
}

void add_probes(const Session& session, PrefillCapture& capture, const ProbeRequest& request,
                const JobControl& job) {
    if (request.question_in_prefix < 0 ||
        request.question_in_prefix > static_cast<int64_t>(capture.ids.size()))
        throw Error(fmt::format("probe: a question of {} ids does not fit a prefix of {}",
                                request.question_in_prefix, capture.ids.size()));
    for (LayerCapture& c : capture.layers) c.question_tokens = request.question_in_prefix;
    if (request.needs.question) {
        if (request.question_ids.empty())
            throw Error(
                "varrate:oracle reads the question's attention: give a question (compare --question, niah)");
        auto t = SteadyClock::now();
        add_question_attention(session.model(), capture, request.question_ids, job);
        capture.question_ms += lap_ms(t);
    }
    if (request.needs.repeat) {
        auto t = SteadyClock::now();
        add_repeat_scores(session.model(), capture, repeat_prompt(session, request.chat), job);
        capture.repeat_ms += lap_ms(t);
    }
    if (request.needs.observed || request.needs.noncausal) {
        auto t = SteadyClock::now();
        add_all_query_attention(session.model(), capture, request.needs.observed, request.needs.noncausal,
                                job);
        capture.observed_ms += lap_ms(t);
    }
}

}  // namespace varrate
