#include "tests/test_support.h"

// Our think, snap-think, criticalkv, critical-adakv and snapkv-rerotate against kvpress's ThinKPress (key
// channel ratios 0.25 and 0.5), ComposedPress([SnapKVPress(ratio), ThinKPress(0.5)]),
// CriticalKVPress(SnapKVPress(ratio)), CriticalAdaKVPress(SnapKVPress(ratio)) and
// KeyRerotationPress(SnapKVPress(ratio)), finch against FinchPress (query-aware: its window is the question)
// and snapkv-per-layer against PerLayerCompressionPress(SnapKVPress(), ratios) (positions only: kvpress
// decodes layers of other lengths only with flash attention) (tests/data/oracles/kvpress_wrappers.json, made
// by scripts/oracles/generate.sh --only kvpress-wrappers through kvpress's own presses and pipeline, versions
// in its "generator" field) on the SnapKV reference's llama31-gqa4 checkpoint and ids, query-agnostic and
// query-aware. Per layer and KV head the pruned key channels and the kept positions are identical, and the
// greedy answer decoded from our cache (dense, and through the channel-pruned store; KeyRerotation's from the
// position after its kept tokens) is kvpress's (kvpress cannot decode CriticalAdaKV's masked cache on this
// checkpoint: positions only). The store's attention equals dense attention over the zeroed keys.
#include <ATen/ATen.h>

#include <algorithm>
#include <map>

#include "codec/channel_pruned_layer.h"
#include "codec/methods/think_method.h"
#include "codec/registry.h"
#include "core/capture.h"
#include "models/device.h"
#include "models/generate.h"
#include "models/llama_model.h"

using namespace varrate;

namespace {

const std::filesystem::path& reference_path() {
    static const std::filesystem::path p = test::oracle_dir() / "kvpress_wrappers.json";
    return p;
}

const nlohmann::json& reference() {
    static const nlohmann::json ref = test::read_json(reference_path());
    return ref;
}

LlamaModel& model() {
    return test::oracle_model(reference());
}

// The channels of [0, head_dim) not in a row of kept [G, n_kept]: per head, ascending.
std::vector<std::vector<int64_t>> pruned_of(const at::Tensor& kept, int64_t head_dim) {
    const at::Tensor k = kept.to(at::kCPU).contiguous();
    std::vector<std::vector<int64_t>> out(static_cast<size_t>(k.size(0)));
    for (int64_t g = 0; g < k.size(0); ++g) {
        std::vector<bool> keep(static_cast<size_t>(head_dim), false);
        for (int64_t i = 0; i < k.size(1); ++i) keep[static_cast<size_t>(k[g][i].item<int64_t>())] = true;
        for (int64_t c = 0; c < head_dim; ++c)
            if (!keep[static_cast<size_t>(c)]) out[static_cast<size_t>(g)].push_back(c);
    }
    return out;
}

std::vector<std::vector<int64_t>> rows(const at::Tensor& t) {
    const at::Tensor k = t.to(at::kCPU).contiguous();
    std::vector<std::vector<int64_t>> out(static_cast<size_t>(k.size(0)));
    for (int64_t g = 0; g < k.size(0); ++g)
        for (int64_t i = 0; i < k.size(1); ++i)
            out[static_cast<size_t>(g)].push_back(k[g][i].item<int64_t>());
    return out;
}

QString case_name(const nlohmann::json& c) {
    return QString("%1 %2 ratio %3 channels %4")
        .arg(QString::fromStdString(c["press"].get<std::string>()))
        .arg(QString::fromStdString(c["mode"].get<std::string>()))
        .arg(c.value("compression_ratio", 0.0))
        .arg(c.value("key_channel_compression_ratio", 0.0));
}

}  // namespace

class TestKvpressWrappers : public QObject {
    Q_OBJECT

  private Q_SLOTS:
    void initTestCase() {
        configure_threads(0);
        if (!std::filesystem::exists(reference_path()))
            QSKIP(qPrintable(
                QString::fromStdString("no " + reference_path().string() +
                                       ": run scripts/oracles/generate.sh --only kvpress-wrappers")));
        QVERIFY(reference()["generator"].contains("kvpress"));
        // (ThinK x 2 ratios + composed, CriticalKV, CriticalAdaKV, KeyRerotation, PerLayerCompression x 2
        // ratios or ratio lists) x 2 modes, and Finch x 2 ratios query-aware
        QCOMPARE(reference()["cases"].size(), size_t(26));
    }

