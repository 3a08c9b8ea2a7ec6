#include "tests/test_support.h"

// Our SnapKV vs kvpress's SnapKVPress (tests/data/oracles/kvpress_snapkv.json, made by
// scripts/oracles/generate.sh through kvpress's own pipeline code, versions in its "generator" field) on the
// llama31-gqa4 checkpoint: window 64, kernel 5, compression ratios 0.5 and 0.75 (kappa = 1 - ratio),
// query-agnostic (the 300-id context is compressed, the question follows at positions after it) and
// query-aware (context + question are compressed, a 3-id suffix follows). Per layer and KV head the kept
// positions are identical, the scores agree to float rounding, and the greedy answer decoded from the
// compressed cache is kvpress's. Known deviations by design: docs/DEVIATIONS.md.
#include <ATen/ATen.h>

#include <fstream>

#include "base/error.h"
#include "codec/footprint.h"
#include "codec/methods/snapkv_method.h"
#include "codec/salience.h"
#include "core/capture.h"
#include "models/device.h"
#include "models/generate.h"
#include "models/llama_model.h"

using namespace varrate;

namespace {

// kvpress computes the scores in fp32 too, in another operation order: they agree to a few float steps.
constexpr double kScoreRelTolerance = 2e-6;

using test::oracle_dir;
using test::read_json;

const nlohmann::json& reference() {
    static const nlohmann::json ref = read_json(oracle_dir() / "kvpress_snapkv.json");
    return ref;
}

LlamaModel& model() {
    return test::oracle_model(reference());
}

// kvpress's compression_ratio is the fraction removed; our kappa the fraction kept. 1 - ratio in double is
// what kvpress multiplies by, so the kept counts are the same (see ratio_to_kept_count).
CodecSettings settings_for(const nlohmann::json& c) {
    const auto& press = reference()["press"];
    CodecSettings s;
    s.obs_window = press["window_size"].get<int64_t>();
    s.pool_kernel = press["kernel_size"].get<int64_t>();
    s.budget = 1.0 - c["compression_ratio"].get<double>();
    return s;
}

std::vector<int64_t> ids_of(const nlohmann::json& key) {
    return key.get<std::vector<int64_t>>();
}

QString case_name(const nlohmann::json& c) {
    return QString("%1 ratio %2")
        .arg(QString::fromStdString(c["mode"].get<std::string>()))
        .arg(c["compression_ratio"].get<double>());
}

// Kept positions [G][n] (ascending) of a [G, n] int64 tensor.
std::vector<std::vector<int64_t>> rows_of(const at::Tensor& kept) {
    const at::Tensor k = kept.to(at::kCPU).contiguous();
    std::vector<std::vector<int64_t>> out(static_cast<size_t>(k.size(0)));
    for (int64_t g = 0; g < k.size(0); ++g) {
        const int64_t* p = k[g].data_ptr<int64_t>();
        out[g].assign(p, p + k.size(1));
    }
    return out;
}

// Positions of a [G, L] bool mask, per row.
std::vector<std::vector<int64_t>> rows_of_mask(const at::Tensor& mask) {
    const at::Tensor m = mask.to(at::kCPU).contiguous();
    std::vector<std::vector<int64_t>> out(static_cast<size_t>(m.size(0)));
    for (int64_t g = 0; g < m.size(0); ++g) {
        const bool* p = m[g].data_ptr<bool>();
        for (int64_t t = 0; t < m.size(1); ++t)
            if (p[t]) out[g].push_back(t);
    }
    return out;
}

// Compares our kept positions with kvpress's, head by head; an empty string when identical.
std::string compare_kept(const std::vector<std::vector<int64_t>>& ours, const nlohmann::json& layer) {
    const auto theirs = layer["kept"].get<std::vector<std::vector<int64_t>>>();
    if (ours.size() != theirs.size())
        return std::to_string(ours.size()) + " KV heads, kvpress " + std::to_string(theirs.size());
    for (size_t g = 0; g < ours.size(); ++g) {
        if (ours[g] == theirs[g]) continue;
        std::vector<int64_t> only_ours, only_theirs;
        std::set_difference(ours[g].begin(), ours[g].end(), theirs[g].begin(), theirs[g].end(),
                            std::back_inserter(only_ours));
        std::set_difference(theirs[g].begin(), theirs[g].end(), ours[g].begin(), ours[g].end(),
                            std::back_inserter(only_theirs));
        auto list = [](const std::vector<int64_t>& v) {
            std::string s;
            for (int64_t x : v) s += (s.empty() ? "" : ",") + std::to_string(x);
            return s;
        };
        return "layer " + std::to_string(layer["layer"].get<int64_t>()) + " KV head " + std::to_string(g) +
               ": kept " + std::to_string(ours[g].size()) + " (kvpress " + std::to_string(theirs[g].size()) +
               "), only ours {" + list(only_ours) + "}, only kvpress {" + list(only_theirs) +
               "}; kvpress's gap at the cut " + layer["cut_gap"][g].dump();
    }
    return {};
}

}  // namespace

