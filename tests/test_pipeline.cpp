// The comparison pipeline on real weights (stories260k): query-aware and query-agnostic runs, reuse of one
// compression for several questions, JSON/rank-log consistency, perplexity and basis files.
#include "tests/test_support.h"

#include <algorithm>
#include <cmath>

#include "core/base/error.h"
#include "core/base/file_io.h"
#include "core/compare.h"
#include "core/prompt.h"
#include "core/session.h"
#include "models/generate.h"

using namespace varrate;

namespace {

// Feasible codec settings for a 64-wide model with a <= 512-token context (the paper's defaults need D >=
// 1024).
CodecSettings small_settings(double budget) {
    CodecSettings s;
    s.budget = budget;
    s.r_min = 4;
    s.rank = 64;
    s.stride = 32;
    s.window = 16;
    s.obs_window = 16;
    return s;
}

}  // namespace

class TestPipeline : public QObject {
    Q_OBJECT
    std::unique_ptr<Session> session_;
    std::string context_;

    void need_session() {
        if (session_) return;
        const auto dir = test::fixture("stories260k");
        if (dir.empty()) return;
        RuntimeOptions o;
        o.threads = configure_threads(2);
        session_ = Session::open(dir, o);
        // Two of the model's own stories: ~400 tokens of in-distribution text.
        const auto greedy = read_json_file(dir / "expected_greedy.json");
        context_ = greedy["cases"][0]["text"].get<std::string>() + "\n" +
                   greedy["cases"][2]["text"].get<std::string>();
    }

    CompareRequest request(const std::vector<std::string>& methods, CompressionMode mode,
                           const std::vector<std::string>& questions) {
        CompareRequest r;
        r.context = context_;
        r.methods = methods;
        r.mode = mode;
        r.questions = questions;
        // 0.4: the self-calibrated basis (64 x 64 per layer, charged) needs about 0.32 at this length.
        r.settings = small_settings(0.4);
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
        const CompareResult both =
            run_compare(*session_, request(methods, CompressionMode::QueryAgnostic, {q1, q2}));
        const CompareResult one =
            run_compare(*session_, request(methods, CompressionMode::QueryAgnostic, {q1}));
        const CompareResult two =
            run_compare(*session_, request(methods, CompressionMode::QueryAgnostic, {q2}));
        for (size_t m = 0; m < methods.size(); ++m) {
            QCOMPARE(both.runs[m].answer_ids.size(), size_t{2});
            QCOMPARE(both.runs[m].answer_ids[0], one.runs[m].answer_ids[0]);
            QCOMPARE(both.runs[m].answer_ids[1], two.runs[m].answer_ids[0]);
        }
    }

    void compare_json_is_consistent() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        need_session();
        for (auto mode : {CompressionMode::QueryAware, CompressionMode::QueryAgnostic}) {
            CompareRequest req =
                request({"full", "varrate", "flat", "snapkv"}, mode, {"What did Sara find?"});
            req.answers = {"key"};
            const CompareResult r = run_compare(*session_, req);
            const nlohmann::json j = to_json(r, req);
            QCOMPARE(j["methods"].size(), size_t{4});
            const int64_t n_layers = session_->model().config().num_layers;
            for (const auto& m : j["methods"]) {
                for (const char* key :
                     {"method", "budget", "footprint_fraction", "stored_bytes", "full_bytes", "answers",
                      "correct", "prefill_ms", "compress_ms", "self_calibrated", "layers"})
                    QVERIFY2(m.contains(key), key);
                QCOMPARE(static_cast<int64_t>(m["layers"].size()), n_layers);
                const std::string name = m["method"];
                const double fp = m["footprint_fraction"];
                QCOMPARE(fp, m["stored_bytes"].get<double>() / m["full_bytes"].get<double>());
                if (name == "varrate" || name == "flat") {
                    QVERIFY2(std::abs(fp - 0.4) <= 0.001,
                             qPrintable(QString("%1 footprint %2").arg(name.c_str()).arg(fp)));
                    QVERIFY(m["self_calibrated"].get<bool>());
                    for (const auto& l : m["layers"]) {
                        QCOMPARE(l["sum_ranks"], l["budget_B"]);
                        QVERIFY(l["min_rank"].get<int64_t>() >= 4);
                        QVERIFY(l["max_rank"].get<int64_t>() <= 64);
                        QCOMPARE(l["n_exact"].get<int64_t>() + l["n_coded"].get<int64_t>(),
                                 static_cast<int64_t>(r.runs[0].context_ids.size()));
                    }
                } else if (name == "snapkv") {
                    const double L = static_cast<double>(r.runs[0].context_ids.size());
                    QCOMPARE(fp, std::floor(L * 0.4) / L);
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
        const CompareResult r = run_compare(
            *session_, request({"varrate", "snapkv"}, CompressionMode::QueryAgnostic, {"Who is Sara?"}));
        const std::string csv = rank_log_csv(r, session_->tokenizer());
        QVERIFY(csv.rfind("method,layer,position,token_id,token_text,salience,rank,exact,rel_error\n", 0) ==
                0);
        const int64_t rows = std::count(csv.begin(), csv.end(), '\n') - 1;
        const int64_t L = static_cast<int64_t>(r.runs[0].context_ids.size());
        QCOMPARE(rows, 2 * session_->model().config().num_layers * L);
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
        req.settings = small_settings(0.5);
        const auto runs = run_perplexity(*session_, req);
        QCOMPARE(runs.size(), size_t{4});
        for (const auto& r : runs) {
            QVERIFY(std::isfinite(r.ppl) && r.ppl > 1.0);
            QCOMPARE(r.scored_tokens, int64_t{80});
        }
        // Compression can only lose information about the prefix: the ceiling is not beaten by much.
        QVERIFY(runs[1].ppl > 0.9 * runs[0].ppl);
        req.prefix_tokens = static_cast<int64_t>(req.ids.size());
        QVERIFY_THROWS_EXCEPTION(Error, run_perplexity(*session_, req));
    }

    void basis_file_round_trip_and_mismatch() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        need_session();
        const auto tmp = test::temp_dir("pipeline-basis");
        const CodecSettings s = small_settings(0.3);
        const Basis b = session_->calibrate({session_->tokenizer().encode(context_, true)}, s, 64, false);
        b.save(tmp / "basis.safetensors");
        RuntimeOptions o;
        auto with_basis = Session::open(dir, o, tmp / "basis.safetensors");
        QVERIFY(with_basis->basis() != nullptr);
        CompareRequest req = request({"varrate"}, CompressionMode::QueryAgnostic, {"Who is Sara?"});
        const CompareResult r = run_compare(*with_basis, req);
        QVERIFY(!r.runs[0].self_calibrated);
        // Settings the basis was not made for are a clear error.
        req.settings.stride = 16;
        try {
            run_compare(*with_basis, req);
            QFAIL("a basis made with stride 32 was accepted for stride 16");
        } catch (const Error& e) {
            QVERIFY2(QString(e.what()).contains("stride"), e.what());
        }
    }
};

QTEST_GUILESS_MAIN(TestPipeline)
#include "test_pipeline.moc"