    void channels_positions_and_answers_match() {
        const auto& ref = reference();
        LlamaModel& m = model();
        const int64_t G = m.config().n_kv_head, hd = m.config().head_dim;
        int checked_pairs = 0;
        for (const auto& c : ref["cases"]) {
            if (c["press"] != "ThinKPress" && c["press"] != "ComposedPress") continue;
            const auto [compressed, prompt] = test::kvpress_case_ids(reference(), c);
            const int64_t L = static_cast<int64_t>(compressed.size());
            QCOMPARE(L, c["n_tokens"].get<int64_t>());
            const bool composed = c["press"] == "ComposedPress";
            CodecSettings s;
            s.key_channel_ratio = c["key_channel_compression_ratio"].get<double>();
            if (composed) {
                // The kappa at which snap-think keeps kvpress's SnapKV count: those tokens with the pruned
                // keys.
                const auto n = static_cast<int64_t>(c["layers"][0]["kept"][0].size());
                const int64_t kept_ch = hd - ThinKMethod::pruned_channels(hd, s.key_channel_ratio);
                s.budget = static_cast<double>(channel_pruned_bytes(n, G, hd, kept_ch, 4)) /
                           static_cast<double>(L * G * 2 * hd * 4);
            }
            const std::string name = composed ? "snap-think" : "think";
            PrefillCapture cap = capture_prefill(m, compressed, s);
            auto method = make_method(name, s);
            const MethodAnalysis analysis(*method, cap);
            std::vector<LayerAllocation> alloc = analysis.allocate(s);
            QCOMPARE(alloc.size(), c["layers"].size());
            for (const auto& layer : c["layers"]) {
                const auto l = static_cast<size_t>(layer["layer"].get<int64_t>());
                const auto pruned = layer["pruned_channels"].get<std::vector<std::vector<int64_t>>>();
                QVERIFY2(pruned_of(alloc[l].kept_channels, hd) == pruned,
                         qPrintable(case_name(c) + QString(": layer %1 prunes other key channels").arg(l)));
                if (composed)
                    QVERIFY2(rows(alloc[l].kept) == layer["kept"].get<std::vector<std::vector<int64_t>>>(),
                             qPrintable(case_name(c) + QString(": layer %1 keeps other positions").arg(l)));
                checked_pairs += static_cast<int>(G);
            }
            std::vector<LayerDiagnostics> diagnostics;
            for (const LayerAllocation& a : alloc) diagnostics.push_back(a.diagnostics);
            std::vector<std::shared_ptr<const LayerPrefix>> stores;
            const std::vector<LayerKV> layers = analysis.materialise(alloc, diagnostics, &stores);
            GenerateOptions go;
            go.max_new_tokens = ref["answer_tokens"].get<int64_t>();
            go.stop_ids = {ref["eos_token_id"].get<int64_t>()};
            const auto want = c["answer_ids"].get<std::vector<int64_t>>();
            KVCache dense = cache_from_layers(m, layers, L);
            QVERIFY2(generate_greedy(m, dense, prompt, go).generated == want,
                     qPrintable(case_name(c) + ": answer differs from kvpress's"));
            KVCache held = cache_from_layers(m, layers, L, stores);
            QVERIFY2(generate_greedy(m, held, prompt, go).generated == want,
                     qPrintable(case_name(c) + ": answer through the channel-pruned store differs"));
            QCOMPARE(resident_bytes(layers, stores), [&] {
                int64_t b = 0;
                for (const LayerDiagnostics& d : diagnostics) b += d.stored_bytes;
                return b;
            }());
        }
        qInfo("key channels (and kept positions) identical to kvpress's in %d (case, layer, KV head) triples",
              checked_pairs);
    }