class TestKvpressOracle : public QObject {
    Q_OBJECT

  private Q_SLOTS:
    void initTestCase() {
        configure_threads(0);
        const auto& ref = reference();
        QCOMPARE(ref["press"]["class"].get<std::string>(), std::string("SnapKVPress"));
        QVERIFY(ref["generator"].contains("kvpress"));
        QCOMPARE(ref["cases"].size(), size_t(4));
    }

    // kvpress keeps max(1, int(L * (1 - ratio))) per KV head; ours int(L * kappa). With kappa = 1 - ratio
    // they are the same count wherever ours is feasible (at least the window). A kappa written as the
    // decimal complement can differ by one: 1 - 0.9 is 0.09999999999999998 in double, so kvpress keeps 29 of
    // 300 at ratio 0.9 where kappa 0.1 keeps 30 (docs/DEVIATIONS.md).
    void ratio_to_kept_count() {
        int64_t compared = 0, infeasible = 0;
        for (const auto& row : reference()["n_kept_table"]) {
            const int64_t n = row["n_tokens"].get<int64_t>(), expected = row["n_kept"].get<int64_t>();
            CodecSettings s;
            s.obs_window = 64;
            s.budget = 1.0 - row["compression_ratio"].get<double>();
            if (expected < s.obs_window) {
                // kvpress would then keep part of the window; we refuse the budget instead.
                QVERIFY(!test::error_message([&] { snapkv_kept_tokens(s, n); }).empty());
                ++infeasible;
                continue;
            }
            QCOMPARE(snapkv_kept_tokens(s, n), expected);
            ++compared;
        }
        QVERIFY(compared >= 30);
        qInfo("kept counts equal to kvpress's in %ld cases; %ld below the window are refused",
              static_cast<long>(compared), static_cast<long>(infeasible));
        CodecSettings decimal;
        decimal.obs_window = 16;
        decimal.budget = 0.1;
        QCOMPARE(snapkv_kept_tokens(decimal, 300), int64_t(30));
        bool found = false;
        for (const auto& row : reference()["n_kept_table"])
            if (row["n_tokens"] == 300 && row["compression_ratio"] == 0.9) {
                QCOMPARE(row["n_kept"].get<int64_t>(), int64_t(29));
                found = true;
            }
        QVERIFY(found);
    }

