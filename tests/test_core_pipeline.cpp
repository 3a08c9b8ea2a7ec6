// The comparison pipeline on real weights (stories260k): query-aware and query-agnostic runs, reuse of one
// compression for several questions, JSON/rank-log consistency, answer checking, perplexity (VarRate against
// flat on the committed eval text) and basis files; the distortion measures against plain references.
#include "tests/test_support.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>

#include "base/error.h"
#include "base/file_io.h"
#include "codec/registry.h"
#include "codec/synthetic.h"
#include "core/capture.h"
#include "core/compare.h"
#include "core/prompt.h"
#include "core/session.h"
#include "models/generate.h"

using namespace varrate;

namespace {

// A basis calibrated on the committed calibration texts (as scripts/eval-stories-ppl.sh does), so that runs
// with it are not self-calibrated and their texts are not the ones compressed.
std::shared_ptr<const Basis> calibration_texts_basis(const Session& session) {
    const auto texts = test::source_dir() / "resources/eval/stories260k";
    std::vector<std::vector<int64_t>> ids;
    for (const char* f : {"calib_a.txt", "calib_b.txt"})
        ids.push_back(session.tokenizer().encode(read_text_file(texts / f), true));
    return std::make_shared<const Basis>(
        session.calibrate(ids, test::small_codec_settings(0.3), 64, /*self_calibrated=*/false));
}

// The uncompressed model's greedy reply to "What did Sara find?" about the two stories is "Dad, what is that
// your": this expected answer matches it once trimmed and compared case-insensitively.
const char* const kSaraFound = "  What is THAT ";

// ||o - o^|| / ||o|| of the last w window queries, averaged over heads and queries, written out in double:
// query i sits at position L - w + i and attends to the entries of its head's KV group at positions up to
// its own (`pos` [G, n], the positions of the entries of `keys`/`values`).
double reference_attn_error(const LayerCapture& cap, const LayerKV& kv, const at::Tensor& pos, int64_t w) {
    const int64_t H = cap.window_queries.size(0), G = cap.keys.size(0), L = cap.keys.size(1);
    const int64_t hd = cap.keys.size(2), w_cap = cap.window_queries.size(1);
    const at::Tensor all = at::arange(L, at::TensorOptions().dtype(at::kLong)).unsqueeze(0).expand({G, L});
    auto attend = [&](const at::Tensor& k, const at::Tensor& v, const at::Tensor& p, int64_t h, int64_t i) {
        const int64_t g = h / (H / G);
        const at::Tensor q = cap.window_queries[h][w_cap - w + i].to(at::kDouble);
        const at::Tensor logits = k[g].to(at::kDouble).mv(q) / std::sqrt(static_cast<double>(hd));
        const at::Tensor visible = p[g] <= L - w + i;
        const at::Tensor a = at::softmax(logits.masked_fill(visible.logical_not(), -INFINITY), 0);
        return a.unsqueeze(0).mm(v[g].to(at::kDouble)).squeeze(0);  // [hd]
    };
    double sum = 0;
    for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < w; ++i) {
            const at::Tensor o = attend(cap.keys, cap.values, all, h, i);
            const at::Tensor o_hat = attend(kv.keys, kv.values, pos, h, i);
            sum += ((o - o_hat).norm() / o.norm()).item<double>();
        }
    return sum / static_cast<double>(H * w);
}

}  // namespace

class TestPipeline : public QObject {
    Q_OBJECT
    Session* session_ = nullptr;
    std::unique_ptr<Session> calibrated_;  // with calibration_texts_basis()
    std::string context_;

    void need_session() {
        if (session_) return;
        session_ = test::shared_fixture_session();
        if (!session_) return;
        // Two of the model's own stories: ~400 tokens of in-distribution text.
        const auto greedy = read_json_file(test::fixture("stories260k") / "expected_greedy.json");
        context_ = greedy["cases"][0]["text"].get<std::string>() + "\n" +
                   greedy["cases"][2]["text"].get<std::string>();
    }

    Session& calibrated_session() {
        if (!calibrated_) {
            calibrated_ = test::open_fixture_session();
            calibrated_->set_basis(calibration_texts_basis(*calibrated_), "calibration texts");
        }
        return *calibrated_;
    }

    CompareRequest request(const std::vector<std::string>& methods, CompressionMode mode,
                           const std::vector<std::string>& questions) {
        CompareRequest r;
        r.context = context_;
        r.methods = methods;
        r.mode = mode;
        r.questions = questions;
        r.settings = test::small_codec_settings(0.3);
        r.max_new_tokens = 12;
        return r;
    }

