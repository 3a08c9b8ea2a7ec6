// One prefill capture serves every method and budget (core/capture.h): it gives the same answers, ranks,
// footprints and errors as one prefill per method and budget with the method compressing inside it, on the
// stories260k fixture and on the embedded demo model, in both modes. And what the capture's diagnostics claim
// is checked against explicit computations: the error at any rank from coefficient energies against the
// reconstruction, the attention-output error against a per-query softmax. A capture explored re-allocates
// at any budget, r_min, R or structural setting without another prefill.
#include "tests/test_support.h"

#include <cmath>

#include <ATen/ATen.h>

#include "base/error.h"
#include "base/file_io.h"
#include "codec/anchors.h"
#include "codec/registry.h"
#include "core/capture.h"
#include "core/compare.h"
#include "core/exploration.h"
#include "core/live_compare.h"
#include "core/prompt.h"
#include "core/session.h"
#include "core/suites/demo_corpus.h"
#include "models/rope.h"

using namespace varrate;

namespace {

double max_abs_diff(const at::Tensor& a, const at::Tensor& b) {
    return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

// Every run of `shared` equals the matching run of `separate`: answers and ranks identical, errors and
// footprints within 1e-6.
void expect_same_runs(const CompareResult& shared, const CompareResult& separate, const QString& what) {
    QCOMPARE(shared.runs.size(), separate.runs.size());
    for (size_t i = 0; i < shared.runs.size(); ++i) {
        const MethodRun &a = shared.runs[i], &b = separate.runs[i];
        const QString where =
            QString("%1 %2 kappa %3").arg(what, QString::fromStdString(a.method)).arg(a.budget);
        QVERIFY2(a.method == b.method && a.budget == b.budget, qPrintable(where));
        QVERIFY2(a.infeasible == b.infeasible, qPrintable(where + " infeasible"));
        QVERIFY2(a.answer_ids == b.answer_ids, qPrintable(where + " answers"));
        QVERIFY2(a.answers == b.answers, qPrintable(where + " answers"));
        QVERIFY2(a.context_ids == b.context_ids, qPrintable(where + " context"));
        QCOMPARE(a.stored_bytes, b.stored_bytes);
        QVERIFY2(std::abs(a.footprint_fraction - b.footprint_fraction) <= 1e-6, qPrintable(where));
        QCOMPARE(a.layers.size(), b.layers.size());
        for (size_t l = 0; l < a.layers.size(); ++l) {
            const LayerDiagnostics &x = a.layers[l], &y = b.layers[l];
            const QString at_layer = where + QString(" layer %1").arg(l);
            QVERIFY2(at::equal(x.rank, y.rank), qPrintable(at_layer + " ranks"));
            QVERIFY2(at::equal(x.exact, y.exact), qPrintable(at_layer + " exact"));
            QVERIFY2(x.kept.defined() == y.kept.defined() && (!x.kept.defined() || at::equal(x.kept, y.kept)),
                     qPrintable(at_layer + " kept"));
            QVERIFY2(max_abs_diff(x.rel_error, y.rel_error) <= 1e-6, qPrintable(at_layer + " rel_error"));
            QVERIFY2(std::abs(x.mean_rel_error - y.mean_rel_error) <= 1e-6, qPrintable(at_layer));
            QVERIFY2(std::abs(x.weighted_rel_error - y.weighted_rel_error) <= 1e-6, qPrintable(at_layer));
            QVERIFY2(std::abs(x.attn_output_error - y.attn_output_error) <= 1e-6, qPrintable(at_layer));
            QVERIFY2(x.weighted_rel_error >= 0 && x.attn_output_error >= 0,
                     qPrintable(at_layer + " measured"));
            QCOMPARE(x.stored_bytes, y.stored_bytes);
            QVERIFY2(std::abs(x.footprint - y.footprint) <= 1e-6, qPrintable(at_layer));
        }
    }
}

}  // namespace

class TestCapture : public QObject {
    Q_OBJECT
    Session* fixture_ = nullptr;
    std::string context_;

    bool need_fixture() {
        if (!fixture_) {
            fixture_ = test::shared_fixture_session();
            if (!fixture_) return false;
            const auto greedy = read_json_file(test::fixture("stories260k") / "expected_greedy.json");
            context_ = greedy["cases"][0]["text"].get<std::string>() + "\n" +
                       greedy["cases"][2]["text"].get<std::string>();
        }
        return true;
    }

