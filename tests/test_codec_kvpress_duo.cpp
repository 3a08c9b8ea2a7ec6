#include "tests/test_support.h"

// Our duo-attention against kvpress's DuoAttentionPress with on_the_fly_scoring
// (tests/data/oracles/kvpress_duo.json, made by scripts/oracles/generate.sh --only kvpress-duo through
// kvpress's own press, scoring function and pipeline, versions in its "generator" field; its head scores are
// computed on the compressed ids, as ours are) on the llama31-gqa4 checkpoint with a 700-id context,
// query-agnostic and query-aware, 2 and 4 of the 6 KV heads streaming. The head scores agree, the same heads
// stream, per layer and KV head the kept positions are identical, and the greedy answer decoded through our
// head-wise store is kvpress's where its pipeline decodes one (query-aware; query-agnostic it cannot mask on
// this checkpoint: "Could not find fake keys").
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "codec/methods/duo_attention_method.h"
#include "codec/registry.h"
#include "core/capture.h"
#include "models/device.h"
#include "models/generate.h"
#include "models/llama_model.h"

using namespace varrate;

namespace {

const std::filesystem::path& reference_path() {
    static const std::filesystem::path p = test::oracle_dir() / "kvpress_duo.json";
    return p;
}

const nlohmann::json& reference() {
    static const nlohmann::json ref = test::read_json(reference_path());
    return ref;
}

QString case_name(const nlohmann::json& c) {
    return QString("DuoAttentionPress %1, %2 heads streaming")
        .arg(QString::fromStdString(c["mode"].get<std::string>()))
        .arg(c["streaming_heads"].get<int64_t>());
}

// The kappa at which `streaming` of `heads` heads stream: exactly the entries that leaves.
double kappa_for(int64_t streaming, int64_t heads, int64_t L) {
    const CodecSettings s;  // kvpress's 128 sink and 256 recent tokens
    const int64_t dropped = streaming * (L - s.streaming_sink - s.streaming_recent);
    return static_cast<double>(heads * L - dropped) / static_cast<double>(heads * L);
}

}  // namespace

class TestKvpressDuo : public QObject {
    Q_OBJECT

  private Q_SLOTS:
    void initTestCase() {
        configure_threads(0);
        if (!std::filesystem::exists(reference_path()))
            QSKIP(qPrintable(QString::fromStdString("no " + reference_path().string() +
                                                    ": run scripts/oracles/generate.sh --only kvpress-duo")));
        QVERIFY(reference()["generator"].contains("kvpress"));
        QCOMPARE(reference()["cases"].size(), size_t(4));  // 2 modes x 2 streaming counts
    }

    void scores_heads_positions_and_answers_match() {
        const auto& ref = reference();
        LlamaModel& m = test::oracle_model(ref);
        const int64_t G = m.config().n_kv_head, n_layer = m.config().n_layer;
        int checked = 0, answers = 0;
        double worst_score = 0;
        for (const auto& c : ref["cases"]) {
            QCOMPARE(c["sink_size"].get<int64_t>(), CodecSettings{}.streaming_sink);
            QCOMPARE(c["recent_size"].get<int64_t>(), CodecSettings{}.streaming_recent);
            const auto [compressed, prompt] = test::kvpress_case_ids(ref, c);
            const auto L = static_cast<int64_t>(compressed.size());
            QCOMPARE(L, c["n_tokens"].get<int64_t>());
            CodecSettings s;
            s.budget = kappa_for(c["streaming_heads"].get<int64_t>(), n_layer * G, L);
            PrefillCapture cap = capture_prefill(m, compressed, s);
            for (const LayerCapture& lc : cap.layers) {
                const at::Tensor ours = duo_attention_head_scores(lc).to(at::kCPU);  // [G]
                for (int64_t g = 0; g < G; ++g) {
                    const double want = c["head_scores"][lc.layer][g].get<double>();
                    worst_score = std::max(worst_score, std::abs(ours[g].item<double>() - want));
                }
            }
            auto method = make_method("duo-attention", s);
            const MethodAnalysis analysis(*method, cap);
            std::vector<LayerAllocation> alloc = analysis.allocate(s);
            QCOMPARE(static_cast<int64_t>(alloc.size()), n_layer);
            for (const auto& layer : c["layers"]) {
                const auto l = static_cast<size_t>(layer["layer"].get<int64_t>());
                const at::Tensor mask = alloc[l].diagnostics.kept.to(at::kCPU);  // [G, L] bool
                std::vector<std::vector<int64_t>> ours(static_cast<size_t>(G));
                for (int64_t g = 0; g < G; ++g) {
                    for (int64_t t = 0; t < L; ++t)
                        if (mask[g][t].item<bool>()) ours[static_cast<size_t>(g)].push_back(t);
                    const bool streams = static_cast<int64_t>(ours[static_cast<size_t>(g)].size()) < L;
                    QVERIFY2(
                        streams == c["streaming"][l][g].get<bool>(),
                        qPrintable(case_name(c) + QString(": layer %1 KV head %2 streams: %3 (kvpress: %4)")
                                                      .arg(l)
                                                      .arg(g)
                                                      .arg(streams)
                                                      .arg(!streams)));
                }
                QVERIFY2(ours == layer["kept"].get<std::vector<std::vector<int64_t>>>(),
                         qPrintable(case_name(c) + QString(": layer %1 keeps other positions").arg(l)));
                checked += static_cast<int>(G);
            }
            double footprint = 0;
            for (const LayerAllocation& a : alloc) footprint += a.diagnostics.footprint / n_layer;
            QVERIFY2(footprint <= s.budget + 1e-9, qPrintable(case_name(c) + ": footprint above kappa"));
            if (c["answer_ids"].is_null()) continue;
            const std::vector<LayerKV> layers = analysis.materialise(alloc);
            KVCache cache = cache_from_layers(m, layers, L, analysis.headwise_stores(alloc), "duo-attention");
            GenerateOptions go;
            go.max_new_tokens = ref["answer_tokens"].get<int64_t>();
            go.stop_ids = {ref["eos_token_id"].get<int64_t>()};
            QVERIFY2(generate_greedy(m, cache, prompt, go).generated ==
                         c["answer_ids"].get<std::vector<int64_t>>(),
                     qPrintable(case_name(c) + ": answer differs from kvpress's"));
            ++answers;
        }
        // kvpress computes the means and the attention in fp32 too; its scores are recorded to 9 digits.
        QVERIFY2(worst_score < 1e-6, qPrintable(QString("head scores differ by %1").arg(worst_score)));
        QCOMPARE(checked, 24);  // 4 cases x 3 layers x 2 KV heads
        QCOMPARE(answers, 2);
        qInfo(
            "kept positions identical in %d (case, layer, KV head) triples; head scores within %.2g; %d "
            "answers",
            checked, worst_score, answers);
    }