    // Per layer and KV head: our scores within kScoreRelTolerance of kvpress's and the same kept positions,
    // through the shared capture path (capture, analyse, allocate) and through the in-prefill path.
    void kept_positions_match() {
        const auto& ref = reference();
        LlamaModel& m = model();
        for (const auto& c : ref["cases"]) {
            const auto [compressed, prompt] = test::kvpress_case_ids(reference(), c);
            const CodecSettings s = settings_for(c);
            QCOMPARE(static_cast<int64_t>(compressed.size()), c["n_tokens"].get<int64_t>());
            QCOMPARE(snapkv_kept_tokens(s, static_cast<int64_t>(compressed.size())),
                     c["n_kept"].get<int64_t>());

            const PrefillCapture cap = capture_prefill(m, compressed, s);
            SnapKVMethod method(s);
            const MethodAnalysis analysis(method, cap);
            const std::vector<LayerAllocation> alloc = analysis.allocate(s);
            QCOMPARE(alloc.size(), c["layers"].size());

            KVCache cache = m.new_cache();
            SnapKVMethod in_prefill_method(s);
            const InPrefillResult in_prefill = compress_in_prefill(m, in_prefill_method, compressed, cache);

            double worst_rel = 0, smallest_gap = 1e300;
            for (const auto& layer : c["layers"]) {
                const int64_t l = layer["layer"].get<int64_t>();
                // Scores: ours [G, L - w] against kvpress's (its window padding left out).
                const at::Tensor ours =
                    snapkv_scores(cap.layers[l], s.obs_window, s.pool_kernel).to(at::kDouble);
                const auto theirs =
                    ref["scores"][c["mode"].get<std::string>()][l].get<std::vector<std::vector<double>>>();
                QCOMPARE(ours.size(0), static_cast<int64_t>(theirs.size()));
                for (size_t g = 0; g < theirs.size(); ++g) {
                    QCOMPARE(ours.size(1), static_cast<int64_t>(theirs[g].size()));
                    const at::Tensor t = at::tensor(theirs[g], at::kDouble);
                    const double rel = ((ours[g] - t).abs().max() / t.abs().max()).item<double>();
                    worst_rel = std::max(worst_rel, rel);
                }
                for (const auto& gap : layer["cut_gap"])
                    if (gap.is_number()) smallest_gap = std::min(smallest_gap, gap.get<double>());
                // No tie at kvpress's cut, so the kept set does not depend on how ties are broken
                // (torch.topk's order there, the earlier position here).
                for (const auto& ties : layer["cut_ties"]) QCOMPARE(ties.get<int64_t>(), int64_t(1));

                const std::string err = compare_kept(rows_of(alloc[l].kept), layer);
                QVERIFY2(err.empty(),
                         qPrintable(case_name(c) + " (capture): " + QString::fromStdString(err)));
                const std::string err2 = compare_kept(rows_of_mask(in_prefill.layers[l].kept), layer);
                QVERIFY2(err2.empty(),
                         qPrintable(case_name(c) + " (in prefill): " + QString::fromStdString(err2)));
            }
            qInfo(
                "%s: kept positions identical in %zu layers; scores within %.2g (relative) of kvpress's; "
                "smallest kvpress score gap at a cut %.3g",
                qPrintable(case_name(c)), c["layers"].size(), worst_rel, smallest_gap);
            QVERIFY2(worst_rel < kScoreRelTolerance,
                     qPrintable(QString("scores differ by %1 (relative)").arg(worst_rel)));
        }
    }