    PrefillCapture fixture_capture(const CodecSettings& s) {
        const std::vector<int64_t> ids = build_prompt(fixture_->tokenizer(), context_, "", false).context_ids;
        return capture_prefill(fixture_->model(), ids, s);
    }

  private Q_SLOTS:
    void shared_capture_equals_separate_prefills_on_the_fixture() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        QVERIFY(need_fixture());
        for (CompressionMode mode : {CompressionMode::QueryAgnostic, CompressionMode::QueryAware}) {
            CompareRequest req;
            req.context = context_;
            req.questions = {"Who was in the story?", "What happened at the end?"};
            req.methods = {"full", "varrate", "flat", "snapkv"};
            req.settings = test::small_codec_settings(0.3);
            // 0.2 is infeasible with the basis fitted on this context (charged): recorded the same way by
            // both.
            req.budgets = {0.2, 0.35, 0.6};
            req.skip_infeasible = true;
            req.mode = mode;
            req.max_new_tokens = 8;
            const CompareResult shared = run_compare(*fixture_, req);
            QCOMPARE(shared.runs.size(), size_t{10});  // full once, three budgets for the others
            QCOMPARE(shared.runs[0].method, std::string("full"));
            QCOMPARE(shared.runs[1].budget, 0.2);
            QVERIFY(!shared.runs[1].infeasible.empty());
            QCOMPARE(shared.runs[3].budget, 0.6);
            req.shared_capture = false;
            const CompareResult separate = run_compare(*fixture_, req);
            expect_same_runs(shared, separate, QString::fromStdString(to_string(mode)));
            // Budgets differ where they should: more rank and less error at a larger kappa.
            QVERIFY(shared.runs[2].layers[0].sum_ranks < shared.runs[3].layers[0].sum_ranks);
            QVERIFY(shared.runs[2].layers[0].mean_rel_error > shared.runs[3].layers[0].mean_rel_error);
        }
    }

    void shared_capture_equals_separate_prefills_on_the_demo_model() {
        RuntimeOptions ro;
        ro.threads = 2;
        auto session = Session::open(test::source_dir() / "resources/models/varrate-demo", ro);
        const DemoDocument doc = make_document(uint64_t(1) << 63 | 777, 512, 2, 40.0);
        for (CompressionMode mode : {CompressionMode::QueryAgnostic, CompressionMode::QueryAware}) {
            CompareRequest req;
            req.context = doc.text;
            req.questions = {doc.question};
            req.answers = {doc.needle.value};
            req.answer_prefixes = {doc.answer_prefix};
            req.methods = {"full", "varrate", "flat", "snapkv"};
            req.settings = *session->codec_defaults();
            req.budgets = {0.1, 0.2};
            req.mode = mode;
            req.max_new_tokens = 16;
            const CompareResult shared = run_compare(*session, req);
            QCOMPARE(shared.runs.size(), size_t{7});
            QCOMPARE(shared.runs[0].correct.at(0), 1);  // full answers: the document is a real test
            req.shared_capture = false;
            expect_same_runs(shared, run_compare(*session, req), QString::fromStdString(to_string(mode)));
        }
    }

