#include "models/llama_model.h"

#include <ATen/ATen.h>
#include <cmath>

#include <algorithm>
#include <array>
#include <cmath>
#include <set>
#include <string>

#include <fmt/format.h>

#include "base/error.h"
#include "models/attention.h"
#include "models/batch_cache.h"
#include "models/host_read.h"
#include "models/layer_math.h"
#include "models/rope.h"
#include "models/safetensors.h"

namespace varrate {

namespace {

std::string shape_string(const std::vector<int64_t>& shape) {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

// One decoder layer, with q/k/v and gate/up fused into single matmuls (concatenated once at load).
struct LayerWeights {
    at::Tensor input_norm;      // [hidden]
    at::Tensor post_attn_norm;  // [hidden]
    at::Tensor qkv;             // [(n_head + 2 n_kv_head) head_dim, hidden]
    at::Tensor qkv_bias;        // [(n_head + 2 n_kv_head) head_dim] or undefined
    at::Tensor o;               // [hidden, n_head head_dim]
    at::Tensor o_bias;          // [hidden] or undefined
    at::Tensor q_norm, k_norm;  // [head_dim] (Qwen3) or undefined
    at::Tensor gate_up;         // [2 intermediate, hidden]
    at::Tensor gate_up_bias;    // [2 intermediate] or undefined
    at::Tensor down;            // [hidden, intermediate]
    at::Tensor down_bias;       // [hidden] or undefined
};

// Entries a prefill reserves beyond its prompt in each cache layer, so that decoding the answer after it does
// not grow (copy) the cache at its first step.
constexpr int64_t kDecodeHeadroom = 256;

// Chunk boundaries [begin, end) of a prefill of n tokens. With an observer, a short last chunk is merged into
// the previous one until it holds at least `min_last` tokens (the observer's query window).
std::vector<std::pair<int64_t, int64_t>> plan_chunks(int64_t n, int64_t chunk, int64_t min_last) {
    std::vector<std::pair<int64_t, int64_t>> chunks;
    for (int64_t b = 0; b < n; b += chunk) chunks.emplace_back(b, std::min(n, b + chunk));
    while (chunks.size() > 1 && chunks.back().second - chunks.back().first < min_last) {
        const int64_t end = chunks.back().second;
        chunks.pop_back();
        chunks.back().second = end;
    }
    return chunks;
}

}  // namespace

struct LlamaModel::Weights {
    at::Tensor embed;    // [vocab, hidden]
    at::Tensor norm;     // [hidden]
    at::Tensor lm_head;  // [vocab, hidden], the embedding itself when tied
    std::vector<LayerWeights> layers;