    // Uncompressed greedy generation from `ids`, as run_compare's requests decode (12 tokens, stop at EOS).
    std::vector<int64_t> plain_greedy(const std::vector<int64_t>& ids) {
        KVCache cache = session_->model().new_cache();
        GenerateOptions go;
        go.max_new_tokens = 12;
        go.stop_ids = session_->model().config().eos_token_ids;
        return generate_greedy(session_->model(), cache, ids, go).generated;
    }

  private Q_SLOTS:
    // The attention-output error of an evicting and of a reconstructing method against the loops above, with
    // the full cache's output computed here or handed in (as the shared capture does); the full cache itself
    // has none.
    void attentionOutputErrorMatchesReference() {
        SyntheticShape shape;
        shape.n_kv_head = 2;
        shape.n_head = 6;
        shape.head_dim = 16;
        shape.n_tokens = 300;
        const LayerCapture cap = synthetic_capture(shape, 19);
        CodecSettings s = test::small_codec_settings(0.4);
        s.window = 64;
        s.obs_window = 48;  // fewer than the 64 captured window queries
        auto basis = random_basis(1, 64, 64, s.stride, s.anchors, 4);
        const at::Tensor all =
            at::arange(300, at::TensorOptions().dtype(at::kLong)).unsqueeze(0).expand({2, 300});
        for (const char* name : {"full", "snapkv", "varrate"}) {
            auto method = make_method(name, s, std::string(name) == "varrate" ? basis : nullptr);
            const auto analysis = method->analyse(cap);
            LayerAllocation alloc = method->allocate(*analysis, s);
            const LayerKV kv = method->materialise(cap, *analysis, alloc);
            const double want = reference_attn_error(cap, kv, alloc.kept.defined() ? alloc.kept : all, 48);
            LayerDiagnostics d = alloc.diagnostics;
            add_distortion(d, cap, kv, alloc.kept, distortion_reference(cap, 48, s.pool_kernel));
            QVERIFY2(std::abs(d.attn_output_error - want) < 1e-5,
                     qPrintable(QString("%1: %2 vs %3").arg(name).arg(d.attn_output_error).arg(want)));
            if (std::string(name) == "full")
                QCOMPARE(want, 0.0);
            else
                QVERIFY(want > 1e-3);
        }
    }