    // CriticalKV, CriticalAdaKV and KeyRerotation over SnapKV, and Finch: kept positions per layer and KV
    // head, and the answers (KeyRerotation's and Finch's decoded from the kept count's position: at the
    // context's end they differ).
    void eviction_wrappers_match() {
        const auto& ref = reference();
        LlamaModel& m = model();
        const std::map<std::string, std::string> methods = {{"CriticalKVPress", "criticalkv"},
                                                            {"CriticalAdaKVPress", "critical-adakv"},
                                                            {"KeyRerotationPress", "snapkv-rerotate"},
                                                            {"FinchPress", "finch"},
                                                            {"PerLayerCompressionPress", "snapkv-per-layer"}};
        int checked = 0, renumbering_matters = 0;
        for (const auto& c : ref["cases"]) {
            const auto it = methods.find(c["press"].get<std::string>());
            if (it == methods.end()) continue;
            const auto [compressed, prompt] = test::kvpress_case_ids(reference(), c);
            const auto L = static_cast<int64_t>(compressed.size());
            CodecSettings s;
            if (c.contains("compression_ratios")) {
                // kvpress's per-layer ratios r_l: the profile 1 - r_l at kappa = its mean (0.5, exact).
                s.budget = 0.5;
                for (double r : c["compression_ratios"].get<std::vector<double>>())
                    s.layer_profile.push_back(1.0 - r);
            } else {
                s.budget = 1.0 - c["compression_ratio"].get<double>();
            }
            const std::string& name = it->second;
            PrefillCapture cap = capture_prefill(m, compressed, s);
            // Finch's window is the question at the prefix's end (what compare's query-aware probe marks).
            for (LayerCapture& lc : cap.layers) lc.question_tokens = c.value("window", int64_t{0});
            auto method = make_method(name, s);
            const MethodAnalysis analysis(*method, cap);
            std::vector<LayerAllocation> alloc = analysis.allocate(s);
            QCOMPARE(alloc.size(), c["layers"].size());
            for (const auto& layer : c["layers"]) {
                const auto l = static_cast<size_t>(layer["layer"].get<int64_t>());
                const at::Tensor mask = alloc[l].diagnostics.kept.to(at::kCPU);  // [G, L] bool
                std::vector<std::vector<int64_t>> ours(static_cast<size_t>(mask.size(0)));
                for (int64_t g = 0; g < mask.size(0); ++g)
                    for (int64_t t = 0; t < L; ++t)
                        if (mask[g][t].item<bool>()) ours[static_cast<size_t>(g)].push_back(t);
                QVERIFY2(ours == layer["kept"].get<std::vector<std::vector<int64_t>>>(),
                         qPrintable(case_name(c) + QString(": layer %1 keeps other positions").arg(l)));
                checked += static_cast<int>(ours.size());
            }
            if (c["answer_ids"].is_null()) continue;
            const std::vector<LayerKV> layers = analysis.materialise(alloc);
            KVCache cache = cache_from_layers(m, layers, L, analysis.headwise_stores(alloc), name);
            GenerateOptions go;
            go.max_new_tokens = ref["answer_tokens"].get<int64_t>();
            go.stop_ids = {ref["eos_token_id"].get<int64_t>()};
            const auto want = c["answer_ids"].get<std::vector<int64_t>>();
            QVERIFY2(generate_greedy(m, cache, prompt, go).generated == want,
                     qPrintable(case_name(c) + ": answer differs from kvpress's"));
            if (method_traits(name).renumbers_positions) {
                QCOMPARE(cache.next_position(), cache.length(0));
                KVCache at_end = cache_from_layers(m, layers, L);
                renumbering_matters += generate_greedy(m, at_end, prompt, go).generated != want;
            }
        }
        // (3 presses x 2 modes + Finch query-aware + PerLayerCompression x 2 modes) x 2 ratios (lists) x 3
        // layers x 2 KV heads
        QCOMPARE(checked, 108);
        QVERIFY(renumbering_matters > 0);
    }

    // The store attends as dense attention does over the keys with the pruned channels zero, and gives them
    // back; it refuses channel lists that are not ascending.
    void store_attention_equals_dense() {
        at::manual_seed(5);
        const int64_t G = 2, g = 3, L = 40, hd = 16, n_q = 2, n_tail = 5;
        const at::Tensor keys = at::randn({G, L, hd}), values = at::randn({G, L, hd});
        const at::Tensor kept =
            at::tensor(std::vector<int64_t>{0, 3, 4, 9, 10, 15, 1, 2, 5, 6, 7, 8}).view({G, 6});
        const auto store = ThinKMethod::channel_store(0, keys, values, kept);
        const LayerKV dense = store->reconstruct();
        QVERIFY(at::equal(dense.keys, ThinKMethod::zero_pruned(keys, kept)));
        QVERIFY(at::equal(dense.values, values));
        const at::Tensor q = at::randn({G * g, n_q, hd});
        const at::Tensor tk = at::randn({G, n_tail, hd}), tv = at::randn({G, n_tail, hd});
        const at::Tensor got = store->attend(q, tk, tv, 0.25);
        // Dense: the prefix and the tail as one sequence, the queries its last n_q, causal among themselves.
        const at::Tensor all_k = at::cat({dense.keys, tk}, 1), all_v = at::cat({values, tv}, 1);
        const at::Tensor kk = all_k.repeat_interleave(g, 0), vv = all_v.repeat_interleave(g, 0);
        at::Tensor scores = at::bmm(q, kk.transpose(1, 2)) * 0.25;  // [H, n_q, L + n_tail]
        for (int64_t i = 0; i < n_q; ++i)
            scores.select(1, i).narrow(1, L + n_tail - n_q + i + 1, n_q - i - 1).fill_(-INFINITY);
        const at::Tensor want = at::bmm(scores.softmax(2), vv);
        QVERIFY2(at::allclose(got, want, 1e-5, 1e-6), "the store's attention differs from dense attention");
        QCOMPARE(store->resident_bytes(), channel_pruned_bytes(L, G, hd, 6, 4));
        ChannelPrunedLayer::Parts bad;
        bad.head_dim = hd;
        bad.values = values;
        bad.channels = kept.flip(1).to(at::kByte);
        bad.keys = keys.narrow(2, 0, 6).contiguous();
        EXPECT_ERROR(ChannelPrunedLayer{bad}, "ascending");
    }
};

QTEST_GUILESS_MAIN(TestKvpressWrappers)
#include "test_codec_kvpress_wrappers.moc"