    static std::unique_ptr<Weights> load(const ModelConfig& config, const SafetensorsArchive& archive,
                                         const RuntimeOptions& options, const ProgressFn& progress);
};

std::unique_ptr<LlamaModel::Weights> LlamaModel::Weights::load(const ModelConfig& c,
                                                               const SafetensorsArchive& archive,
                                                               const RuntimeOptions& options,
                                                               const ProgressFn& progress) {
    // Where the weights come from, for error messages about missing tensors.
    std::set<std::string> files;
    for (const std::string& name : archive.names()) files.insert(archive.info(name).file.string());
    std::string where;
    for (const std::string& f : files) where += (where.empty() ? "" : ", ") + f;
    if (where.empty()) where = "an empty checkpoint";

    // Names and shapes of the whole checkpoint first, so a wrong file fails before anything is converted.
    auto check = [&](const std::string& name, const std::vector<int64_t>& shape) -> const TensorInfo& {
        if (!archive.contains(name))
            throw Error("model weights: tensor '" + name + "' is missing from " + where);
        const TensorInfo& info = archive.info(name);
        if (info.shape != shape)
            throw Error("model weights: tensor '" + name + "' in " + info.file.string() + " has shape " +
                        shape_string(info.shape) + ", the config expects " + shape_string(shape));
        return info;
    };
    for (const auto& [name, shape] : c.expected_tensors()) check(name, shape);
    // The converted weights are owned copies: refuse before converting what cannot fit, rather than be
    // killed.
    const int64_t need = c.parameter_count() * static_cast<int64_t>(c10::elementSize(options.dtype));
    if (const int64_t available = available_memory_bytes(options.device); available >= 0 && need > available)
        throw Error(fmt::format(
            "model weights: {} parameters in {} need {:.2f} GiB ({} bytes) on {}; {:.2f} GiB "
            "({} bytes) is available: use a smaller model{}, or free memory",
            c.parameter_count(), dtype_name(options.dtype), need / 1073741824.0, need, options.device.str(),
            available / 1073741824.0, available, options.dtype == at::kFloat ? ", --dtype bf16" : ""));

    const auto target = at::TensorOptions().device(options.device).dtype(options.dtype);
    // The mapped CPU tensor (zero-copy, file dtype).
    auto get = [&](const std::string& name, const std::vector<int64_t>& shape) {
        check(name, shape);
        return archive.tensor(name);
    };
    // Converted once to the runtime dtype and device, owned and contiguous (never aliasing the mapping).
    auto place = [&](const at::Tensor& mapped) {
        at::Tensor t = mapped.to(target);
        if (t.data_ptr() == mapped.data_ptr()) t = t.clone();
        return t.contiguous();
    };
    // Concatenated along the output dimension (fused projections); cat already makes an owned copy.
    auto fuse = [&](const std::vector<at::Tensor>& mapped) {
        std::vector<at::Tensor> parts;
        for (const at::Tensor& m : mapped) parts.push_back(m.to(options.dtype));
        return at::cat(parts, 0).to(target).contiguous();
    };

    const int64_t h = c.hidden_size, hd = c.head_dim, q_dim = c.n_head * hd, kv_dim = c.n_kv_head * hd;
    const int64_t inter = c.intermediate_size;
    auto w = std::make_unique<Weights>();
    w->embed = place(get("model.embed_tokens.weight", {c.vocab_size, h}));
    w->norm = place(get("model.norm.weight", {h}));
    w->lm_head = c.tie_word_embeddings ? w->embed : place(get("lm_head.weight", {c.vocab_size, h}));
    for (int64_t i = 0; i < c.n_layer; ++i) {
        const std::string p = "model.layers." + std::to_string(i) + ".";
        LayerWeights l;
        l.input_norm = place(get(p + "input_layernorm.weight", {h}));
        l.post_attn_norm = place(get(p + "post_attention_layernorm.weight", {h}));
        l.qkv = fuse({get(p + "self_attn.q_proj.weight", {q_dim, h}),
                      get(p + "self_attn.k_proj.weight", {kv_dim, h}),
                      get(p + "self_attn.v_proj.weight", {kv_dim, h})});
        if (c.attention_bias)
            l.qkv_bias =
                fuse({get(p + "self_attn.q_proj.bias", {q_dim}), get(p + "self_attn.k_proj.bias", {kv_dim}),
                      get(p + "self_attn.v_proj.bias", {kv_dim})});
        l.o = place(get(p + "self_attn.o_proj.weight", {h, q_dim}));
        if (c.o_proj_bias) l.o_bias = place(get(p + "self_attn.o_proj.bias", {h}));
        if (c.qk_norm) {
            l.q_norm = place(get(p + "self_attn.q_norm.weight", {hd}));
            l.k_norm = place(get(p + "self_attn.k_norm.weight", {hd}));
        }
        l.gate_up =
            fuse({get(p + "mlp.gate_proj.weight", {inter, h}), get(p + "mlp.up_proj.weight", {inter, h})});
        l.down = place(get(p + "mlp.down_proj.weight", {h, inter}));
        if (c.mlp_bias) {
            l.gate_up_bias =
                fuse({get(p + "mlp.gate_proj.bias", {inter}), get(p + "mlp.up_proj.bias", {inter})});
            l.down_bias = place(get(p + "mlp.down_proj.bias", {h}));
        }
        w->layers.push_back(std::move(l));
        if (progress) progress("load", i + 1, c.n_layer);
    }
    return w;
}

namespace {

void validate_setup(const ModelConfig& c, const RuntimeOptions& o) {
    if (c.n_layer <= 0 || c.hidden_size <= 0 || c.n_head <= 0 || c.n_kv_head <= 0 || c.head_dim <= 0 ||
        c.vocab_size <= 0 || c.intermediate_size <= 0)
        throw Error("model config: sizes must be positive (" + c.architecture + ")");
    if (c.n_head % c.n_kv_head != 0)
        throw Error("model config: num_attention_heads (" + std::to_string(c.n_head) +
                    ") is not a multiple of num_key_value_heads (" + std::to_string(c.n_kv_head) + ")");
    if (o.dtype != at::kFloat && o.dtype != at::kBFloat16 && o.dtype != at::kHalf)
        throw Error(std::string("runtime dtype must be fp32, bf16 or fp16, got ") + c10::toString(o.dtype));
    if (o.dtype == at::kHalf && o.device.is_cpu())
        throw Error("runtime dtype fp16 needs a CUDA device (the CPU has no fp16 matmul); use bf16 or fp32");
}

}  // namespace

std::unique_ptr<LlamaModel> LlamaModel::load(const std::filesystem::path& model_dir,
                                             const RuntimeOptions& options, const ProgressFn& progress) {
    const ModelConfig config = ModelConfig::load(model_dir);
    const SafetensorsArchive archive = SafetensorsArchive::open(model_dir);
    validate_setup(config, options);
    std::unique_ptr<LlamaModel> m(new LlamaModel());
    m->config_ = config;
    m->options_ = options;
    m->w_ = Weights::load(config, archive, options, progress);
    m->inv_freq_ = rope_inv_freq(config).to(options.device);
    return m;
}

std::unique_ptr<LlamaModel> LlamaModel::from_archive(const ModelConfig& config,
                                                     const SafetensorsArchive& archive,
                                                     const RuntimeOptions& options) {
    validate_setup(config, options);
    std::unique_ptr<LlamaModel> m(new LlamaModel());
    m->config_ = config;
    m->options_ = options;
    m->w_ = Weights::load(config, archive, options, {});
    m->inv_freq_ = rope_inv_freq(config).to(options.device);
    return m;
}

LlamaModel::~LlamaModel() = default;

KVCache LlamaModel::new_cache() const {
    return KVCache(config_.n_layer, config_.n_kv_head, config_.head_dim,
                   at::TensorOptions().device(options_.device).dtype(options_.dtype));
}

std::pair<at::Tensor, at::Tensor> LlamaModel::rope_tables(int64_t begin, int64_t end) const {
    if (begin < 0 || end < begin)
        throw Error("rope_tables: bad position range [" + std::to_string(begin) + ", " + std::to_string(end) +
                    ")");
    return rope_cos_sin(inv_freq_, begin, end, options_.dtype);
}

namespace {

// State of an observed (end-of-context) prefill: per-layer pre-RoPE keys of every context token.
struct ObservedPrefill {
    std::vector<at::Tensor> keys_pre_rope;  // per layer [n_kv_head, L, head_dim], freed after its capture
    at::Tensor cos, sin;                    // [L, head_dim], positions 0..L-1
    at::Tensor inv_freq;                    // [head_dim / 2] fp32
    int64_t window = 0;                     // w_obs
    // Per layer, the running mean and centred second moment of the pre-RoPE queries of positions >=
    // kQueryStatsSkip, merged chunk by chunk (Chan et al.): each chunk's moments about its own mean in fp32,
    // the merge in fp64, so a long prompt loses no digits and the products stay fp32.
    std::vector<at::Tensor> query_mean;   // [n_head, head_dim] fp64
    std::vector<at::Tensor> query_m2;     // [n_head, head_dim, head_dim] fp64
    std::vector<int64_t> query_rows;      // positions merged so far
    std::vector<at::Tensor> query_sum;    // [n_head, head_dim] fp64: every position's query, summed
    std::vector<int64_t> query_sum_rows;  // positions in query_sum
    at::Tensor token_ids;                 // [L] int64 when the prefill began at position 0, else undefined
};

at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
    return bias.defined() ? at::linear(x, w, bias) : at::linear(x, w);
}

// SwiGLU: down(silu(gate(x)) * up(x)), with gate and up from one matmul.
at::Tensor mlp(const LayerWeights& lw, const at::Tensor& x, int64_t inter, OpProfile* profile) {
    OpTimer t_gate_up(profile, "gate_up matmul", x.device());
    const at::Tensor gate_up = linear(x, lw.gate_up, lw.gate_up_bias);  // [m, 2 inter]
    t_gate_up.stop();
    OpTimer t_act(profile, "silu * up", x.device());
    const at::Tensor act = swiglu(gate_up.narrow(1, 0, inter), gate_up.narrow(1, inter, inter));
    t_act.stop();
    OpTimer t_down(profile, "down matmul", x.device());
    return linear(act, lw.down, lw.down_bias);  // [m, hidden]
}

// The attention inputs of rows x [batch * m, hidden] (row b * m + i = sequence b's token i): q, k, v with
// the heads leading, each [batch, heads, m, head_dim] (views into one fused matmul's output).
std::array<at::Tensor, 3> attention_inputs(const at::Tensor& x, const LayerWeights& lw, const ModelConfig& c,
                                           int64_t batch, OpProfile* profile = nullptr) {
    const int64_t m = x.size(0) / batch, hd = c.head_dim, q_dim = c.n_head * hd, kv_dim = c.n_kv_head * hd;
    OpTimer t_norm(profile, "rms_norm", x.device());
    const at::Tensor normed = rms_norm(x, lw.input_norm, c.rms_norm_eps);
    t_norm.stop();
    OpTimer t_qkv(profile, "qkv matmul", x.device());
    const at::Tensor qkv = linear(normed, lw.qkv, lw.qkv_bias);
    t_qkv.stop();
    auto heads = [&](int64_t offset, int64_t width, int64_t n) {
        return qkv.narrow(1, offset, width).view({batch, m, n, hd}).transpose(1, 2);  // [batch, n, m, hd]
    };
    at::Tensor q = heads(0, q_dim, c.n_head), k = heads(q_dim, kv_dim, c.n_kv_head);
    if (c.qk_norm) {  // Qwen3: RMSNorm of every query and key head over head_dim, before RoPE
        OpTimer t_qk_norm(profile, "rms_norm", x.device());
        q = rms_norm(q, lw.q_norm, c.rms_norm_eps);
        k = rms_norm(k, lw.k_norm, c.rms_norm_eps);
    }
    return {q, k, heads(q_dim + kv_dim, kv_dim, c.n_kv_head)};
}

// The rest of the layer once attention is done: x += o(attn_rows), x += mlp(norm(x)). attn_rows: [rows,
// q_dim].
void finish_layer(at::Tensor& x, const at::Tensor& attn_rows, const LayerWeights& lw, const ModelConfig& c,
                  OpProfile* profile = nullptr) {
    {
        OpTimer t(profile, "o matmul", x.device());
        x.add_(linear(attn_rows, lw.o, lw.o_bias));
    }
    OpTimer t_norm(profile, "rms_norm", x.device());
    const at::Tensor normed = rms_norm(x, lw.post_attn_norm, c.rms_norm_eps);
    t_norm.stop();
    const at::Tensor out = mlp(lw, normed, c.intermediate_size, profile);
    OpTimer t_add(profile, "residual adds", x.device());
    x.add_(out);
}

// One decoder layer over a chunk x [m, hidden] (updated in place) whose RoPE tables are cos/sin [m,
// head_dim]. Appends the chunk's K/V to layer l of the cache. With `observed`, keeps the chunk's pre-RoPE
// keys (Qwen3: after k_norm, as the cache holds them rotated) at `context_offset`; with `capture` as well
// (last chunk), hands the layer to the observer and returns whether it replaced the layer's cache.
bool decoder_layer(at::Tensor& x, const LayerWeights& lw, const ModelConfig& c, int64_t l,
                   const at::Tensor& cos, const at::Tensor& sin, KVCache& cache, ObservedPrefill* observed,
                   int64_t context_offset, bool capture, const LayerObserver& observer, OpProfile* profile) {
    const int64_t m = x.size(0), n_head = c.n_head, n_kv = c.n_kv_head, hd = c.head_dim;
    const c10::Device device = x.device();
    const auto qkv = attention_inputs(x, lw, c, 1, profile);
    const at::Tensor q = qkv[0].select(0, 0), k = qkv[1].select(0, 0),
                     v = qkv[2].select(0, 0);  // [heads, m, hd]
    // The rotated keys go straight into the cache's next entries (no temporaries, no second copy).
    OpTimer t_rope(profile, "rope", device);
    at::Tensor q_rot = at::empty({n_head, m, hd}, x.options());  // [n_head, m, head_dim]
    apply_rope_into(q, cos, sin, q_rot);
    const LayerKV slots = cache.extend(l, m);  // [n_kv_head, m, head_dim] each
    apply_rope_into(k, cos, sin, slots.keys);
    t_rope.stop();
    OpTimer t_append(profile, "cache append", device);
    slots.values.copy_(v);
    t_append.stop();
    OpTimer t_observed(profile, "capture", device);
    if (observed) {
        observed->keys_pre_rope[l].narrow(1, context_offset, m).copy_(k);
        const at::Tensor q_sum =
            at::sum(q, {1}, /*keepdim=*/false, at::kFloat).to(at::kDouble);  // [n_head, head_dim]
        observed->query_sum[l] = observed->query_sum[l].defined() ? observed->query_sum[l] + q_sum : q_sum;
        observed->query_sum_rows[l] += m;
        const int64_t skip = std::clamp<int64_t>(kQueryStatsSkip - context_offset, 0, m);
        if (skip < m) {
            const int64_t rows = m - skip;
            const at::Tensor qs = q.narrow(1, skip, rows).to(at::kFloat);  // [n_head, rows, head_dim]
            const at::Tensor chunk_mean = qs.mean(1, /*keepdim=*/true);    // [n_head, 1, head_dim]
            const at::Tensor centred = qs - chunk_mean;
            const at::Tensor chunk_m2 = at::bmm(centred.transpose(1, 2), centred).to(at::kDouble);
            const at::Tensor mean_b = chunk_mean.squeeze(1).to(at::kDouble);  // [n_head, head_dim]
            at::Tensor& mean = observed->query_mean[l];
            at::Tensor& m2 = observed->query_m2[l];
            int64_t& n_a = observed->query_rows[l];
            if (n_a == 0) {
                mean = mean_b;
                m2 = chunk_m2;
            } else {
                const double na = static_cast<double>(n_a), nb = static_cast<double>(rows), n = na + nb;
                const at::Tensor delta = mean_b - mean;
                m2 = m2 + chunk_m2 + delta.unsqueeze(2) * delta.unsqueeze(1) * (na * nb / n);
                mean = mean + delta * (nb / n);
            }
            n_a += rows;
        }
    }
    t_observed.stop();

    // Grouped-query attention against the whole cache: the query heads of one kv head are stacked as rows.
    // A layer that begins with a compressed prefix is attended through it (its tail holds the new entries).
    OpTimer t_attention(profile, "attention", device);
    at::Tensor attn;  // [n_kv_head, group * m, hd] (or [n_head, m, hd]: the same rows)
    if (const LayerPrefix* prefix = cache.prefix(l)) {
        if (c.layer_window(l) > 0)
            throw Error("forward: layer " + std::to_string(l) +
                        " has a sliding window, which a compressed prefix does not support");
        attn = prefix->attend(q_rot, cache.tail_keys(l), cache.tail_values(l),
                              1.0 / std::sqrt(static_cast<double>(hd)));
    } else {
        attn = gqa_causal_attention(q_rot.view({n_kv, (n_head / n_kv) * m, hd}), cache.keys(l),
                                    cache.values(l), m, c.layer_window(l));
    }
    t_attention.stop();
    OpTimer t_layout(profile, "attention output layout", device);
    const at::Tensor attn_rows = attn.reshape({n_head, m, hd}).transpose(0, 1).reshape({m, n_head * hd});
    t_layout.stop();

    bool replaced = false;
    if (observed && capture) {
        OpTimer t_capture(profile, "observer", device);
        const int64_t w = std::min(observed->window, m);
        LayerCapture cap;
        cap.layer = l;
        cap.n_layers = c.n_layer;
        cap.keys_pre_rope = observed->keys_pre_rope[l];
        cap.keys = cache.keys(l);
        cap.values = cache.values(l);
        cap.window_queries = q_rot.narrow(1, m - w, w).contiguous();  // [n_head, w, head_dim]
        cap.o_proj = lw.o;                                            // [hidden, n_head * head_dim]
        cap.rope_cos = observed->cos;
        cap.rope_sin = observed->sin;
        cap.rope_inv_freq = observed->inv_freq;
        cap.token_ids = observed->token_ids;
        if (observed->query_rows[l] > 0) {
            cap.query_mean = observed->query_mean[l].to(at::kFloat);  // [n_head, head_dim]
            cap.query_cov = (observed->query_m2[l] / static_cast<double>(observed->query_rows[l]))
                                .to(at::kFloat);  // [n_head, head_dim, head_dim]
            observed->query_mean[l] = observed->query_m2[l] = at::Tensor();
        }
        cap.query_mean_all =
            (observed->query_sum[l] / static_cast<double>(observed->query_sum_rows[l])).to(at::kFloat);
        observed->query_sum[l] = at::Tensor();
        std::optional<LayerKV> replacement = observer(cap);
        observed->keys_pre_rope[l] = at::Tensor();  // this layer's capture is done
        if (replacement) {
            cache.replace(l, *replacement);
            replaced = true;
        }
    }
    // The rest of the layer uses the attention computed with the full cache (as kvpress does).
    finish_layer(x, attn_rows, lw, c, profile);
    return replaced;
}

}  // namespace

at::Tensor LlamaModel::forward(const std::vector<int64_t>& ids, KVCache& cache,
                               const ForwardOptions& opt) const {
    const ModelConfig& c = config_;
    if (ids.empty()) throw Error("forward: no input tokens");
    for (int64_t id : ids)
        if (id < 0 || id >= c.vocab_size)
            throw Error("forward: token id " + std::to_string(id) + " outside the vocabulary [0, " +
                        std::to_string(c.vocab_size) + ")");
    return to_host(forward_on_device(at::tensor(ids, at::kLong).to(options_.device), cache, opt));
}

at::Tensor LlamaModel::forward_on_device(const at::Tensor& ids_t, KVCache& cache,
                                         const ForwardOptions& opt) const {
    const ModelConfig& c = config_;
    if (ids_t.dim() != 1 || ids_t.scalar_type() != at::kLong || ids_t.device() != options_.device)
        throw Error("forward: the token ids must be a 1-d int64 tensor on the model's device (" +
                    options_.device.str() + ")");
    const int64_t n = ids_t.size(0);
    ++forward_calls_;
    if (n == 0) throw Error("forward: no input tokens");
    if (opt.chunk_size <= 0) throw Error("forward: chunk_size must be positive");
    if (cache.n_layer() != c.n_layer)
        throw Error("forward: the KV cache has " + std::to_string(cache.n_layer()) + " layers, the model " +
                    std::to_string(c.n_layer) + " (use LlamaModel::new_cache)");

    const int64_t n_kv = c.n_kv_head, hd = c.head_dim;
    const int64_t start = cache.next_position();
    const auto chunks =
        plan_chunks(n, opt.chunk_size, opt.observer ? std::max<int64_t>(1, opt.observer_window) : 0);
    const int64_t n_chunks = static_cast<int64_t>(chunks.size());

    ObservedPrefill observed;
    if (opt.observer) {
        // Pre-RoPE keys of cache entries from earlier calls can only be recovered if nothing was evicted.
        const int64_t L = start + n;
        observed.window = std::max<int64_t>(1, opt.observer_window);
        observed.keys_pre_rope.resize(static_cast<size_t>(c.n_layer));
        observed.query_mean.resize(static_cast<size_t>(c.n_layer));
        observed.query_m2.resize(static_cast<size_t>(c.n_layer));
        observed.query_rows.assign(static_cast<size_t>(c.n_layer), 0);
        observed.query_sum.resize(static_cast<size_t>(c.n_layer));
        observed.query_sum_rows.assign(static_cast<size_t>(c.n_layer), 0);
        std::tie(observed.cos, observed.sin) = rope_tables(0, L);
        observed.inv_freq = inv_freq_;
        if (cache.has_prefix())
            throw Error(
                "forward: an observed prefill needs an uncompressed cache (this one holds compressed "
                "layers)");
        for (int64_t l = 0; l < c.n_layer; ++l) {
            if (cache.length(l) != start)
                throw Error("forward: an observed prefill needs an uncompressed cache (layer " +
                            std::to_string(l) + " holds " + std::to_string(cache.length(l)) +
                            " entries at position " + std::to_string(start) + ")");
            at::Tensor buf =
                at::empty({n_kv, L, hd}, at::TensorOptions().device(options_.device).dtype(options_.dtype));
            if (start > 0)
                buf.narrow(1, 0, start)
                    .copy_(unapply_rope(cache.keys(l), observed.cos.narrow(0, 0, start),
                                        observed.sin.narrow(0, 0, start)));
            observed.keys_pre_rope[l] = std::move(buf);  // [n_kv_head, L, head_dim]
        }
    }
    const auto [cos_all, sin_all] =
        opt.observer ? std::make_pair(observed.cos.narrow(0, start, n), observed.sin.narrow(0, start, n))
                     : rope_tables(start, start + n);  // [n, head_dim]
    if (opt.observer && start == 0) observed.token_ids = ids_t;

    const KVCache::Snapshot before = cache.snapshot();
    // Room for the whole prompt and a first stretch of decoding, allocated once.
    if (!cache.has_prefix()) {
        int64_t longest = 0;
        for (int64_t l = 0; l < c.n_layer; ++l) longest = std::max(longest, cache.length(l));
        cache.reserve_entries(longest + n + kDecodeHeadroom);
    }
    bool replaced = false;
    std::vector<at::Tensor> logits;
    try {
        for (int64_t ci = 0; ci < n_chunks; ++ci) {
            check_cancel(opt.cancel);
            const auto [b, e] = chunks[ci];
            const int64_t m = e - b;
            const bool last_chunk = ci + 1 == n_chunks;
            const at::Tensor cos = cos_all.narrow(0, b, m), sin = sin_all.narrow(0, b, m);  // [m, head_dim]
            OpTimer t_embed(opt.profile, "embedding", options_.device);
            at::Tensor x = at::embedding(w_->embed, ids_t.narrow(0, b, m));  // [m, hidden]
            t_embed.stop();
            for (int64_t l = 0; l < c.n_layer; ++l) {
                check_cancel(opt.cancel);
                replaced |=
                    decoder_layer(x, w_->layers[l], c, l, cos, sin, cache, opt.observer ? &observed : nullptr,
                                  start + b, last_chunk, opt.observer, opt.profile);
                if (opt.progress) opt.progress("prefill", ci * c.n_layer + l + 1, n_chunks * c.n_layer);
            }
            // The lm_head only where logits are asked for: on a long prefill it would dominate otherwise.
            if (opt.all_logits || last_chunk) {
                OpTimer t_head(opt.profile, "lm_head", options_.device);
                const at::Tensor rows = opt.all_logits ? x : x.narrow(0, m - 1, 1);
                logits.push_back(at::linear(rms_norm(rows, w_->norm, c.rms_norm_eps), w_->lm_head)
                                     .to(at::kFloat));  // [rows, vocab]
            }
        }
    } catch (...) {
        // Leave the cache as it was; a layer already replaced by the observer cannot be rolled back.
        if (replaced)
            cache.clear();
        else
            cache.restore(before);
        throw;
    }
    cache.set_next_position(start + n);
    return logits.size() == 1 ? logits.front() : at::cat(logits, 0);  // [n or 1, vocab] fp32, device
}

at::Tensor LlamaModel::forward_batch(const std::vector<std::vector<int64_t>>& ids, BatchKVCache& cache,
                                     int64_t n_logits, const std::atomic<bool>* cancel) const {
    const ModelConfig& c = config_;
    const int64_t B = static_cast<int64_t>(ids.size());
    ++forward_batch_calls_;
    if (B == 0 || B != cache.batch_size())
        throw Error("forward_batch: " + std::to_string(B) + " token rows for a batch of " +
                    std::to_string(cache.batch_size()));
    if (cache.n_layer() != c.n_layer)
        throw Error("forward_batch: the batch cache has " + std::to_string(cache.n_layer()) +
                    " layers, the model " + std::to_string(c.n_layer));
    const int64_t m = static_cast<int64_t>(ids.front().size());
    if (m == 0) throw Error("forward_batch: no input tokens");
    if (n_logits < 1 || n_logits > m)
        throw Error("forward_batch: " + std::to_string(n_logits) + " logits asked of " + std::to_string(m) +
                    " tokens");
    std::vector<int64_t> flat;
    flat.reserve(static_cast<size_t>(B * m));
    for (int64_t b = 0; b < B; ++b) {
        if (static_cast<int64_t>(ids[b].size()) != m)
            throw Error("forward_batch: row " + std::to_string(b) + " has " + std::to_string(ids[b].size()) +
                        " tokens, row 0 has " + std::to_string(m) + " (rows advance together)");
        for (int64_t id : ids[b]) {
            if (id < 0 || id >= c.vocab_size)
                throw Error("forward_batch: token id " + std::to_string(id) + " outside the vocabulary [0, " +
                            std::to_string(c.vocab_size) + ")");
            flat.push_back(id);
        }
    }
    // RoPE tables per row ([B, 1, m, head_dim], broadcast over heads); rows usually share positions.
    std::vector<at::Tensor> cos_rows, sin_rows;
    std::vector<int64_t> appended(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) {
        appended[b] = cache.appended(0, b);
        const int64_t p = cache.position(b, appended[b]);
        if (b > 0 && p == cache.position(b - 1, appended[b - 1])) {
            cos_rows.push_back(cos_rows.back());
            sin_rows.push_back(sin_rows.back());
            continue;
        }
        auto [cb, sb] = rope_tables(p, p + m);
        cos_rows.push_back(cb);
        sin_rows.push_back(sb);
    }
    const at::Tensor cos = at::stack(cos_rows).unsqueeze(1), sin = at::stack(sin_rows).unsqueeze(1);

    const int64_t n_head = c.n_head, n_kv = c.n_kv_head, hd = c.head_dim, group = n_head / n_kv;
    at::Tensor x =
        at::embedding(w_->embed, at::tensor(flat, at::kLong).to(options_.device));  // [B m, hidden]
    std::vector<int64_t> seen_host;
    at::Tensor seen_device;  // [B] int64
    for (int64_t l = 0; l < c.n_layer; ++l) {
        check_cancel(cancel);
        for (int64_t b = 0; b < B; ++b)
            if (cache.appended(l, b) != appended[b])
                throw Error(
                    "forward_batch: the batch cache's layers hold different numbers of appended entries");
        const LayerWeights& lw = w_->layers[l];
        const auto qkv = attention_inputs(x, lw, c, B);                      // each [B, heads, m, hd]
        const at::Tensor q_rot = apply_rope(qkv[0].contiguous(), cos, sin);  // [B, n_head, m, hd]
        cache.append(l, apply_rope(qkv[1], cos, sin), qkv[2]);
        const std::vector<int64_t> seen = cache.seen(l);
        if (seen != seen_host) {  // the layers' lengths agree: one copy to the device per step
            seen_host = seen;
            seen_device = at::tensor(seen, at::kLong).to(options_.device);
        }
        const at::Tensor attn =
            gqa_rows_attention(q_rot.view({B, n_kv, group * m, hd}), cache.keys(l), cache.values(l), seen, m,
                               c.layer_window(l), kCachedScoreBytes, seen_device);  // [B, n_kv, group m, hd]
        // Rows that begin with a compressed prefix attend through it (above they saw their dense entries
        // only).
        for (int64_t b = 0; b < B; ++b) {
            const LayerPrefix* prefix = cache.prefix(l, b);
            if (!prefix) continue;
            if (c.layer_window(l) > 0)
                throw Error("forward_batch: layer " + std::to_string(l) +
                            " has a sliding window, which a compressed prefix does not support");
            attn[b].copy_(prefix
                              ->attend(q_rot[b], cache.keys(l)[b].narrow(1, 0, seen[b]),
                                       cache.values(l)[b].narrow(1, 0, seen[b]),
                                       1.0 / std::sqrt(static_cast<double>(hd)))
                              .view({n_kv, group * m, hd}));
        }
        finish_layer(x, attn.reshape({B, n_head, m, hd}).transpose(1, 2).reshape({B * m, n_head * hd}), lw,
                     c);
    }
    const at::Tensor last = x.view({B, m, -1}).narrow(1, m - n_logits, n_logits);  // [B, n_logits, hidden]
    return to_host(at::linear(rms_norm(last, w_->norm, c.rms_norm_eps), w_->lm_head).to(at::kFloat));
}

}  // namespace varrate