    // A capture explored at one budget allocates at other budgets, r_min, R and a structural setting without
    // another prefill, and each result equals run_compare's (one prefill per run) at those settings.
    void exploration_reallocates_without_a_prefill() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        QVERIFY(need_fixture());
        const Session& s = *fixture_;
        const CodecSettings base = test::small_codec_settings(0.6);
        const std::vector<int64_t> ids = build_prompt(s.tokenizer(), context_, "", false).context_ids;
        CaptureExploration explored(s, ids, base, s.basis_for(ids, base), true);
        std::vector<std::pair<std::string, CodecSettings>> steps;
        for (double kappa : {0.6, 0.35})
            for (const char* m : {"varrate", "flat", "snapkv", "full"}) {
                CodecSettings c = base;
                c.budget = kappa;
                steps.emplace_back(m, c);
            }
        CodecSettings rmin = base, rank = base, window = base;
        rmin.r_min += 2;
        rank.rank /= 2;
        for (const CodecSettings& c : {rmin, rank}) steps.emplace_back("varrate", c);
        // Structural: a new analysis on the same capture (SnapKV: a self-calibrated basis would differ too).
        window.window += 8;
        steps.emplace_back("snapkv", window);
        for (const auto& [method, settings] : steps) {
            const QString where = QString("%1 kappa %2 r_min %3 R %4 w %5")
                                      .arg(QString::fromStdString(method))
                                      .arg(settings.budget)
                                      .arg(settings.r_min)
                                      .arg(settings.rank)
                                      .arg(settings.window);
            const int64_t prefills = s.model().forward_calls();
            const ExploredRun got = explored.run(method, settings, false);
            QVERIFY2(s.model().forward_calls() == prefills, qPrintable(where + ": a prefill ran"));
            CompareRequest req;
            req.context = context_;
            req.methods = {method};
            req.settings = settings;
            req.mode = CompressionMode::QueryAgnostic;
            req.shared_capture = false;
            const MethodRun want = run_compare(s, req).runs.at(0);
            QCOMPARE(got.layers.size(), want.layers.size());
            for (size_t l = 0; l < got.layers.size(); ++l) {
                const LayerDiagnostics &x = got.layers[l], &y = want.layers[l];
                QVERIFY2(at::equal(x.rank, y.rank), qPrintable(where + " ranks"));
                QVERIFY2(
                    x.kept.defined() == y.kept.defined() && (!x.kept.defined() || at::equal(x.kept, y.kept)),
                    qPrintable(where + " kept"));
                QCOMPARE(x.stored_bytes, y.stored_bytes);
                QVERIFY2(max_abs_diff(x.rel_error, y.rel_error) <= 1e-6, qPrintable(where + " rel_error"));
                QVERIFY2(std::abs(x.attn_output_error - y.attn_output_error) <= 1e-6, qPrintable(where));
            }
        }
        // A budget this capture cannot meet: recorded, or thrown; a wider observation window needs a new
        // capture.
        CodecSettings tiny = base, wide = base;
        tiny.budget = 0.01;
        QVERIFY(!explored.run("varrate", tiny, true).infeasible.empty());
        QVERIFY_THROWS_EXCEPTION(InfeasibleBudget, explored.run("varrate", tiny, false));
        wide.obs_window += 8;
        EXPECT_ERROR(explored.run("snapkv", wide, false), "window queries");
    }

    // A live comparison re-allocates at new budgets without a prefill and gives run_compare's result for the
    // request it then holds; answers go stale until decoded (which runs no prefill either); a wider
    // observation window captures again. Both modes.
    void live_compare_updates_without_a_prefill() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        QVERIFY(need_fixture());
        const Session& s = *fixture_;
        for (CompressionMode mode : {CompressionMode::QueryAgnostic, CompressionMode::QueryAware}) {
            const QString what = QString::fromStdString(to_string(mode));
            CompareRequest req;
            req.context = context_;
            req.questions = {"Who was in the story?", "What happened at the end?"};
            req.methods = {"full", "varrate", "flat", "snapkv"};
            req.settings = test::small_codec_settings(0.6);
            req.budgets = {0.6};
            req.skip_infeasible = true;
            req.mode = mode;
            req.max_new_tokens = 6;
            LiveCompare live(s, req);
            const int64_t captures = mode == CompressionMode::QueryAgnostic ? 1 : 2;
            QCOMPARE(live.captures(), captures);
            QVERIFY(live.answers_stale());
            QVERIFY(live.result().runs.at(1).answers.empty());
            live.decode();
            QVERIFY(!live.answers_stale());
            expect_same_runs(live.result(), run_compare(s, req), what + " start");

            const int64_t prefills = s.model().forward_calls();
            req.budgets = {0.35, 0.6};
            req.settings.r_min += 1;
            live.update(req.settings, req.budgets);
            QVERIFY(live.answers_stale());
            live.decode();
            QCOMPARE(s.model().forward_calls(), prefills);  // neither the update nor the answers prefilled
            QCOMPARE(live.captures(), captures);
            const CompareResult updated = live.result();
            QCOMPARE(updated.runs.size(), size_t{7});
            expect_same_runs(updated, run_compare(s, req), what + " updated");

            // An update allocates only: ranks, errors and footprints are run_compare's at once; the
            // attention-output error waits for the caches (materialise, or decode).
            req.budgets = {0.5};
            live.update(req.settings, req.budgets);
            QVERIFY(!live.materialised() && live.answers_stale());
            for (const MethodRun& r : live.result().runs) {
                QVERIFY2(r.answers.empty(), qPrintable(what + " stale answers shown"));
                for (const LayerDiagnostics& d : r.layers)
                    QVERIFY2(d.attn_output_error == -1 && d.weighted_rel_error >= 0, qPrintable(what));
            }
            live.materialise();
            QVERIFY(live.materialised());
            if (mode == CompressionMode::QueryAgnostic) {  // the same compressed ids without questions
                CompareRequest compress_only = req;
                compress_only.questions.clear();
                CompareResult materialised = live.result();
                expect_same_runs(materialised, run_compare(s, compress_only), what + " materialised");

                // Rate-distortion over a grid, from the same capture: each point is run_compare's run at that
                // kappa (footprint, K/V errors, attention-output error), full once at kappa 1.
                const std::vector<double> grid = {0.35, 0.5, 0.8};
                const int64_t before_rd = s.model().forward_calls();
                const std::vector<RatePoint> rd = live.rate_distortion(grid, true);
                QCOMPARE(s.model().forward_calls(), before_rd);
                QCOMPARE(rd.size(), size_t{3 * 3 + 1});
                compress_only.budgets = grid;
                const CompareResult swept = run_compare(s, compress_only);
                QCOMPARE(swept.runs.size(), rd.size());
                for (size_t i = 0; i < rd.size(); ++i) {
                    const RatePoint& p = rd[i];
                    const MethodRun& r = swept.runs[i];
                    const QString where =
                        what + QString(" rd %1 %2").arg(QString::fromStdString(p.method)).arg(p.kappa);
                    QVERIFY2(p.method == r.method && p.kappa == r.budget, qPrintable(where));
                    QVERIFY2(p.infeasible == r.infeasible, qPrintable(where));
                    if (!p.infeasible.empty()) continue;
                    double kv = 0, attn = 0;
                    for (const LayerDiagnostics& d : r.layers) {
                        kv += d.mean_rel_error / static_cast<double>(r.layers.size());
                        attn += d.attn_output_error / static_cast<double>(r.layers.size());
                    }
                    QVERIFY2(std::abs(p.footprint - r.footprint_fraction) <= 1e-9, qPrintable(where));
                    QVERIFY2(std::abs(p.kv_error - kv) <= 1e-6, qPrintable(where));
                    QVERIFY2(std::abs(p.attn_output_error - attn) <= 1e-6, qPrintable(where));
                }
                // The current runs are as they were.
                expect_same_runs(live.result(), materialised, what + " after rd");
            }

            // More window queries than captured (a query-aware capture also keeps its question's, about 28
            // here): a new capture.
            req.settings.obs_window += 32;
            live.update(req.settings, req.budgets);
            QCOMPARE(live.captures(), 2 * captures);
            live.decode();
            expect_same_runs(live.result(), run_compare(s, req), what + " wider window");

            // The fixture's basis is fitted on the context: a new window fits it again (one calibration
            // prefill) and re-analyses the kept captures; the pool kernel only re-analyses.
            req.settings.window += 8;
            QCOMPARE(live.update_cost(req.settings), LiveUpdateCost::Refit);
            const int64_t before_refit = s.model().forward_calls();
            live.update(req.settings, req.budgets);
            QCOMPARE(live.captures(), 2 * captures);
            QCOMPARE(s.model().forward_calls(), before_refit + 1);
            live.decode();
            expect_same_runs(live.result(), run_compare(s, req), what + " refit");
            req.settings.pool_kernel += 2;
            QCOMPARE(live.update_cost(req.settings), LiveUpdateCost::Analyse);
            const int64_t before_pool = s.model().forward_calls();
            live.update(req.settings, req.budgets);
            QCOMPARE(s.model().forward_calls(), before_pool);
            live.decode();
            expect_same_runs(live.result(), run_compare(s, req), what + " pool kernel");
        }
        CompareRequest bad;
        bad.context = context_;
        bad.settings = test::small_codec_settings(0.6);
        LiveCompare live(s, bad);
        EXPECT_ERROR(live.update(bad.settings, {0.5, 1.5}), "\"budget\" must be a number in (0, 1], got 1.5");
    }

    void perplexity_runs_every_budget_from_one_capture() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        QVERIFY(need_fixture());
        PplRequest req;
        req.ids = fixture_->tokenizer().encode(context_, true);
        req.prefix_tokens = static_cast<int64_t>(req.ids.size()) - 40;
        req.methods = {"full", "flat"};
        req.settings = test::small_codec_settings(0.3);
        req.budgets = {0.35, 0.6};
        const std::vector<PplRun> runs = run_perplexity(*fixture_, req);
        QCOMPARE(runs.size(), size_t{3});
        QCOMPARE(runs[1].budget, 0.35);
        QCOMPARE(runs[2].budget, 0.6);
        // One budget at a time gives the same perplexities.
        for (size_t i = 1; i < runs.size(); ++i) {
            PplRequest one = req;
            one.methods = {"flat"};
            one.budgets = {runs[i].budget};
            const std::vector<PplRun> single = run_perplexity(*fixture_, one);
            QVERIFY(std::abs(single.at(0).ppl - runs[i].ppl) <= 1e-9 * runs[i].ppl);
            QCOMPARE(single.at(0).footprint_fraction, runs[i].footprint_fraction);
        }
        QVERIFY(runs[1].ppl > runs[2].ppl);  // less cache, worse prediction
    }

    // The capture's last logits are the model's prediction after the last id, whatever is compressed later.
    void capture_logits_match_the_plain_prefill() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        QVERIFY(need_fixture());
        const CodecSettings s = test::small_codec_settings(0.3);
        const PrefillCapture cap = fixture_capture(s);
        KVCache cache = fixture_->model().new_cache();
        const at::Tensor plain = fixture_->model().forward(cap.ids, cache);
        QVERIFY(at::allclose(cap.last_logits, plain, 1e-4, 1e-4));
        QCOMPARE(static_cast<int64_t>(cap.layers.size()), fixture_->model().config().n_layer);
        for (size_t l = 0; l < cap.layers.size(); ++l) {
            QVERIFY(at::allclose(cap.layers[l].keys, cache.keys(static_cast<int64_t>(l)), 1e-5, 1e-5));
            QCOMPARE(cap.layers[l].window_queries.size(1), s.obs_window);
            // The runtime hands every layer the context's ids (the rare-id rank floor reads them).
            QVERIFY(at::equal(cap.layers[l].token_ids.cpu(), at::tensor(cap.ids, at::kLong)));
        }
        // A prefill that continues a filled cache does not know the earlier ids: it says so by leaving them
        // out.
        KVCache half = fixture_->model().new_cache();
        const std::vector<int64_t> head(cap.ids.begin(), cap.ids.begin() + 20),
            tail(cap.ids.begin() + 20, cap.ids.end());
        fixture_->model().forward(head, half);
        ForwardOptions fo;
        fo.observer_window = 8;
        bool seen = false;
        fo.observer = [&](const LayerCapture& c) -> std::optional<LayerKV> {
            seen = true;
            if (c.token_ids.defined()) throw Error("token ids of a continued prefill");
            return std::nullopt;
        };
        fixture_->model().forward(tail, half, fo);
        QVERIFY(seen);
        QVERIFY(cap.bytes() <= capture_bytes_needed(fixture_->model().config(),
                                                    static_cast<int64_t>(cap.ids.size()), s.obs_window,
                                                    at::kFloat));
    }

    void capture_refuses_what_cannot_fit() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        QVERIFY(need_fixture());
        const ModelConfig& cfg = fixture_->model().config();
        const RuntimeOptions& ro = fixture_->model().options();
        const int64_t need = prefill_bytes_needed(cfg, 100000, 16, at::kFloat, 512);
        // Activations per chunk: scores and probabilities of 8 heads x 512 queries x 100000 keys in fp32.
        QVERIFY(need - capture_bytes_needed(cfg, 100000, 16, at::kFloat) >=
                int64_t{2} * 8 * 512 * 100000 * 4);
        EXPECT_ERROR(check_capture_fits(cfg, ro, 100000, 16, need - 1, 512), "100000 tokens",
                     std::to_string(need) + " bytes", std::to_string(need - 1) + " bytes) is available",
                     "per chunk of 512 tokens");
        check_capture_fits(cfg, ro, 100000, 16, need, 512);  // exactly enough
        check_capture_fits(cfg, ro, 100000, 16, -1, 512);    // unknown: never refused
    }

    // The error the allocation reports at each token's rank (coefficient energies, no reconstruction) is
    // the error of the cache materialise() builds, measured on the reconstructed joint vectors.
    void error_at_any_rank_matches_the_reconstruction() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        QVERIFY(need_fixture());
        const CodecSettings s = test::small_codec_settings(0.3);
        const PrefillCapture cap = fixture_capture(s);
        auto basis = fixture_->basis_for(cap.ids, s);
        for (const char* name : {"varrate", "flat"}) {
            auto method = make_method(name, s, basis);
            const MethodAnalysis analysis(*method, cap);
            for (double kappa : {0.35, 0.5, 0.8}) {
                CodecSettings b = s;
                b.budget = kappa;
                std::vector<LayerAllocation> alloc = analysis.allocate(b);
                const std::vector<LayerKV> kv = analysis.materialise(alloc);
                for (size_t l = 0; l < kv.size(); ++l) {
                    const LayerCapture& c = cap.layers[l];
                    const at::Tensor k_pre = unapply_rope(kv[l].keys, c.rope_cos, c.rope_sin);
                    const at::Tensor z = joint_vectors(c.keys_pre_rope, c.values);
                    const at::Tensor z_hat = joint_vectors(k_pre, kv[l].values);
                    const at::Tensor err = (z - z_hat).norm(2, {1}) / z.norm(2, {1});
                    const double diff = max_abs_diff(err, alloc[l].diagnostics.rel_error);
                    QVERIFY2(diff < 2e-4,
                             qPrintable(
                                 QString("%1 kappa %2 layer %3: %4").arg(name).arg(kappa).arg(l).arg(diff)));
                }
            }
        }
    }

    // The attention-output error against an explicit softmax per query head and query: full is exact (0),
    // SnapKV's eviction measured over the positions each KV head kept.
    void attention_output_error_matches_an_explicit_softmax() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        QVERIFY(need_fixture());
        const CodecSettings s = test::small_codec_settings(0.3);
        const PrefillCapture cap = fixture_capture(s);
        for (const char* name : {"full", "snapkv"}) {
            auto method = make_method(name, s);
            const MethodAnalysis analysis(*method, cap);
            std::vector<LayerAllocation> alloc = analysis.allocate(s);
            const std::vector<LayerKV> kv = analysis.materialise(alloc);
            const LayerCapture& c = cap.layers[1];
            const int64_t L = c.keys.size(1), n_head = c.window_queries.size(0), w = s.obs_window;
            const int64_t n_kv = c.keys.size(0), hd = c.keys.size(2), n_rep = n_head / n_kv;
            double sum = 0;
            for (int64_t h = 0; h < n_head; ++h) {
                const int64_t g = h / n_rep;
                for (int64_t i = 0; i < w; ++i) {
                    const int64_t pos = L - w + i;
                    const at::Tensor q =
                        c.window_queries[h][c.window_queries.size(1) - w + i].to(at::kDouble);
                    auto attend = [&](const at::Tensor& k, const at::Tensor& v, const at::Tensor& positions) {
                        const at::Tensor visible = positions <= pos;
                        const at::Tensor logits = k.to(at::kDouble)
                                                      .mv(q)
                                                      .div(std::sqrt(static_cast<double>(hd)))
                                                      .masked_fill(visible.logical_not(), -INFINITY);
                        return at::softmax(logits, 0).unsqueeze(0).mm(v.to(at::kDouble)).squeeze(0);  // [hd]
                    };
                    const at::Tensor all = at::arange(L, at::TensorOptions().dtype(at::kLong));
                    const at::Tensor o = attend(c.keys[g], c.values[g], all);
                    const at::Tensor kept_pos = alloc[1].kept.defined() ? alloc[1].kept[g] : all;
                    const at::Tensor o_hat = attend(kv[1].keys[g], kv[1].values[g], kept_pos);
                    sum += ((o - o_hat).norm() / o.norm()).item<double>();
                }
            }
            const double expected = sum / static_cast<double>(n_head * w);
            const double got = alloc[1].diagnostics.attn_output_error;
            QVERIFY2(std::abs(got - expected) < 1e-5,
                     qPrintable(QString("%1: %2 vs explicit %3").arg(name).arg(got).arg(expected)));
            if (std::string(name) == "full") QCOMPARE(got, 0.0);
            if (std::string(name) == "snapkv") QVERIFY(got > 1e-4);
        }
    }
};

QTEST_GUILESS_MAIN(TestCapture)
#include "test_core_capture.moc"