    // Below (sink + recent) / L no number of streaming heads fits: refused, naming the smallest kappa.
    void infeasible_budget_names_the_smallest_kappa() {
        const auto& ref = reference();
        LlamaModel& m = test::oracle_model(ref);
        const auto& c = ref["cases"][0];
        const auto [compressed, prompt] = test::kvpress_case_ids(ref, c);
        CodecSettings s;
        s.budget = 0.5;  // 384 of 700 tokens is 0.5486
        PrefillCapture cap = capture_prefill(m, compressed, s);
        auto method = make_method("duo-attention", s);
        const MethodAnalysis analysis(*method, cap);
        EXPECT_ERROR(analysis.allocate(s), "smallest feasible kappa is 0.5486");
    }

    // The streaming settings: shorter sinks and recent windows make a kappa that kvpress's 128 + 256 refuses
    // feasible; a streaming head then keeps exactly those tokens, the same heads (by score) stream first, and
    // the allocation changes with them alone, without a new analysis.
    void streaming_settings_set_what_a_streaming_head_keeps() {
        const auto& ref = reference();
        LlamaModel& m = test::oracle_model(ref);
        const auto& c = ref["cases"][0];
        const auto [compressed, prompt] = test::kvpress_case_ids(ref, c);
        const auto L = static_cast<int64_t>(compressed.size());
        CodecSettings s;
        s.budget = 0.3;
        s.streaming_sink = 8;
        s.streaming_recent = 32;
        PrefillCapture cap = capture_prefill(m, compressed, s);
        auto method = make_method("duo-attention", s);
        const MethodAnalysis analysis(*method, cap);
        const std::vector<LayerAllocation> alloc = analysis.allocate(s);
        int64_t kept = 0;
        std::set<std::pair<int64_t, int64_t>> streaming;  // (layer, KV head)
        for (size_t l = 0; l < alloc.size(); ++l) {
            const at::Tensor mask = alloc[l].diagnostics.kept.to(at::kCPU);  // [G, L]
            for (int64_t g = 0; g < mask.size(0); ++g) {
                const int64_t n = mask[g].sum().item<int64_t>();
                kept += n;
                if (n == L) continue;
                streaming.insert({static_cast<int64_t>(l), g});
                QCOMPARE(n, s.streaming_sink + s.streaming_recent);
                QVERIFY(mask[g].narrow(0, 0, s.streaming_sink).all().item<bool>());
                QVERIFY(mask[g].narrow(0, L - s.streaming_recent, s.streaming_recent).all().item<bool>());
            }
        }
        // The fewest streaming heads within kappa: 0.3 of 6 x 700 entries keeps 1260, each streaming head
        // drops 660, so 5 stream (4 would keep 1560): the 5 lowest of kvpress's head scores.
        std::vector<std::pair<double, std::pair<int64_t, int64_t>>> by_score;
        for (int64_t l = 0; l < static_cast<int64_t>(alloc.size()); ++l)
            for (int64_t g = 0; g < 2; ++g)
                by_score.push_back({c["head_scores"][l][g].get<double>(), {l, g}});
        std::sort(by_score.begin(), by_score.end());
        std::set<std::pair<int64_t, int64_t>> want;
        for (size_t i = 0; i < 5; ++i) want.insert(by_score[i].second);
        QVERIFY(streaming == want);
        // A streaming head that keeps nothing is refused by name.
        s.streaming_sink = s.streaming_recent = 0;
        EXPECT_ERROR(analysis.allocate(s), "--streaming-sink 0 and --streaming-recent 0 keep none");
        QVERIFY(static_cast<double>(kept) <= s.budget * static_cast<double>(6 * L));
    }
};

QTEST_GUILESS_MAIN(TestKvpressDuo)
#include "test_codec_kvpress_duo.moc"