    void full_equals_plain_generation() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        need_session();
        const std::string q = "What did Sara find?";
        const PromptParts parts = build_prompt(session_->tokenizer(), context_, q, false);
        std::vector<int64_t> ids = parts.context_ids;
        ids.insert(ids.end(), parts.question_ids.begin(), parts.question_ids.end());
        const auto plain = plain_greedy(ids);
        for (auto mode : {CompressionMode::QueryAware, CompressionMode::QueryAgnostic}) {
            const CompareResult r = run_compare(*session_, request({"full"}, mode, {q}));
            QCOMPARE(r.runs.size(), size_t{1});
            QCOMPARE(r.runs[0].answer_ids.at(0), plain);
            QCOMPARE(r.runs[0].footprint_fraction, 1.0);
        }
    }

    // An answer prefix is decoded after the (compressed) prompt, never compressed itself: "full" equals plain
    // generation from context + question + prefix, and query-aware methods compress context + question only.
    void answer_prefix_follows_the_compressed_prompt() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        need_session();
        const std::string q = "What did Sara find?", prefix = "Sara found a";
        const PromptParts parts = build_prompt(session_->tokenizer(), context_, q, false, prefix);
        QVERIFY(!parts.prefix_ids.empty());
        QCOMPARE(parts.prefix_ids, session_->tokenizer().encode(" " + prefix, false));
        std::vector<int64_t> ids = parts.context_ids;
        ids.insert(ids.end(), parts.question_ids.begin(), parts.question_ids.end());
        const size_t prompt_without_prefix = ids.size();
        ids.insert(ids.end(), parts.prefix_ids.begin(), parts.prefix_ids.end());
        const auto plain = plain_greedy(ids);
        for (auto mode : {CompressionMode::QueryAware, CompressionMode::QueryAgnostic}) {
            CompareRequest req = request({"full", "snapkv"}, mode, {q});
            req.answer_prefixes = {prefix};
            const CompareResult r = run_compare(*session_, req);
            QCOMPARE(r.runs.at(0).answer_ids.at(0), plain);
            QCOMPARE(r.runs.at(1).context_ids.size(),
                     mode == CompressionMode::QueryAware ? prompt_without_prefix : parts.context_ids.size());
            QCOMPARE(to_json(r, req)["answer_prefixes"], nlohmann::json(req.answer_prefixes));
        }
        CompareRequest bad = request({"full"}, CompressionMode::QueryAware, {q});
        bad.answer_prefixes = {prefix, prefix};
        QVERIFY_EXCEPTION_THROWN(run_compare(*session_, bad), Error);
    }

    void query_agnostic_reuse_equals_separate_compressions() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        need_session();
        const std::vector<std::string> methods = {"varrate", "flat", "snapkv"};
        const std::string q1 = "What did Sara find?", q2 = "Who went to the park?";
        Session& session = calibrated_session();
        const CompareResult both =
            run_compare(session, request(methods, CompressionMode::QueryAgnostic, {q1, q2}));
        const CompareResult one =
            run_compare(session, request(methods, CompressionMode::QueryAgnostic, {q1}));
        const CompareResult two =
            run_compare(session, request(methods, CompressionMode::QueryAgnostic, {q2}));
        for (size_t m = 0; m < methods.size(); ++m) {
            QCOMPARE(both.runs[m].answer_ids.size(), size_t{2});
            QCOMPARE(both.runs[m].answer_ids[0], one.runs[m].answer_ids[0]);
            QCOMPARE(both.runs[m].answer_ids[1], two.runs[m].answer_ids[0]);
        }
    }

    // With a basis calibrated on other texts: footprints at the budget, answers checked against the expected
    // ones (one that the uncompressed model gets right, one that no method can match).
    void compare_json_is_consistent() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        need_session();
        Session& session = calibrated_session();
        const std::vector<std::string> questions = {"What did Sara find?", "Who went to the park?"};
        for (auto mode : {CompressionMode::QueryAware, CompressionMode::QueryAgnostic}) {
            CompareRequest req = request({"full", "varrate", "flat", "snapkv"}, mode, questions);
            // The uncompressed reply to the first question matches kSaraFound; no reply names a purple
            // elephant.
            req.answers = {kSaraFound, "a purple elephant"};
            const CompareResult r = run_compare(session, req);
            const nlohmann::json j = to_json(r, req);
            QCOMPARE(j["methods"].size(), size_t{4});
            const int64_t n_layer = session.model().config().n_layer;
            const int64_t L = static_cast<int64_t>(r.runs[0].context_ids.size());
            for (const auto& m : j["methods"]) {
                for (const char* key :
                     {"method", "budget", "footprint_fraction", "stored_bytes", "full_bytes", "answers",
                      "correct", "prefill_ms", "compress_ms", "self_calibrated", "layers"})
                    QVERIFY2(m.contains(key), key);
                QCOMPARE(static_cast<int64_t>(m["layers"].size()), n_layer);
                const std::string name = m["method"];
                const QString where = QString("%1 %2").arg(name.c_str()).arg(to_string(mode).c_str());
                // The full cache: every layer's L tokens at D fp32 scalars.
                QCOMPARE(m["full_bytes"].get<int64_t>(), n_layer * L * session.joint_dim() * 4);
                QCOMPARE(m["correct"].size(), size_t{2});
                QVERIFY2(!m["correct"][1].get<bool>(), qPrintable(where + ": a purple elephant matched"));
                if (name == "full")
                    QVERIFY2(m["correct"][0].get<bool>(),
                             qPrintable(where + ": " + QString::fromStdString(m["answers"][0].dump())));
                const double fp = m["footprint_fraction"];
                if (name == "varrate" || name == "flat") {
                    QVERIFY2(fp <= 0.3 + 1e-12 && fp >= 0.299,
                             qPrintable(where + QString(" footprint %1").arg(fp)));
                    QVERIFY(!m["self_calibrated"].get<bool>());
                    for (const auto& l : m["layers"]) {
                        QCOMPARE(l["sum_ranks"], l["budget_B"]);
                        QVERIFY(l["min_rank"].get<int64_t>() >= 4);
                        QVERIFY(l["max_rank"].get<int64_t>() <= 64);
                        QCOMPARE(l["n_exact"].get<int64_t>() + l["n_coded"].get<int64_t>(), L);
                    }
                } else if (name == "snapkv") {
                    QCOMPARE(fp, std::floor(static_cast<double>(L) * 0.3) / static_cast<double>(L));
                } else {
                    QCOMPARE(fp, 1.0);
                }
            }
            // Uncompressed and compressed runs see the same tokens.
            for (const auto& run : r.runs) QCOMPARE(run.context_ids, r.runs[0].context_ids);
        }
    }

    void rank_log_has_a_row_per_method_layer_position() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        need_session();
        const CompareResult r =
            run_compare(calibrated_session(),
                        request({"varrate", "snapkv"}, CompressionMode::QueryAgnostic, {"Who is Sara?"}));
        const std::string csv = rank_log_csv(r, session_->tokenizer());
        QVERIFY(csv.rfind("method,layer,position,token_id,token_text,salience,rank,exact,rel_error\n", 0) ==
                0);
        const int64_t rows = std::count(csv.begin(), csv.end(), '\n') - 1;
        const int64_t L = static_cast<int64_t>(r.runs[0].context_ids.size());
        QCOMPARE(rows, 2 * session_->model().config().n_layer * L);
        // Anchors and the window are exact at full width in every VarRate layer.
        const auto& d = r.runs[0].layers[0];
        QVERIFY(d.exact[0].item<bool>());
        QVERIFY(d.exact[L - 1].item<bool>());
        QCOMPARE(d.rank[0].item<int64_t>(), session_->joint_dim());
    }

    void perplexity_for_all_methods() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        need_session();
        PplRequest req;
        req.ids = session_->tokenizer().encode(context_, true);
        req.prefix_tokens = static_cast<int64_t>(req.ids.size()) - 80;
        req.settings = test::small_codec_settings(0.5);
        const auto runs = run_perplexity(*session_, req);
        QCOMPARE(runs.size(), size_t{4});
        for (size_t i = 0; i < runs.size(); ++i) {
            QCOMPARE(runs[i].method, req.methods[i]);
            QVERIFY(std::isfinite(runs[i].ppl));
            QCOMPARE(runs[i].scored_tokens, int64_t{80});
        }
        req.prefix_tokens = static_cast<int64_t>(req.ids.size());
        QVERIFY_THROWS_EXCEPTION(Error, run_perplexity(*session_, req));
    }

    // The paper's A.1 check on the small real model (scripts/eval-stories-ppl.sh): the committed eval text
    // scored after a compressed 400-token prefix, with a basis calibrated on the two committed calibration
    // texts. At kappa 0.3 allocating rank by salience beats spending it evenly (measured 6.43 vs 6.57).
    void varrate_beats_flat_perplexity_on_the_eval_text() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        Session& session = calibrated_session();
        PplRequest req;
        req.ids = session.tokenizer().encode(
            read_text_file(test::source_dir() / "resources/eval/stories260k/eval.txt"), true);
        req.prefix_tokens = 400;
        req.methods = {"full", "varrate", "flat"};
        req.settings = test::small_codec_settings(0.3);
        const auto runs = run_perplexity(session, req);
        QCOMPARE(runs.size(), size_t{3});
        const double full = runs[0].ppl, varrate = runs[1].ppl, flat = runs[2].ppl;
        qInfo("eval.txt after a 400-token prefix at kappa 0.3: full %.4f, varrate %.4f, flat %.4f", full,
              varrate, flat);
        QVERIFY(!runs[1].self_calibrated && !runs[2].self_calibrated);
        QVERIFY2(std::abs(runs[1].footprint_fraction - 0.3) < 1e-3,
                 qPrintable(QString::number(runs[1].footprint_fraction)));
        QVERIFY2(varrate < flat, qPrintable(QString("varrate %1 >= flat %2").arg(varrate).arg(flat)));
    }

    void basis_file_round_trip_and_mismatch() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        need_session();
        const auto tmp = test::temp_dir("pipeline-basis");
        const CodecSettings s = test::small_codec_settings(0.3);
        const Basis b = session_->calibrate({session_->tokenizer().encode(context_, true)}, s, 64, false);
        b.save(tmp / "basis.safetensors");
        auto with_basis = test::open_fixture_session(tmp / "basis.safetensors");
        QVERIFY(with_basis->basis() != nullptr);
        CompareRequest req = request({"varrate"}, CompressionMode::QueryAgnostic, {"Who is Sara?"});
        const CompareResult r = run_compare(*with_basis, req);
        QVERIFY(!r.runs[0].self_calibrated);
        // Settings the basis was not made for are a clear error.
        req.settings.stride = 16;
        EXPECT_ERROR(run_compare(*with_basis, req), "stride");
    }
};

QTEST_GUILESS_MAIN(TestPipeline)
#include "test_core_pipeline.moc"