    // bf16 is a known deviation (docs/DEVIATIONS.md): kvpress computes the window attention, its mean and the
    // pooling in bf16, where many scores round to the same value (here 5 to 9 tie at every cut, broken by
    // torch.topk's order), while we score in fp32 from the same bf16 keys and queries. The kept sets then
    // differ near the cut only: both keep the window, and most positions agree.
    void bf16_differs_near_the_cut_only() {
        const nlohmann::json& c = reference()["bf16_case"];
        QCOMPARE(c["dtype"].get<std::string>(), std::string("bf16"));
        RuntimeOptions o;
        o.dtype = at::kBFloat16;
        const auto m = LlamaModel::load(oracle_dir() / reference()["model"].get<std::string>(), o);
        const auto [compressed, prompt] = test::kvpress_case_ids(reference(), c);
        const CodecSettings s = settings_for(c);
        const PrefillCapture cap = capture_prefill(*m, compressed, s);
        SnapKVMethod method(s);
        const MethodAnalysis analysis(method, cap);
        const std::vector<LayerAllocation> alloc = analysis.allocate(s);
        const int64_t n_tok = c["n_tokens"].get<int64_t>(), n_kept = c["n_kept"].get<int64_t>();
        int64_t same = 0, total = 0, worst_head = 0;
        for (const auto& layer : c["layers"]) {
            const int64_t l = layer["layer"].get<int64_t>();
            const auto ours = rows_of(alloc[l].kept);
            const auto theirs = layer["kept"].get<std::vector<std::vector<int64_t>>>();
            QCOMPARE(ours.size(), theirs.size());
            for (size_t g = 0; g < ours.size(); ++g) {
                QCOMPARE(static_cast<int64_t>(theirs[g].size()), n_kept);
                for (int64_t t = n_tok - s.obs_window; t < n_tok; ++t)
                    QVERIFY(std::binary_search(theirs[g].begin(), theirs[g].end(), t));
                std::vector<int64_t> common;
                std::set_intersection(ours[g].begin(), ours[g].end(), theirs[g].begin(), theirs[g].end(),
                                      std::back_inserter(common));
                same += static_cast<int64_t>(common.size());
                total += n_kept;
                worst_head = std::max(worst_head, n_kept - static_cast<int64_t>(common.size()));
            }
        }
        qInfo("bf16, %s: %ld of %ld kept positions shared with kvpress; at most %ld differ in one head",
              qPrintable(case_name(c)), static_cast<long>(same), static_cast<long>(total),
              static_cast<long>(worst_head));
        QVERIFY2(same * 100 >= total * 97, "bf16 kept sets share less than 97 % with kvpress's");
    }

    // The greedy answer decoded from our compressed cache (positions continuing after the compressed ids,
    // as kvpress's pipeline does) is kvpress's answer.
    void answers_match() {
        const auto& ref = reference();
        LlamaModel& m = model();
        const int64_t eos = ref["eos_token_id"].get<int64_t>();
        for (const auto& c : ref["cases"]) {
            const auto [compressed, prompt] = test::kvpress_case_ids(reference(), c);
            const CodecSettings s = settings_for(c);
            const PrefillCapture cap = capture_prefill(m, compressed, s);
            SnapKVMethod method(s);
            const MethodAnalysis analysis(method, cap);
            std::vector<LayerAllocation> alloc = analysis.allocate(s);
            const std::vector<LayerKV> layers = analysis.materialise(alloc);
            KVCache cache = cache_from_layers(m, layers, static_cast<int64_t>(compressed.size()));
            QCOMPARE(cache.length(0), c["n_kept"].get<int64_t>());
            GenerateOptions go;
            go.max_new_tokens = ref["answer_tokens"].get<int64_t>();
            go.stop_ids = {eos};
            const GenerateResult r = generate_greedy(m, cache, prompt, go);
            const auto expected = ids_of(c["answer_ids"]);
            QVERIFY2(r.generated == expected, qPrintable(case_name(c) + ": answer differs from kvpress's"));
        }
        // And without compression, the full cache's answer.
        KVCache full = m.new_cache();
        GenerateOptions go;
        go.max_new_tokens = ref["answer_tokens"].get<int64_t>();
        go.stop_ids = {eos};
        std::vector<int64_t> all = ids_of(ref["context_ids"]);
        m.forward(all, full);
        std::vector<int64_t> prompt = ids_of(ref["question_ids"]);
        const auto suffix = ids_of(ref["suffix_ids"]);
        prompt.insert(prompt.end(), suffix.begin(), suffix.end());
        QCOMPARE(generate_greedy(m, full, prompt, go).generated, ids_of(ref["full_answer_ids"]));
    }
};

QTEST_GUILESS_MAIN(TestKvpressOracle)
#include "test_codec_kvpress_oracle.moc"
