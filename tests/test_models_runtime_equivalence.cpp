#include "tests/test_support.h"

// Runtime equivalences on small random models of the supported shapes (Qwen2 with biases, Llama 3.1 rope
// scaling with an untied head, Llama with o/mlp biases, Mistral sliding window, Qwen3 q/k norms with a
// window on its upper layers, GQA 1:1 and 4:1): an
// independent fp64 reference forward, incremental == batched, chunked == unchunked, the observer seam, and
// several caches decoded in lock-step == each alone.
#include <ATen/ATen.h>

#include <cmath>
#include <fstream>

#include "base/error.h"
#include "models/attention.h"
#include "models/batch_cache.h"
#include "models/device.h"
#include "models/generate.h"
#include "models/llama_model.h"
#include "models/random_model.h"
#include "models/safetensors.h"

using namespace varrate;

namespace {

struct Case {
    std::string name;
    nlohmann::json config;
};

std::vector<Case> cases() {
    const nlohmann::json base = {{"hidden_size", 64},      {"intermediate_size", 96},
                                 {"num_hidden_layers", 3}, {"vocab_size", 101},
                                 {"rms_norm_eps", 1e-5},   {"max_position_embeddings", 4096}};
    std::vector<Case> out;
    nlohmann::json qwen = base;  // Qwen2: q/k/v biases, tied, GQA 2:1
    qwen.update({{"architectures", {"Qwen2ForCausalLM"}},
                 {"model_type", "qwen2"},
                 {"num_attention_heads", 4},
                 {"num_key_value_heads", 2},
                 {"rope_theta", 1000000.0},
                 {"tie_word_embeddings", true}});
    out.push_back({"qwen2_bias", qwen});
    nlohmann::json llama31 = base;  // Llama 3.1: llama3 rope scaling, untied lm_head, GQA 4:1
    llama31.update({{"architectures", {"LlamaForCausalLM"}},
                    {"model_type", "llama"},
                    {"num_attention_heads", 4},
                    {"num_key_value_heads", 1},
                    {"rope_theta", 500000.0},
                    {"tie_word_embeddings", false},
                    {"rope_scaling",
                     {{"rope_type", "llama3"},
                      {"factor", 8.0},
                      {"low_freq_factor", 1.0},
                      {"high_freq_factor", 4.0},
                      {"original_max_position_embeddings", 64}}}});
    out.push_back({"llama31_gqa4", llama31});
    nlohmann::json mha = base;  // Llama with o_proj/mlp biases, linear rope scaling, GQA 1:1, head_dim != h/n
    mha.update({{"architectures", {"LlamaForCausalLM"}},
                {"model_type", "llama"},
                {"num_attention_heads", 4},
                {"num_key_value_heads", 4},
                {"head_dim", 8},
                {"attention_bias", true},
                {"mlp_bias", true},
                {"rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}}}});
    out.push_back({"llama_mha_bias", mha});
    nlohmann::json mistral = base;  // Mistral sliding window
    mistral.update({{"architectures", {"MistralForCausalLM"}},
                    {"model_type", "mistral"},
                    {"num_attention_heads", 4},
                    {"num_key_value_heads", 2},
                    {"sliding_window", 9}});
    out.push_back({"mistral_window", mistral});
    nlohmann::json qwen3 =
        base;  // Qwen3: q/k norms, head_dim != h/n, window from layer 1 on (max_window_layers)
    qwen3.update({{"architectures", {"Qwen3ForCausalLM"}},
                  {"model_type", "qwen3"},
                  {"num_attention_heads", 4},
                  {"num_key_value_heads", 2},
                  {"head_dim", 32},
                  {"rope_theta", 1000000.0},
                  {"tie_word_embeddings", true},
                  {"use_sliding_window", true},
                  {"sliding_window", 11},
                  {"max_window_layers", 1}});
    out.push_back({"qwen3_qk_norm", qwen3});
    return out;
}

// Weights with enough spread that attention is peaked (masking and grouping errors show), in fp32.
void write_model(const ModelConfig& c, const std::filesystem::path& dir, uint64_t seed) {
    at::manual_seed(seed);
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (const auto& [name, shape] : c.expected_tensors()) {
        const auto ends = [&](const std::string& s) {
            return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
        };
        at::Tensor t = at::randn(shape, at::kFloat);
        const double fan_in = shape.size() == 2 ? double(shape[1]) : 1.0;
        if (ends("norm.weight"))
            t = 1 + 0.2 * t;
        else if (ends(".bias"))
            t = 0.2 * t;
        else if (ends("q_proj.weight") || ends("k_proj.weight"))
            t = t * (2.0 / std::sqrt(fan_in));
        else if (!ends("embed_tokens.weight"))
            t = t / std::sqrt(fan_in);
        tensors.emplace_back(name, t);
    }
    std::filesystem::create_directories(dir);
    write_safetensors(dir / "model.safetensors", tensors);
    std::ofstream(dir / "config.json") << c.to_json().dump(2);
}

// Independent inv_freq, written per frequency from the Llama 3.1 recipe, in double.
at::Tensor reference_inv_freq(const ModelConfig& c) {
    std::vector<double> f;
    for (int64_t j = 0; j < c.head_dim / 2; ++j) {
        double inv = 1.0 / std::pow(c.rope_theta, 2.0 * j / c.head_dim);
        const RopeScaling& s = c.rope_scaling;
        if (s.type == RopeScalingType::Linear) inv /= s.factor;
        if (s.type == RopeScalingType::Llama3) {
            const double wavelen = 2 * M_PI / inv, old = double(s.original_max_position_embeddings);
            if (wavelen > old / s.low_freq_factor) {
                inv /= s.factor;
            } else if (wavelen >= old / s.high_freq_factor) {
                const double smooth =
                    (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
                inv = (1 - smooth) * inv / s.factor + smooth * inv;
            }
        }
        f.push_back(inv);
    }
    return at::tensor(f, at::kDouble);
}

at::Tensor ref_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    const int64_t half = x.size(-1) / 2;
    const at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
    const at::Tensor c = cos.narrow(-1, 0, half), s = sin.narrow(-1, 0, half);
    return at::cat({x1 * c - x2 * s, x2 * c + x1 * s}, -1);
}

at::Tensor ref_rms(const at::Tensor& x, const at::Tensor& w, double eps) {
    return x * at::rsqrt(x.pow(2).mean(-1, true) + eps) * w;
}

// A plain fp64 forward over the whole sequence: repeat K/V per head, explicit causal (+window) mask.
at::Tensor reference_logits(const ModelConfig& c, const SafetensorsArchive& a,
                            const std::vector<int64_t>& ids) {
    auto W = [&](const std::string& n) { return a.tensor(n).to(at::kDouble); };
    auto linear = [&](const at::Tensor& x, const std::string& p, bool bias) {
        at::Tensor y = at::matmul(x, W(p + ".weight").t());
        return bias ? y + W(p + ".bias") : y;
    };
    const int64_t n = int64_t(ids.size()), nh = c.n_head, nkv = c.n_kv_head, hd = c.head_dim;
    const at::Tensor angles = at::outer(at::arange(n, at::kDouble), reference_inv_freq(c));
    const at::Tensor cos = at::cat({angles, angles}, -1).cos(), sin = at::cat({angles, angles}, -1).sin();
    const at::Tensor i = at::arange(n).unsqueeze(1), j = at::arange(n).unsqueeze(0);
    at::Tensor x = W("model.embed_tokens.weight").index_select(0, at::tensor(ids, at::kLong));
    for (int64_t l = 0; l < c.n_layer; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        // Mistral: every layer; Qwen2/3 with use_sliding_window: layers from max_window_layers on.
        const bool windowed = c.sliding_window && (c.model_type == "mistral" || l >= c.first_sliding_layer);
        at::Tensor allowed = j <= i;
        if (windowed) allowed = allowed.logical_and(j > i - *c.sliding_window);
        const at::Tensor h = ref_rms(x, W(p + "input_layernorm.weight"), c.rms_norm_eps);
        at::Tensor q = linear(h, p + "self_attn.q_proj", c.attention_bias).view({n, nh, hd});
        at::Tensor k = linear(h, p + "self_attn.k_proj", c.attention_bias).view({n, nkv, hd});
        if (c.qk_norm) {  // Qwen3: per-head RMSNorm before RoPE
            q = ref_rms(q, W(p + "self_attn.q_norm.weight"), c.rms_norm_eps);
            k = ref_rms(k, W(p + "self_attn.k_norm.weight"), c.rms_norm_eps);
        }
        q = ref_rope(q.transpose(0, 1), cos, sin);
        k = ref_rope(k.transpose(0, 1), cos, sin).repeat_interleave(nh / nkv, 0);
        const at::Tensor v = linear(h, p + "self_attn.v_proj", c.attention_bias)
                                 .view({n, nkv, hd})
                                 .transpose(0, 1)
                                 .repeat_interleave(nh / nkv, 0);
        const at::Tensor s = at::matmul(q, k.transpose(1, 2))
                                 .div(std::sqrt(double(hd)))
                                 .masked_fill(allowed.logical_not(), -INFINITY);
        const at::Tensor o = at::matmul(at::softmax(s, -1), v).transpose(0, 1).reshape({n, nh * hd});
        x = x + linear(o, p + "self_attn.o_proj", c.o_proj_bias);
        const at::Tensor h2 = ref_rms(x, W(p + "post_attention_layernorm.weight"), c.rms_norm_eps);
        x = x + linear(at::silu(linear(h2, p + "mlp.gate_proj", c.mlp_bias)) *
                           linear(h2, p + "mlp.up_proj", c.mlp_bias),
                       p + "mlp.down_proj", c.mlp_bias);
    }
    const at::Tensor head = c.tie_word_embeddings ? W("model.embed_tokens.weight") : W("lm_head.weight");
    return at::matmul(ref_rms(x, W("model.norm.weight"), c.rms_norm_eps), head.t());  // [n, vocab]
}

std::vector<int64_t> random_ids(int64_t n, int64_t vocab, uint64_t seed) {
    at::manual_seed(seed);
    const at::Tensor t = at::randint(vocab, {n}, at::kLong);
    return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n);
}

// max |a - b| relative to the largest |b| (at least 1).
double rel_diff(const at::Tensor& a, const at::Tensor& b) {
    const at::Tensor bd = b.to(at::kDouble);
    return (a.to(at::kDouble) - bd).abs().max().item<double>() / std::max(1.0, bd.abs().max().item<double>());
}

at::Tensor forward_all(const LlamaModel& m, KVCache& cache, const std::vector<int64_t>& ids,
                       int64_t chunk = 512) {
    ForwardOptions fo;
    fo.all_logits = true;
    fo.chunk_size = chunk;
    return m.forward(ids, cache, fo);
}

at::Tensor forward_incremental(const LlamaModel& m, KVCache& cache, const std::vector<int64_t>& ids) {
    std::vector<at::Tensor> rows;
    for (int64_t id : ids) rows.push_back(m.forward({id}, cache));
    return at::cat(rows, 0);
}

struct Loaded {
    ModelConfig config;
    std::filesystem::path dir;
    std::unique_ptr<LlamaModel> model;
};

std::vector<std::filesystem::path>& temp_dirs() {
    static std::vector<std::filesystem::path> dirs;  // removed in cleanupTestCase
    return dirs;
}

Loaded load_case(const Case& k, uint64_t seed) {
    Loaded l;
    l.config = ModelConfig::from_json(k.config, k.name);
    l.dir = test::temp_dir("rt-" + k.name);
    temp_dirs().push_back(l.dir);
    write_model(l.config, l.dir, seed);
    RuntimeOptions o;
    l.model = LlamaModel::load(l.dir, o);
    return l;
}

}  // namespace

class TestRuntimeEquivalence : public QObject {
    Q_OBJECT

  private Q_SLOTS:
    void initTestCase() { configure_threads(0); }
    void cleanupTestCase() {
        for (const auto& d : temp_dirs()) std::filesystem::remove_all(d);
    }

    void matches_fp64_reference() {
        for (const Case& k : cases()) {
            Loaded l = load_case(k, 11);
            const std::vector<int64_t> ids = random_ids(37, l.config.vocab_size, 5);
            KVCache cache = l.model->new_cache();
            const at::Tensor got = forward_all(*l.model, cache, ids, 16);
            const at::Tensor want = reference_logits(l.config, SafetensorsArchive::open(l.dir), ids);
            const double d = rel_diff(got, want);
            qInfo("%s: fp32 runtime vs fp64 reference, relative max diff %.3g", k.name.c_str(), d);
            QVERIFY2(d < 1e-4, qPrintable(QString::fromStdString(k.name)));
        }
    }

    // (a) incremental decode == full sequence, (b) chunked prefill == unchunked, also with cache contents.
    void incremental_and_chunked_match_full() {
        for (const Case& k : cases()) {
            Loaded l = load_case(k, 12);
            const std::vector<int64_t> ids = random_ids(150, l.config.vocab_size, 6);
            KVCache full_cache = l.model->new_cache();
            const at::Tensor full = forward_all(*l.model, full_cache, ids);  // [150, vocab]
            QCOMPARE(full.size(0), int64_t(150));
            KVCache inc_cache = l.model->new_cache();
            const double inc = rel_diff(forward_incremental(*l.model, inc_cache, ids), full);
            QVERIFY2(inc < 1e-4, qPrintable(QString("%1 incremental %2").arg(k.name.c_str()).arg(inc)));
            for (int64_t chunk : {1, 7, 64}) {
                KVCache cache = l.model->new_cache();
                const double d = rel_diff(forward_all(*l.model, cache, ids, chunk), full);
                QVERIFY2(d < 1e-4,
                         qPrintable(QString("%1 chunk %2: %3").arg(k.name.c_str()).arg(chunk).arg(d)));
                QCOMPARE(cache.next_position(), int64_t(150));
                for (int64_t layer = 0; layer < l.config.n_layer; ++layer)
                    QVERIFY(rel_diff(cache.keys(layer), full_cache.keys(layer)) < 1e-5);
            }
            // Two calls continuing each other == one call; only the last row without all_logits.
            KVCache two = l.model->new_cache();
            forward_all(*l.model, two, std::vector<int64_t>(ids.begin(), ids.begin() + 100), 32);
            const at::Tensor last = l.model->forward(std::vector<int64_t>(ids.begin() + 100, ids.end()), two);
            QCOMPARE(last.size(0), int64_t(1));
            QVERIFY(rel_diff(last, full.narrow(0, 149, 1)) < 1e-4);
        }
    }

    // Attention memory is bounded by design: tiny score budgets (many row blocks / tiles) give the same
    // result, and the CPU tiles agree with the batched formulation, with and without a sliding window.
    void bounded_attention_blocks_match() {
        at::manual_seed(3);
        for (int64_t n_new : {50, 1}) {
            const at::Tensor q = at::randn({2, 4 * n_new, 16}), k = at::randn({2, 300, 16}),
                             v = at::randn({2, 300, 16});
            for (int64_t window : {0, 20}) {
                const at::Tensor whole = gqa_causal_attention_batched(q, k, v, n_new, window);
                QVERIFY(rel_diff(gqa_causal_attention_batched(q, k, v, n_new, window, 2 * 300 * 4 * 7),
                                 whole) < 1e-6);
                QVERIFY(rel_diff(gqa_causal_attention(q, k, v, n_new, window), whole) < 1e-6);
                QVERIFY(rel_diff(gqa_causal_attention(q, k, v, n_new, window, 4 * 300 * 4 * 3), whole) <
                        1e-6);
            }
            QVERIFY(rel_diff(gqa_causal_attention(q, k, v, n_new, 20), gqa_causal_attention(q, k, v, n_new)) >
                    1e-3);
        }
    }

    // Rows of a batch attend to their own columns only: against each row's causal attention alone, with
    // rows of different lengths, a sliding window and blocks of every size.
    void rows_attention_matches_each_row() {
        at::manual_seed(4);
        const std::vector<int64_t> seen = {40, 7, 38, 12, 40};
        for (int64_t n_new : {1, 5}) {
            const at::Tensor q = at::randn({5, 2, 3 * n_new, 8}), k = at::randn({5, 2, 40, 8}),
                             v = at::randn({5, 2, 40, 8});
            for (int64_t window : {0, 6})
                for (int64_t budget : {int64_t(1), int64_t(1) << 20}) {
                    const at::Tensor got = gqa_rows_attention(q, k, v, seen, n_new, window, budget);
                    for (int64_t b = 0; b < 5; ++b) {
                        const at::Tensor want = gqa_causal_attention_batched(
                            q[b], k[b].narrow(1, 0, seen[b]), v[b].narrow(1, 0, seen[b]), n_new, window);
                        QVERIFY2(
                            rel_diff(got[b], want) < 1e-6,
                            qPrintable(QString("row %1 n_new %2 window %3").arg(b).arg(n_new).arg(window)));
                    }
                }
        }
    }

    // A batch of caches of different lengths and positions (plain, evicted, evicted unevenly per layer, a
    // shorter context) advances like each cache alone, and leaves the caches as they were.
    void batch_forward_matches_each_cache() {
        for (const Case& k : cases()) {
            Loaded l = load_case(k, 18);
            const ModelConfig& c = l.config;
            std::vector<KVCache> caches;
            for (int64_t variant = 0; variant < 4; ++variant) {
                KVCache cache = l.model->new_cache();
                l.model->forward(random_ids(variant == 3 ? 45 : 60, c.vocab_size, 20), cache);
                for (int64_t layer = 0; layer < c.n_layer && (variant == 1 || variant == 2); ++layer) {
                    const at::Tensor keep =
                        variant == 1 ? at::arange(0, 60, 2) : at::arange(0, 60 - 15 * layer);  // [kept]
                    cache.replace(layer, {cache.keys(layer).index_select(1, keep),
                                          cache.values(layer).index_select(1, keep)});
                }
                caches.push_back(std::move(cache));
            }
            std::vector<const KVCache*> rows;
            for (const KVCache& cache : caches) rows.push_back(&cache);
            BatchKVCache batch(rows, 7 + 2);
            const std::vector<int64_t> question = random_ids(7, c.vocab_size, 21);
            const at::Tensor got =
                l.model->forward_batch(std::vector<std::vector<int64_t>>(4, question), batch, 7);
            QVERIFY(got.sizes() == (std::vector<int64_t>{4, 7, c.vocab_size}));
            const at::Tensor step1 = l.model->forward_batch({{3}, {5}, {7}, {9}}, batch);
            const at::Tensor step2 = l.model->forward_batch({{4}, {6}, {8}, {10}}, batch);
            for (int64_t b = 0; b < 4; ++b) {
                KVCache& cache = caches[b];
                const KVCache::Snapshot before = cache.snapshot();
                const at::Tensor want = forward_all(*l.model, cache, question);
                const double d = rel_diff(got[b], want);
                QVERIFY2(d < 1e-4, qPrintable(QString("%1 row %2: %3").arg(k.name.c_str()).arg(b).arg(d)));
                QVERIFY(rel_diff(step1[b], l.model->forward({3 + 2 * b}, cache)) < 1e-4);
                QVERIFY(rel_diff(step2[b], l.model->forward({4 + 2 * b}, cache)) < 1e-4);
                cache.restore(before);
            }
            EXPECT_ERROR(l.model->forward_batch({{1}, {2}, {3}, {4}}, batch), "exceed the 9 reserved");
            EXPECT_ERROR(l.model->forward_batch({{1}, {2}, {3}}, batch), "3 token rows for a batch of 4");
            EXPECT_ERROR(l.model->forward_batch({{1}, {2, 3}, {3}, {4}}, batch), "row 1 has 2 tokens");
        }
    }

    // Greedy answers decoded together, with any draft (right, wrong, too long, none) and with or without a
    // prompt, are each cache's own greedy answer; rows stop on their own stop tokens.
    void batch_greedy_matches_each_cache() {
        for (const Case& k : {cases()[0], cases()[3]}) {
            Loaded l = load_case(k, 19);
            const ModelConfig& c = l.config;
            std::vector<KVCache> caches;
            std::vector<at::Tensor> last;
            for (int64_t variant = 0; variant < 4; ++variant) {
                KVCache cache = l.model->new_cache();
                last.push_back(l.model->forward(random_ids(50, c.vocab_size, 30 + variant % 2), cache));
                if (variant >= 2)
                    for (int64_t layer = 0; layer < c.n_layer; ++layer) {
                        const at::Tensor keep = at::arange(variant, 50, variant);
                        cache.replace(layer, {cache.keys(layer).index_select(1, keep),
                                              cache.values(layer).index_select(1, keep)});
                    }
                caches.push_back(std::move(cache));
            }
            std::vector<const KVCache*> rows;
            for (const KVCache& cache : caches) rows.push_back(&cache);
            const std::vector<int64_t> prompt = random_ids(6, c.vocab_size, 32);
            GenerateOptions go;
            go.max_new_tokens = 24;  // long enough for degenerate repeats (continue_greedy's repeat drafts)
            std::vector<std::vector<int64_t>> want, want_no_prompt;
            for (size_t b = 0; b < caches.size(); ++b) {
                const KVCache::Snapshot before = caches[b].snapshot();
                want.push_back(generate_greedy(*l.model, caches[b], prompt, go).generated);
                caches[b].restore(before);
            }
            go.stop_ids = {want[0][3]};  // row 0 now stops after 4 tokens, others wherever it occurs
            for (size_t b = 0; b < caches.size(); ++b) {
                const KVCache::Snapshot before = caches[b].snapshot();
                want[b] = generate_greedy(*l.model, caches[b], prompt, go).generated;
                caches[b].restore(before);
                want_no_prompt.push_back(decode_greedy(*l.model, caches[b], last[b], go).generated);
                caches[b].restore(before);
            }
            const std::vector<std::vector<int64_t>> drafts = {
                {}, want[0], want[1], random_ids(9, c.vocab_size, 33), random_ids(30, c.vocab_size, 34)};
            for (size_t di = 0; di < drafts.size(); ++di) {
                const auto got = generate_greedy_batch(*l.model, rows, prompt, at::Tensor(), drafts[di], go);
                const auto got_np =
                    generate_greedy_batch(*l.model, rows, {}, at::cat(last, 0), drafts[di], go);
                for (size_t b = 0; b < caches.size(); ++b) {
                    QVERIFY2(got[b].generated == want[b],
                             qPrintable(QString("%1 draft %2 row %3").arg(k.name.c_str()).arg(di).arg(b)));
                    QCOMPARE(got[b].stopped, want[b].back() == go.stop_ids[0]);
                    QVERIFY2(
                        got_np[b].generated == want_no_prompt[b],
                        qPrintable(
                            QString("%1 no prompt, draft %2 row %3").arg(k.name.c_str()).arg(di).arg(b)));
                }
            }
            QCOMPARE(caches[2].length(0), int64_t(24));  // untouched
            EXPECT_ERROR(generate_greedy_batch(*l.model, rows, {}, at::Tensor(), {}, go),
                         "last logits [4, vocab]");
        }
    }

    // (c) an observer returning an identical copy changes nothing; (d) what it sees is right.
    void observer_identity_and_capture() {
        for (const Case& k : cases()) {
            Loaded l = load_case(k, 13);
            const ModelConfig& c = l.config;
            const std::vector<int64_t> context = random_ids(90, c.vocab_size, 7);
            const std::vector<int64_t> question = random_ids(12, c.vocab_size, 8);
            for (int64_t chunk : {512, 16}) {
                KVCache plain = l.model->new_cache();
                ForwardOptions po;
                po.chunk_size = chunk;
                l.model->forward(context, plain, po);
                const at::Tensor want = forward_all(*l.model, plain, question);

                KVCache observed = l.model->new_cache();
                ForwardOptions fo;
                fo.chunk_size = chunk;
                fo.observer_window = 24;
                std::vector<int64_t> seen;
                fo.observer = [&](const LayerCapture& cap) -> std::optional<LayerKV> {
                    seen.push_back(cap.layer);
                    const int64_t L = 90;
                    const std::vector<int64_t> kv_shape{c.n_kv_head, L, c.head_dim};
                    QTest::qVerify(cap.keys.sizes() == kv_shape && cap.values.sizes() == kv_shape &&
                                       cap.keys_pre_rope.sizes() == kv_shape,
                                   "kv shapes", "", __FILE__, __LINE__);
                    QTest::qVerify(
                        cap.window_queries.sizes() == std::vector<int64_t>{c.n_head, 24, c.head_dim},
                        "window shape", "", __FILE__, __LINE__);
                    const auto [cos, sin] = l.model->rope_tables(0, L);
                    QTest::qVerify(at::equal(cap.rope_cos, cos) && at::equal(cap.rope_sin, sin),
                                   "rope tables", "", __FILE__, __LINE__);
                    QTest::qVerify(
                        rel_diff(apply_rope(cap.keys_pre_rope, cap.rope_cos, cap.rope_sin), cap.keys) < 1e-6,
                        "rotated pre-RoPE keys == keys", "", __FILE__, __LINE__);
                    return LayerKV{cap.keys.clone(), cap.values.clone()};
                };
                const at::Tensor last = l.model->forward(context, observed, fo);
                QCOMPARE(seen, [&] {
                    std::vector<int64_t> all;
                    for (int64_t i = 0; i < c.n_layer; ++i) all.push_back(i);
                    return all;
                }());
                QCOMPARE(observed.next_position(), int64_t(90));
                const at::Tensor got = forward_all(*l.model, observed, question);
                QVERIFY2(rel_diff(got, want) < 1e-5, qPrintable(QString::fromStdString(k.name)));
                if (chunk == 512) QVERIFY(at::equal(got, want));  // same chunking: bit for bit
            }
        }
    }

    // (d) layer 0's capture against an independent computation from the weights, including a context fed in
    // two calls (pre-RoPE keys of the first part are recovered from the cache).
    // Qwen3's pre-RoPE keys are the normed ones, k_norm(k_proj(x)), as its queries before RoPE.
    void observer_layer0_keys_and_queries_data() {
        QTest::addColumn<int>("case_index");
        QTest::newRow("llama31_gqa4") << 1;
        QTest::newRow("qwen3_qk_norm") << 4;
    }
    void observer_layer0_keys_and_queries() {
        QFETCH(int, case_index);
        const Case k = cases()[case_index];
        Loaded l = load_case(k, 14);
        const ModelConfig& c = l.config;
        const SafetensorsArchive a = SafetensorsArchive::open(l.dir);
        const std::vector<int64_t> ids = random_ids(70, c.vocab_size, 9);
        const at::Tensor x =
            a.tensor("model.embed_tokens.weight").to(at::kDouble).index_select(0, at::tensor(ids));
        const at::Tensor h =
            ref_rms(x, a.tensor("model.layers.0.input_layernorm.weight").to(at::kDouble), c.rms_norm_eps);
        auto head_norm = [&](const at::Tensor& t, const char* name) {  // [70, heads, hd]
            return c.qk_norm
                       ? ref_rms(t, a.tensor(std::string("model.layers.0.self_attn.") + name).to(at::kDouble),
                                 c.rms_norm_eps)
                       : t;
        };
        const at::Tensor k_pre =
            head_norm(at::matmul(h, a.tensor("model.layers.0.self_attn.k_proj.weight").to(at::kDouble).t())
                          .view({70, c.n_kv_head, c.head_dim}),
                      "k_norm.weight")
                .transpose(0, 1);  // [n_kv, 70, hd]
        const at::Tensor q_pre =
            head_norm(at::matmul(h, a.tensor("model.layers.0.self_attn.q_proj.weight").to(at::kDouble).t())
                          .view({70, c.n_head, c.head_dim}),
                      "q_norm.weight")
                .transpose(0, 1);
        const at::Tensor angles = at::outer(at::arange(70, at::kDouble), reference_inv_freq(c));
        const at::Tensor cos = at::cat({angles, angles}, -1).cos(), sin = at::cat({angles, angles}, -1).sin();
        const at::Tensor q_win = ref_rope(q_pre, cos, sin).narrow(1, 70 - 10, 10);

        for (int split : {0, 30}) {
            KVCache cache = l.model->new_cache();
            if (split) l.model->forward(std::vector<int64_t>(ids.begin(), ids.begin() + split), cache);
            ForwardOptions fo;
            fo.chunk_size = 8;
            fo.observer_window = 10;
            bool called = false;
            fo.observer = [&](const LayerCapture& cap) -> std::optional<LayerKV> {
                if (cap.layer != 0) return std::nullopt;
                called = true;
                QTest::qVerify(rel_diff(cap.keys_pre_rope, k_pre) < 1e-5, "layer 0 pre-RoPE keys", "",
                               __FILE__, __LINE__);
                QTest::qVerify(rel_diff(cap.keys, ref_rope(k_pre, cos, sin)) < 1e-5, "layer 0 keys", "",
                               __FILE__, __LINE__);
                QTest::qVerify(rel_diff(cap.window_queries, q_win) < 1e-5, "layer 0 window queries", "",
                               __FILE__, __LINE__);
                QTest::qVerify(
                    rel_diff(unapply_rope(cap.keys, cap.rope_cos, cap.rope_sin), cap.keys_pre_rope) < 1e-5,
                    "unapply_rope inverts", "", __FILE__, __LINE__);
                return std::nullopt;
            };
            l.model->forward(std::vector<int64_t>(ids.begin() + split, ids.end()), cache, fo);
            QVERIFY(called);
        }
    }

    // (e) one context cache serves several questions through snapshot/restore.
    void snapshot_restore_between_questions() {
        for (const Case& k : cases()) {
            Loaded l = load_case(k, 15);
            const std::vector<int64_t> context = random_ids(60, l.config.vocab_size, 10);
            const std::vector<int64_t> qa = random_ids(9, l.config.vocab_size, 11);
            const std::vector<int64_t> qb = random_ids(6, l.config.vocab_size, 12);
            GenerateOptions go;
            go.max_new_tokens = 12;

            KVCache fresh = l.model->new_cache();
            l.model->forward(context, fresh);
            const GenerateResult want = generate_greedy(*l.model, fresh, qb, go);

            KVCache shared = l.model->new_cache();
            l.model->forward(context, shared);
            const KVCache::Snapshot s = shared.snapshot();
            const GenerateResult a = generate_greedy(*l.model, shared, qa, go);
            QCOMPARE(shared.next_position(), int64_t(60 + 9 + 11));
            shared.restore(s);
            QCOMPARE(shared.next_position(), int64_t(60));
            const GenerateResult b = generate_greedy(*l.model, shared, qb, go);
            QCOMPARE(b.generated, want.generated);
            QVERIFY(a.generated != b.generated || qa == qb);
        }
    }

    // (f) an evicting observer: the cache gets shorter, positions continue from the context length.
    void eviction_keeps_positions() {
        const Case k = cases()[1];
        Loaded l = load_case(k, 16);
        const ModelConfig& c = l.config;
        const int64_t L = 80;
        const std::vector<int64_t> context = random_ids(L, c.vocab_size, 13);
        const std::vector<int64_t> question = random_ids(7, c.vocab_size, 14);
        const at::Tensor keep = at::arange(0, L, 2);  // every other entry

        KVCache evicted = l.model->new_cache();
        ForwardOptions fo;
        fo.chunk_size = 32;
        fo.observer = [&](const LayerCapture& cap) -> std::optional<LayerKV> {
            return LayerKV{cap.keys.index_select(1, keep), cap.values.index_select(1, keep)};
        };
        l.model->forward(context, evicted, fo);
        QCOMPARE(evicted.next_position(), L);
        for (int64_t layer = 0; layer < c.n_layer; ++layer) QCOMPARE(evicted.length(layer), L / 2);

        // The same cache built by hand from a plain prefill (hidden states use the full cache either way).
        KVCache manual = l.model->new_cache();
        l.model->forward(context, manual);
        for (int64_t layer = 0; layer < c.n_layer; ++layer) {
            QVERIFY(rel_diff(evicted.keys(layer), manual.keys(layer).index_select(1, keep)) < 1e-6);
            manual.replace(layer, {manual.keys(layer).index_select(1, keep),
                                   manual.values(layer).index_select(1, keep)});
        }
        const at::Tensor a = forward_all(*l.model, evicted, question);
        const at::Tensor b = forward_incremental(*l.model, manual, question);  // batched == one at a time
        QVERIFY(rel_diff(a, b) < 1e-4);
        QCOMPARE(evicted.next_position(), L + 7);
        QCOMPARE(evicted.length(0), L / 2 + 7);

        // The first question token was rotated for position L: layer 0's key from the embedding alone.
        const SafetensorsArchive arch = SafetensorsArchive::open(l.dir);
        const at::Tensor x =
            arch.tensor("model.embed_tokens.weight").index_select(0, at::tensor({question[0]}));
        const at::Tensor h = ref_rms(x, arch.tensor("model.layers.0.input_layernorm.weight"), c.rms_norm_eps);
        const at::Tensor k0 = at::matmul(h, arch.tensor("model.layers.0.self_attn.k_proj.weight").t())
                                  .view({1, c.n_kv_head, c.head_dim})
                                  .transpose(0, 1);
        const auto [cos, sin] = l.model->rope_tables(L, L + 1);
        QVERIFY(rel_diff(evicted.keys(0).narrow(1, L / 2, 1), apply_rope(k0, cos, sin)) < 1e-5);
        const auto [cos0, sin0] = l.model->rope_tables(L / 2, L / 2 + 1);
        QVERIFY(rel_diff(evicted.keys(0).narrow(1, L / 2, 1), apply_rope(k0, cos0, sin0)) > 1e-3);
    }

    // Short contexts still hand the observer its window: a short last chunk is merged into the previous one.
    void observer_window_with_small_chunks() {
        Loaded l = load_case(cases()[0], 17);
        KVCache cache = l.model->new_cache();
        ForwardOptions fo;
        fo.chunk_size = 5;
        fo.observer_window = 13;
        int64_t rows = -1;
        fo.observer = [&](const LayerCapture& cap) -> std::optional<LayerKV> {
            rows = cap.window_queries.size(1);
            return std::nullopt;
        };
        l.model->forward(random_ids(41, l.config.vocab_size, 15), cache, fo);
        QCOMPARE(rows, int64_t(13));
        KVCache small = l.model->new_cache();
        l.model->forward(random_ids(6, l.config.vocab_size, 15), small, fo);  // fewer tokens than the window
        QCOMPARE(rows, int64_t(6));
    }

    void cancel_and_progress() {
        Loaded l = load_case(cases()[0], 18);
        const std::vector<int64_t> ids = random_ids(40, l.config.vocab_size, 16);
        KVCache cache = l.model->new_cache();
        l.model->forward(ids, cache);
        const KVCache::Snapshot before = cache.snapshot();
        std::atomic<bool> cancel{false};
        ForwardOptions fo;
        fo.chunk_size = 10;
        fo.cancel = &cancel;
        std::vector<std::pair<int64_t, int64_t>> calls;
        bool armed = true;  // raise the flag from inside the 5th progress call, once
        fo.progress = [&](const std::string& stage, int64_t done, int64_t total) {
            QTest::qVerify(stage == "prefill", "stage", "", __FILE__, __LINE__);
            calls.emplace_back(done, total);
            if (armed && done == 5) cancel = true;
        };
        QVERIFY_THROWS_EXCEPTION(Cancelled, l.model->forward(ids, cache, fo));
        QCOMPARE(calls.size(), size_t(5));
        QCOMPARE(calls.back().second, int64_t(4 * 3));  // 4 chunks x 3 layers
        // The cache is rolled back to where it was.
        QCOMPARE(cache.next_position(), before.next_position);
        for (int64_t layer = 0; layer < 3; ++layer) QCOMPARE(cache.length(layer), before.lengths[layer]);
        cancel = false;
        armed = false;
        calls.clear();
        l.model->forward(ids, cache, fo);
        QCOMPARE(calls.back(), std::make_pair(int64_t(12), int64_t(12)));
        // generate_greedy honours the flag too.
        cancel = true;
        GenerateOptions go;
        go.cancel = &cancel;
        QVERIFY_THROWS_EXCEPTION(Cancelled, generate_greedy(*l.model, cache, {1, 2}, go));
    }

    // Checkpoints written by write_random_model load; bad names and shapes are reported with tensor and file.
    void random_model_and_load_errors() {
        const ModelConfig c = ModelConfig::from_json(cases()[1].config, "llama31");
        const auto dir = test::temp_dir("rt-random");
        temp_dirs().push_back(dir);
        write_random_model(c, dir, 42, at::kBFloat16);
        RuntimeOptions o;
        o.dtype = at::kBFloat16;
        auto m = LlamaModel::load(dir, o);
        KVCache cache = m->new_cache();
        QCOMPARE(cache.keys(0).scalar_type(), at::kBFloat16);
        const at::Tensor logits = m->forward(random_ids(20, c.vocab_size, 1), cache);
        QVERIFY(logits.sizes() == (std::vector<int64_t>{1, c.vocab_size}));
        QVERIFY(at::isfinite(logits).all().item<bool>());

        const SafetensorsArchive a = SafetensorsArchive::open(dir);
        ModelConfig wider = c;
        wider.intermediate_size += 1;
        EXPECT_ERROR(LlamaModel::from_archive(wider, a, o), "mlp.gate_proj.weight", "model.safetensors");
        ModelConfig biased = c;
        biased.attention_bias = true;
        EXPECT_ERROR(LlamaModel::from_archive(biased, a, o), "q_proj.bias", "missing");
        KVCache other(2, c.n_kv_head, c.head_dim, at::TensorOptions());
        QVERIFY_THROWS_EXCEPTION(Error, m->forward({1}, other));
        QVERIFY_THROWS_EXCEPTION(Error, m->forward({c.vocab_size}, cache));
        QVERIFY_THROWS_EXCEPTION(Error, m->forward({}, cache));
    }
};

QTEST_GUILESS_MAIN(TestRuntimeEquivalence)
#include "test_models_runtime_equivalence.moc"
