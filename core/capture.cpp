#include "core/capture.h"

#include <chrono>
#include <cmath>
#include <limits>

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"
#include "base/stopwatch.h"
#include "codec/registry.h"
#include "codec/salience.h"

namespace varrate {

namespace {

using Clock = SteadyClock;

int64_t tensor_bytes(const at::Tensor& t) {
    return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

std::string gib(int64_t bytes) {
    return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
}

// Attention of the window queries [H, w, hd] over keys/values [G, n, hd] whose positions are `pos` [G, n],
// ascending in each row (query i sits at position L - w + i and sees positions up to its own, so only a row's
// last w entries can lie in its future). With `valid` [G, n] bool (a head-wise eviction's padded rows), the
// entries it marks false are left out too, and the future is looked for in the whole row. Returns [H, w, hd]
// fp32.
at::Tensor attend_window(const at::Tensor& queries, const at::Tensor& keys, const at::Tensor& values,
                         const at::Tensor& pos, int64_t n_tokens, const at::Tensor& valid = {}) {
    const int64_t n_head = queries.size(0), w = queries.size(1), hd = queries.size(2);
    const int64_t n_kv = keys.size(0), n = keys.size(1), n_rep = n_head / n_kv;
    const int64_t tail = valid.defined() ? n : std::min(w, n);
    const at::Tensor q = queries.to(at::kFloat) * (1.0 / std::sqrt(static_cast<double>(hd)));  // [H, w, hd]
    const at::Tensor q_pos = at::arange(n_tokens - w, n_tokens, pos.options());                // [w]
    at::Tensor future = pos.narrow(1, n - tail, tail).unsqueeze(1) > q_pos.view({1, w, 1});    // [G, w, tail]
    if (valid.defined()) future = future | valid.to(future.device()).logical_not().unsqueeze(1);
    at::Tensor out = at::empty({n_head, w, hd}, q.options());
    // One KV head at a time: its n_rep query heads as n_rep * w rows, logits of a few MiB reused per head.
    for (int64_t g = 0; g < n_kv; ++g) {
        at::Tensor logits = q.narrow(0, g * n_rep, n_rep)
                                .reshape({n_rep * w, hd})
                                .mm(keys[g].to(at::kFloat).t());  // [n_rep w, n]
        logits.narrow(1, n - tail, tail)
            .view({n_rep, w, tail})
            .masked_fill_(future[g], -std::numeric_limits<float>::infinity());
        logits.sub_(at::amax(logits, {1}, /*keepdim=*/true)).exp_();  // softmax in place
        logits.div_(logits.sum(1, /*keepdim=*/true));
        at::Tensor rows = out.narrow(0, g * n_rep, n_rep).view({n_rep * w, hd});
        at::mm_out(rows, logits, values[g].to(at::kFloat));  // [n_rep w, hd]
    }
    return out;
}

}  // namespace

int64_t PrefillCapture::bytes() const {
    int64_t total = 0;
    for (const LayerCapture& c : layers)
        total += tensor_bytes(c.keys_pre_rope) + tensor_bytes(c.keys) + tensor_bytes(c.values) +
                 tensor_bytes(c.window_queries) + tensor_bytes(c.query_mean) + tensor_bytes(c.query_cov) +
                 tensor_bytes(c.query_mean_all) + tensor_bytes(c.question_attention) +
                 tensor_bytes(c.repeat_scores);
    if (!layers.empty()) total += tensor_bytes(layers[0].rope_cos) + tensor_bytes(layers[0].rope_sin);
    for (const DistortionReference& r : references)
        total += tensor_bytes(r.weights) + tensor_bytes(r.window_output);
    return total + tensor_bytes(last_logits);
}

int64_t capture_bytes_needed(const ModelConfig& c, int64_t n_tokens, int64_t obs_window,
                             at::ScalarType dtype) {
    const int64_t e = static_cast<int64_t>(c10::elementSize(dtype));
    const int64_t per_layer = 3 * c.n_kv_head * n_tokens * c.head_dim * e +
                              c.n_head * std::min(obs_window, n_tokens) * c.head_dim * e;
    // The prefill's own cache is freed layer by layer as the capture takes it over; its transient peak is
    // one layer's cache plus the activations, which the model's own prefill needs anyway.
    // Plus the RoPE tables, the distortion weights and the last logits.
    // The query statistics (fp32: the covariance and two means) are small next to these.
    const int64_t reference = n_tokens * 8 + c.n_head * std::min(obs_window, n_tokens) * c.head_dim * 4 +
                              c.n_head * (c.head_dim + 2) * c.head_dim * 4;
    return c.n_layer * (per_layer + reference) + 2 * n_tokens * c.head_dim * e + c.vocab_size * 4;
}

int64_t prefill_activation_bytes(const ModelConfig& c, int64_t n_tokens, int64_t chunk,
                                 at::ScalarType dtype) {
    const int64_t e = static_cast<int64_t>(c10::elementSize(dtype));
    const int64_t q = std::min(chunk > 0 ? chunk : n_tokens, n_tokens);
    const int64_t scores = 2 * c.n_head * q * n_tokens * 4;
    const int64_t rows =
        q * (4 * c.hidden_size + (c.n_head + 2 * c.n_kv_head) * c.head_dim + 3 * c.intermediate_size) * e;
    return scores + rows;
}

int64_t prefill_bytes_needed(const ModelConfig& c, int64_t n_tokens, int64_t obs_window, at::ScalarType dtype,
                             int64_t chunk) {
    return capture_bytes_needed(c, n_tokens, obs_window, dtype) +
           prefill_activation_bytes(c, n_tokens, chunk, dtype);
}

void check_capture_fits(const ModelConfig& cfg, const RuntimeOptions& ro, int64_t n_tokens,
                        int64_t obs_window, int64_t available, int64_t chunk_size) {
    const int64_t capture = capture_bytes_needed(cfg, n_tokens, obs_window, ro.dtype);
    const int64_t activations = prefill_activation_bytes(cfg, n_tokens, chunk_size, ro.dtype);
    const int64_t need = capture + activations;
    if (available >= 0 && need > available)
        throw Error(fmt::format(
            "the prefill of {} tokens needs {} ({} bytes) on {}: {} for the capture ({} layers of keys, "
            "values "
            "and pre-RoPE keys) and {} of activations per chunk of {} tokens; {} ({} bytes) is available: "
            "shorten the context or free memory",
            n_tokens, gib(need), need, ro.device.str(), gib(capture), cfg.n_layer, gib(activations),
            std::min(chunk_size > 0 ? chunk_size : n_tokens, n_tokens), gib(available), available));
}

PrefillCapture capture_prefill(const LlamaModel& model, const std::vector<int64_t>& ids,
                               const CodecSettings& settings, const JobControl& job, int64_t chunk_size,
                               bool attention_output, int64_t min_window_queries) {
    const ModelConfig& cfg = model.config();
    const RuntimeOptions& ro = model.options();
    const int64_t n = static_cast<int64_t>(ids.size());
    const int64_t queries = std::max(settings.obs_window, min_window_queries);
    check_capture_fits(cfg, ro, n, queries, available_memory_bytes(ro.device), chunk_size);
    PrefillCapture out;
    out.ids = ids;
    out.obs_window = settings.obs_window;
    out.pool_kernel = settings.pool_kernel;
    out.layers.resize(static_cast<size_t>(cfg.n_layer));
    out.references.resize(static_cast<size_t>(cfg.n_layer));
    ForwardOptions fo;
    fo.chunk_size = chunk_size;
    fo.cancel = job.cancel;
    fo.progress = job.progress;
    fo.observer_window = queries;
    fo.observer = [&](const LayerCapture& cap) -> std::optional<LayerKV> {
        LayerCapture& kept = out.layers.at(static_cast<size_t>(cap.layer));
        kept = cap;  // pre-RoPE keys, window queries and RoPE tables are the capture's own tensors
        kept.keys = cap.keys.clone();
        kept.values = cap.values.clone();
        out.references.at(static_cast<size_t>(cap.layer)) =
            distortion_reference(kept, settings.obs_window, settings.pool_kernel, {}, attention_output);
        // An empty replacement frees the prefill's own copy of this layer.
        return LayerKV{cap.keys.narrow(1, 0, 0), cap.values.narrow(1, 0, 0)};
    };
    KVCache cache = model.new_cache();
    const auto t0 = Clock::now();
    out.last_logits = model.forward(ids, cache, fo);
    out.prefill_ms = ms_since(t0);
    out.next_position = n;
    return out;
}

KVCache cache_from_layers(const LlamaModel& model, const std::vector<LayerKV>& layers, int64_t next_position,
                          const std::vector<std::shared_ptr<const LayerPrefix>>& stores,
                          const std::string& method) {
    KVCache cache = model.new_cache();
    if (static_cast<int64_t>(layers.size()) != cache.n_layer() ||
        (!stores.empty() && stores.size() != layers.size()))
        throw Error(fmt::format("cache_from_layers: {} layers ({} stores) for a model of {}", layers.size(),
                                stores.size(), cache.n_layer()));
    for (size_t l = 0; l < layers.size(); ++l) {
        if (!stores.empty() && stores[l])
            cache.set_prefix(static_cast<int64_t>(l), stores[l]);
        else
            cache.replace(static_cast<int64_t>(l), layers[l]);
    }
    cache.set_next_position(method.empty() ? next_position
                                           : method_decode_position(method, next_position, cache.length(0)));
    return cache;
}

int64_t resident_bytes(const std::vector<LayerKV>& layers,
                       const std::vector<std::shared_ptr<const LayerPrefix>>& stores) {
    int64_t total = 0;
    for (size_t l = 0; l < layers.size(); ++l) {
        if (l < stores.size() && stores[l])
            total += stores[l]->resident_bytes();
        else
            total += tensor_bytes(layers[l].keys) + tensor_bytes(layers[l].values);
    }
    return total;
}

PrefillCapture with_references(const PrefillCapture& capture, int64_t obs_window, int64_t pool_kernel,
                               bool attention_output) {
    if (obs_window > kept_window_queries(capture))
        throw Error(fmt::format("the capture kept {} window queries, the observation window is {}",
                                kept_window_queries(capture), obs_window));
    PrefillCapture out = capture;
    out.obs_window = obs_window;
    out.pool_kernel = pool_kernel;
    for (size_t l = 0; l < out.layers.size(); ++l)
        out.references[l] =
            distortion_reference(out.layers[l], obs_window, pool_kernel, {}, attention_output);
    return out;
}

int64_t kept_window_queries(const PrefillCapture& capture) {
    if (capture.layers.empty() || !capture.layers.front().window_queries.defined()) return capture.obs_window;
    return std::max(capture.obs_window, capture.layers.front().window_queries.size(1));
}

DistortionReference distortion_reference(const LayerCapture& capture, int64_t obs_window, int64_t pool_kernel,
                                         const at::Tensor& salience, bool attention_output) {
    DistortionReference r;
    const int64_t n_tok = capture.keys.size(1);
    const at::Tensor& q_all = capture.window_queries;  // [H, w_cap, hd]
    r.obs_window = std::min<int64_t>({obs_window, q_all.defined() ? q_all.size(1) : 0, n_tok});
    const at::Tensor s = salience.defined()   ? salience
                         : n_tok > obs_window ? varrate_salience(capture, obs_window, pool_kernel)
                                              : at::ones({n_tok}, capture.keys.options().dtype(at::kFloat));
    r.weights = s.to(at::kCPU, at::kDouble);
    if (r.obs_window > 0 && attention_output) {
        const int64_t n_kv = capture.keys.size(0);
        const at::Tensor all_pos =
            at::arange(n_tok, capture.keys.options().dtype(at::kLong)).unsqueeze(0).expand({n_kv, n_tok});
        r.window_output = attend_window(q_all.narrow(1, q_all.size(1) - r.obs_window, r.obs_window),
                                        capture.keys, capture.values, all_pos, n_tok);  // [H, w, hd]
    }
    return r;
}

void add_weighted_error(LayerDiagnostics& d, const DistortionReference& ref) {
    // Where attention looks, how much of z is lost.
    if (!d.rel_error.defined() || !ref.weights.defined()) return;
    const double total = ref.weights.sum().item<double>();
    d.weighted_rel_error =
        total > 0 ? (ref.weights * d.rel_error.to(at::kCPU, at::kDouble)).sum().item<double>() / total : 0.0;
}

void add_distortion(LayerDiagnostics& d, const LayerCapture& capture, const LayerKV& compressed,
                    const at::Tensor& kept, const DistortionReference& ref, const at::Tensor& kept_valid) {
    if (compressed.keys.is_same(capture.keys) && compressed.values.is_same(capture.values)) {
        d.weighted_rel_error = d.attn_output_error = 0.0;  // the capture's own cache
        return;
    }
    add_weighted_error(d, ref);
    // Attention-output error of the observation-window queries, full cache vs compressed.
    const int64_t w = ref.obs_window, n_tok = capture.keys.size(1);
    if (w <= 0 || !ref.window_output.defined()) return;
    const at::Tensor& q_all = capture.window_queries;
    const at::Tensor pos = kept.defined() ? kept.to(capture.keys.device())
                                          : at::arange(n_tok, capture.keys.options().dtype(at::kLong))
                                                .unsqueeze(0)
                                                .expand({compressed.keys.size(0), n_tok});
    const at::Tensor& o = ref.window_output;
    const at::Tensor o_hat =
        attend_window(q_all.narrow(1, q_all.size(1) - w, w), compressed.keys, compressed.values, pos, n_tok,
                      kept.defined() ? kept_valid : at::Tensor());
    const at::Tensor rel = (o - o_hat).norm(2, {2}) / o.norm(2, {2}).clamp_min(1e-30);  // [H, w]
    d.attn_output_error = rel.to(at::kDouble).mean().item<double>();
}

MethodAnalysis::MethodAnalysis(CompressionMethod& method, const PrefillCapture& capture,
                               const JobControl& job, const std::vector<const MethodAnalysis*>& others)
    : method_(method), capture_(capture) {
    const auto t0 = Clock::now();
    const CodecSettings& s = method.settings();
    if (capture.obs_window < s.obs_window)
        throw Error(
            fmt::format("{}: the capture kept {} window queries, the method's observation window is {}",
                        method.name(), capture.obs_window, s.obs_window));
    const int64_t n_layer = static_cast<int64_t>(capture.layers.size());
    // A window-salience method's signal is the capture's distortion weight when their windows agree:
    // computed once.
    const bool reuse_salience = method.uses_window_salience() && s.obs_window == capture.obs_window &&
                                s.pool_kernel == capture.pool_kernel &&
                                static_cast<int64_t>(capture.ids.size()) > s.obs_window;
    for (int64_t l = 0; l < n_layer; ++l) {
        check_cancel(job);
        const LayerCapture& cap = capture.layers[static_cast<size_t>(l)];
        std::shared_ptr<const LayerAnalysis> a;
        for (const MethodAnalysis* other : others)
            if (!a && other && &other->capture_ == &capture)
                a = method.derive(cap, *other->layers_[static_cast<size_t>(l)]);
        if (!a && reuse_salience)
            a = method.analyse_with_window_salience(cap, capture.references[static_cast<size_t>(l)].weights);
        layers_.push_back(a ? a : method.analyse(cap));
        job.report("analyse " + method.name(), l + 1, n_layer);
    }
    analyse_ms_ = ms_since(t0);
}

std::vector<LayerAllocation> MethodAnalysis::allocate(const CodecSettings& budget) const {
    std::vector<LayerAllocation> out;
    out.reserve(layers_.size());
    const std::vector<double> per_layer = method_.layer_budgets(layers_, budget);
    for (size_t l = 0; l < layers_.size(); ++l) {
        CodecSettings b = budget;
        if (!per_layer.empty()) b.budget = per_layer.at(l);
        out.push_back(method_.allocate(*layers_[l], b));
    }
    return out;
}

std::vector<LayerKV> MethodAnalysis::materialise(std::vector<LayerAllocation>& allocations) const {
    std::vector<LayerDiagnostics> diagnostics;
    for (LayerAllocation& a : allocations) diagnostics.push_back(std::move(a.diagnostics));
    std::vector<LayerKV> out = materialise(allocations, diagnostics);
    for (size_t l = 0; l < allocations.size(); ++l) allocations[l].diagnostics = std::move(diagnostics[l]);
    return out;
}

std::vector<LayerKV> MethodAnalysis::materialise(
    const std::vector<LayerAllocation>& allocations, std::vector<LayerDiagnostics>& diagnostics,
    std::vector<std::shared_ptr<const LayerPrefix>>* stores) const {
    if (allocations.size() != layers_.size() || diagnostics.size() != layers_.size())
        throw Error(fmt::format("{}: {} allocations and {} diagnostics for {} analysed layers",
                                method_.name(), allocations.size(), diagnostics.size(), layers_.size()));
    std::vector<LayerKV> out;
    out.reserve(layers_.size());
    for (size_t l = 0; l < layers_.size(); ++l) {
        const auto t0 = Clock::now();
        const LayerCapture& cap = capture_.layers[l];
        out.push_back(method_.materialise(cap, *layers_[l], allocations[l]));
        LayerDiagnostics& d = diagnostics[l];
        d.timing.reconstruction = ms_since(t0);
        add_distortion(d, cap, out.back(), allocations[l].kept, capture_.references[l],
                       allocations[l].kept_valid);
        if (stores) stores->push_back(method_.store(cap, *layers_[l], allocations[l]));
    }
    return out;
}

std::vector<std::shared_ptr<const LayerPrefix>> MethodAnalysis::headwise_stores(
    const std::vector<LayerAllocation>& allocations) const {
    if (allocations.size() != layers_.size())
        throw Error(fmt::format("{}: {} allocations for {} analysed layers", method_.name(),
                                allocations.size(), layers_.size()));
    std::vector<std::shared_ptr<const LayerPrefix>> out(layers_.size());
    bool any = false;
    for (size_t l = 0; l < layers_.size(); ++l)
        if (allocations[l].kept_valid.defined()) {
            out[l] = method_.store(capture_.layers[l], *layers_[l], allocations[l]);
            if (!out[l])
                throw Error(
                    fmt::format("{}: layer {} keeps different numbers of tokens per KV head but has no "
                                "store to decode from",
                                method_.name(), l));
            any = true;
        }
    if (!any) out.clear();
    return out;
}

InPrefillLayer compress_layer_in_prefill(CompressionMethod& method, const LayerCapture& cap,
                                         bool attention_output) {
    const CodecSettings& s = method.settings();
    const std::shared_ptr<const LayerAnalysis> analysis = method.analyse(cap);
    LayerAllocation allocation = method.allocate(*analysis, s);
    if (allocation.kept_valid.defined())
        throw Error(fmt::format(
            "{}: layer {} keeps a different number of tokens in each KV head (head-wise eviction), which the "
            "in-prefill path cannot hold (it replaces the layer's dense cache); run {} on a shared capture "
            "(capture_prefill + MethodAnalysis, compare's default) instead",
            method.name(), cap.layer, method.name()));
    const auto t0 = Clock::now();
    InPrefillLayer out;
    out.kv = method.materialise(cap, *analysis, allocation);
    allocation.diagnostics.timing.reconstruction = ms_since(t0);
    // The distortion weights are the window salience: the method's own when it allocates by it.
    const at::Tensor& own = allocation.diagnostics.salience;
    const bool own_is_weight = method.uses_window_salience() && own.defined();
    add_distortion(allocation.diagnostics, cap, out.kv, allocation.kept,
                   distortion_reference(cap, s.obs_window, s.pool_kernel, own_is_weight ? own : at::Tensor(),
                                        attention_output));
    out.diagnostics = std::move(allocation.diagnostics);
    return out;
}

InPrefillResult compress_in_prefill(const LlamaModel& model, CompressionMethod& method,
                                    const std::vector<int64_t>& ids, KVCache& cache, const JobControl& job,
                                    bool attention_output) {
    InPrefillResult out;
    ForwardOptions fo;
    fo.cancel = job.cancel;
    fo.progress = job.progress;
    fo.observer_window = method.settings().obs_window;
    fo.observer = [&](const LayerCapture& cap) -> std::optional<LayerKV> {
        const auto t0 = Clock::now();
        InPrefillLayer layer = compress_layer_in_prefill(method, cap, attention_output);
        out.compress_ms += ms_since(t0);
        out.layers.push_back(std::move(layer.diagnostics));
        return std::move(layer.kv);
    };
    const auto t0 = Clock::now();
    out.logits = model.forward(ids, cache, fo);
    out.prefill_ms = ms_since(t0) - out.compress_ms;
    return out;
}

}  // namespace varrate
