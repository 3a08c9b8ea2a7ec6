// Rate-distortion curves (core/rate_distortion.h, `varrate rd`): errors fall as kappa grows, a curve's
// point is exactly what run_compare gives at that budget, `full` is the zero-distortion reference,
// infeasible budgets are recorded per point, and the CLI writes rd.json and rd.csv.
#include "tests/test_support.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include <fmt/format.h>

#include "base/file_io.h"
#include "core/compare.h"
#include "core/session.h"
#include "core/suites/rate_distortion.h"
#include "core/suites/stats.h"

using namespace varrate;
using varrate::test::CliResult;
using varrate::test::run_varrate;

namespace {

std::filesystem::path demo_dir() {
    return test::source_dir() / "resources/models/varrate-demo";
}

const std::vector<std::string> kCompressing = {"varrate", "flat", "snapkv"};

QString qs(const std::string& s) {
    return QString::fromStdString(s);
}

std::vector<std::string> lines(const std::string& text) {
    std::vector<std::string> out;
    std::stringstream ss(text);
    for (std::string l; std::getline(ss, l);) out.push_back(l);
    return out;
}

// Per layer, a curve sample against a compare run of the same document and budget.
void expect_same(const RdSample& s, const MethodRun& run, const std::string& where) {
    QVERIFY2(run.infeasible.empty() == s.infeasible.empty(), qPrintable(qs(where + ": feasibility differs")));
    if (!s.infeasible.empty()) return;
    QVERIFY2(
        std::abs(s.footprint - run.footprint_fraction) <= 1e-9,
        qPrintable(qs(where + fmt::format(": footprint {} vs {}", s.footprint, run.footprint_fraction))));
    QCOMPARE(s.layers.size(), run.layers.size());
    for (size_t l = 0; l < s.layers.size(); ++l) {
        const RdLayer& a = s.layers[l];
        const LayerDiagnostics& b = run.layers[l];
        const std::string at = where + " layer " + std::to_string(l);
        QVERIFY2(std::abs(a.footprint - b.footprint) <= 1e-9, qPrintable(qs(at + ": footprint")));
        QVERIFY2(std::abs(a.mean_rel_error - b.mean_rel_error) <= 1e-9,
                 qPrintable(qs(at + ": mean_rel_error")));
        QVERIFY2(std::abs(a.weighted_rel_error - b.weighted_rel_error) <= 1e-9,
                 qPrintable(qs(at + ": weighted_rel_error")));
        QVERIFY2(std::abs(a.attn_output_error - b.attn_output_error) <= 1e-9,
                 qPrintable(qs(at + fmt::format(": attn_output_error {} vs {}", a.attn_output_error,
                                                b.attn_output_error))));
        QVERIFY2(b.attn_output_error >= 0,
                 qPrintable(qs(at + ": compare did not measure the attention error")));
    }
    QCOMPARE(s.answers, run.answers);
    QCOMPARE(s.correct, run.correct);
}

}  // namespace

class TestRateDistortion : public QObject {
    Q_OBJECT
    std::unique_ptr<Session> demo_;
    RdRequest req_;
    RdResult rd_;

  private Q_SLOTS:
    // One curve on the demo model (shipped basis): two 512-token needle documents, every method, a grid
    // from infeasible (0.02) to loose (0.5), answers at two points. The tests below read it.
    void initTestCase() {
        QVERIFY2(std::filesystem::exists(demo_dir() / "model.safetensors"),
                 qPrintable(qs(demo_dir().string())));
        RuntimeOptions ro;
        ro.threads = 2;
        demo_ = Session::open(demo_dir(), ro);
        NiahDocOptions o;
        o.seed = 424242;
        o.distractors = 1;
        req_.documents = niah_rd_documents(demo_->tokenizer(), o, {512}, {25, 75}, 1);
        req_.settings = demo_->default_codec_settings();
        req_.kappas = {0.5, 0.02, 0.1, 0.15, 0.2, 0.3};  // out of order on purpose: curves come out sorted
        req_.answer_at = {0.2, 0.5};
        req_.max_new_tokens = 12;
        rd_ = run_rate_distortion(*demo_, req_);
    }

    void points_cover_the_grid() {
        QCOMPARE(req_.documents.size(), size_t{2});
        QCOMPARE(req_.documents[0].id, std::string("L512-d25-s0"));
        QCOMPARE(rd_.document_tokens, (std::vector<int64_t>{512, 512}));
        QCOMPARE(rd_.points.size(), size_t{1 + 3 * 6});
        for (const std::string& m : kCompressing) {
            double last = 0;
            for (const RdPoint& p : rd_.points) {
                if (p.method != m) continue;
                QVERIFY(p.kappa > last);
                last = p.kappa;
                QCOMPARE(p.samples.size(), size_t{2});
                QCOMPARE(p.documents + p.infeasible, int64_t{2});
                QCOMPARE(p.answer_point, p.kappa == 0.2 || p.kappa == 0.5);
                for (const RdSample& s : p.samples)
                    if (s.infeasible.empty())
                        QCOMPARE(s.answers.size(), p.answer_point ? size_t{1} : size_t{0});
                const Interval ci = wilson_interval(p.correct, p.answered);
                QCOMPARE(p.ci.low, ci.low);
                QCOMPARE(p.ci.high, ci.high);
                if (p.answer_point) QCOMPARE(p.answered, p.documents);
            }
        }
        QVERIFY(rd_.basis_source.find("varrate-basis.safetensors") != std::string::npos);
    }

    // Monotone in kappa (within 1e-6), per document and per layer: more budget never codes a token worse
    // (nested truncation on one basis, ranks that only grow with the water level).
    void errors_non_increasing_in_kappa() {
        for (const std::string& m : {kCompressing[0], kCompressing[1]}) {
            std::vector<const RdPoint*> curve;
            for (const RdPoint& p : rd_.points)
                if (p.method == m && p.documents == 2) curve.push_back(&p);
            QVERIFY2(curve.size() >= 4, qPrintable(qs(m + ": fewer than 4 feasible points")));
            for (size_t i = 1; i < curve.size(); ++i) {
                const RdPoint& lo = *curve[i - 1];
                const RdPoint& hi = *curve[i];
                const std::string where = fmt::format("{} kappa {} -> {}", m, lo.kappa, hi.kappa);
                QVERIFY2(hi.mean_rel_error <= lo.mean_rel_error + 1e-6,
                         qPrintable(qs(where + ": mean_rel_error")));
                QVERIFY2(hi.weighted_rel_error <= lo.weighted_rel_error + 1e-6,
                         qPrintable(qs(where + ": weighted_rel_error")));
                QVERIFY2(hi.attn_output_error <= lo.attn_output_error + 1e-6,
                         qPrintable(qs(where + fmt::format(": attn_output_error {} -> {}",
                                                           lo.attn_output_error, hi.attn_output_error))));
                QVERIFY2(hi.footprint > lo.footprint, qPrintable(qs(where + ": footprint did not grow")));
                for (size_t d = 0; d < 2; ++d)
                    for (size_t l = 0; l < lo.samples[d].layers.size(); ++l) {
                        const RdLayer& a = lo.samples[d].layers[l];
                        const RdLayer& b = hi.samples[d].layers[l];
                        QVERIFY2(b.mean_rel_error <= a.mean_rel_error + 1e-6,
                                 qPrintable(qs(where + fmt::format(" doc {} layer {}: K/V error", d, l))));
                        QVERIFY2(
                            b.weighted_rel_error <= a.weighted_rel_error + 1e-6,
                            qPrintable(qs(where + fmt::format(" doc {} layer {}: weighted error", d, l))));
                    }
            }
            // The accounted footprint stays at or below kappa (basis file: nothing else charged).
            for (const RdPoint* p : curve) QVERIFY(p->footprint <= p->kappa + 1e-12);
        }
    }

    void full_is_the_zero_distortion_reference() {
        const RdPoint* full = rd_.find("full", 1.0);
        QVERIFY(full != nullptr);
        QCOMPARE(std::count_if(rd_.points.begin(), rd_.points.end(),
                               [](const RdPoint& p) { return p.method == "full"; }),
                 std::ptrdiff_t{1});
        QCOMPARE(full->documents, int64_t{2});
        QCOMPARE(full->footprint, 1.0);
        QCOMPARE(full->mean_rel_error, 0.0);
        QCOMPARE(full->weighted_rel_error, 0.0);
        QCOMPARE(full->attn_output_error, 0.0);
        for (const RdLayer& l : full->layers) QCOMPARE(l.attn_output_error, 0.0);
        QVERIFY(full->answer_point);
        QCOMPARE(full->answered, int64_t{2});
        // The demo model finds its needles uncompressed (test_core_demo_model); the reference must too.
        QCOMPARE(full->correct, int64_t{2});
    }

    void infeasible_points_are_recorded() {
        for (const std::string& m : kCompressing) {
            const RdPoint* p = rd_.find(m, 0.02);
            QVERIFY(p != nullptr);
            QCOMPARE(p->infeasible, int64_t{2});
            QCOMPARE(p->documents, int64_t{0});
            QCOMPARE(p->footprint, -1.0);
            QCOMPARE(p->attn_output_error, -1.0);
            for (const RdSample& s : p->samples)
                QVERIFY2(s.infeasible.find("0.02") != std::string::npos,
                         qPrintable(qs(m + ": " + s.infeasible)));
        }
        // A later, feasible kappa of the same documents is measured.
        QCOMPARE(rd_.find("varrate", 0.2)->documents, int64_t{2});
    }

    // The point at kappa k is what `varrate compare --budget k` gives on the same document: same accounted
    // footprint, per-layer errors and answers.
    void point_equals_compare() {
        for (size_t d = 0; d < req_.documents.size(); ++d) {
            const RdDocument& doc = req_.documents[d];
            CompareRequest c;
            c.context = doc.context;
            c.questions = doc.questions;
            c.answers = doc.answers;
            c.answer_prefixes = doc.answer_prefixes;
            c.settings = req_.settings;
            c.budgets = {0.1, 0.2, 0.5};
            c.mode = req_.mode;
            c.max_new_tokens = req_.max_new_tokens;
            c.skip_infeasible = true;
            const CompareResult r = run_compare(*demo_, c);
            for (const MethodRun& run : r.runs) {
                const RdPoint* p = rd_.find(run.method, run.budget);
                QVERIFY2(p != nullptr, qPrintable(qs(run.method)));
                RdSample s = p->samples.at(d);
                if (!p->answer_point) s.answers = run.answers, s.correct = run.correct;  // not decoded here
                expect_same(s, run, fmt::format("{} {} kappa {}", doc.id, run.method, run.budget));
            }
        }
    }

    void csv_has_a_header_and_a_row_per_point() {
        const std::vector<std::string> rows = lines(rd_csv(rd_));
        QCOMPARE(rows.at(0), std::string("method,kappa,footprint,mean_rel_error,weighted_rel_error,"
                                         "attn_output_error,documents,infeasible,answered,correct,accuracy,"
                                         "ci_low,ci_high"));
        QCOMPARE(rows.size(), rd_.points.size() + 1);
        QCOMPARE(rows.at(1).substr(0, 9), std::string("full,1,1,"));
        for (const std::string& r : rows) QCOMPARE(std::count(r.begin(), r.end(), ','), std::ptrdiff_t{12});
        const auto row = std::find_if(rows.begin(), rows.end(),
                                      [](const std::string& r) { return r.rfind("varrate,0.02,", 0) == 0; });
        QVERIFY(row != rows.end());
        QCOMPARE(*row, std::string("varrate,0.02,,,,,0,2,,,,,"));
        const nlohmann::json j = to_json(rd_, req_);
        QCOMPARE(j["points"].size(), rd_.points.size());
        QCOMPARE(j["documents"].size(), size_t{2});
        QCOMPARE(j["kappas"].get<std::vector<double>>(),
                 (std::vector<double>{0.02, 0.1, 0.15, 0.2, 0.3, 0.5}));
    }

    void bad_requests_are_one_clear_error() {
        RdRequest r = req_;
        r.answer_at = {0.25};
        EXPECT_ERROR(run_rate_distortion(*demo_, r), "--answer-at", "0.25");
        r = req_;
        r.kappas = {0.1, 1.5};
        EXPECT_ERROR(run_rate_distortion(*demo_, r), "--kappas", "1.5");
        r = req_;
        r.documents.clear();
        EXPECT_ERROR(run_rate_distortion(*demo_, r), "no documents");
    }

    // A context file with two questions on the 64-wide fixture (self-calibrated, basis charged), in both
    // modes: query-agnostic answers both from one capture, query-aware captures each question; every point
    // equals compare's.
    void context_file_equals_compare_in_both_modes() {
        Session* s = test::shared_fixture_session();
        if (!s) QSKIP("reference fixture 'stories260k' not found (set VARRATE_SHARED_DIR)");
        const auto greedy = read_json_file(test::fixture("stories260k") / "expected_greedy.json");
        RdDocument doc;
        doc.id = "file";
        doc.context = greedy["cases"][0]["text"].get<std::string>() + "\n" +
                      greedy["cases"][2]["text"].get<std::string>();
        doc.questions = {"What did Sara find?", "Who was happy?"};
        doc.answers = {"what is that", "Lily"};
        for (CompressionMode mode : {CompressionMode::QueryAgnostic, CompressionMode::QueryAware}) {
            RdRequest r;
            r.documents = {doc};
            r.methods = {"full", "varrate", "snapkv"};
            r.settings = test::small_codec_settings();
            r.kappas = {0.2, 0.4, 0.6};
            r.answer_at = {0.4, 0.6};
            r.mode = mode;
            r.max_new_tokens = 8;
            const RdResult rd = run_rate_distortion(*s, r);
            QCOMPARE(rd.basis_source, std::string("self-calibrated"));
            const size_t n_capture = mode == CompressionMode::QueryAware ? 2 : 1;
            CompareRequest c;
            c.context = doc.context;
            c.questions = doc.questions;
            c.answers = doc.answers;
            c.methods = r.methods;
            c.settings = r.settings;
            c.budgets = {0.4, 0.6};
            c.mode = mode;
            c.max_new_tokens = r.max_new_tokens;
            const CompareResult cr = run_compare(*s, c);
            for (const MethodRun& run : cr.runs) {
                const RdPoint* p = rd.find(run.method, run.budget);
                QVERIFY(p != nullptr);
                QCOMPARE(p->samples.size(), n_capture);
                const std::string where =
                    fmt::format("{} {} kappa {}", to_string(mode), run.method, run.budget);
                // compare keeps the first capture's diagnostics and every question's answers.
                RdSample s0 = p->samples[0];
                for (size_t i = 1; i < n_capture; ++i) {
                    s0.answers.insert(s0.answers.end(), p->samples[i].answers.begin(),
                                      p->samples[i].answers.end());
                    s0.correct.insert(s0.correct.end(), p->samples[i].correct.begin(),
                                      p->samples[i].correct.end());
                }
                expect_same(s0, run, where);
                QCOMPARE(p->answered, int64_t{2});
            }
            // kappa 0.2 cannot hold the charged basis of ~400 self-calibrated tokens: infeasible, recorded.
            QCOMPARE(rd.find("varrate", 0.2)->infeasible, static_cast<int64_t>(n_capture));
        }
    }

    void cli_writes_json_and_csv() {
        const auto out = test::temp_dir("rd-cli");
        const QString model = qs(demo_dir().string());
        const CliResult r = run_varrate({"rd",
                                         "--model",
                                         model,
                                         "--lengths",
                                         "256",
                                         "--depths",
                                         "50",
                                         "--samples",
                                         "2",
                                         "--seed",
                                         "31337",
                                         "--methods",
                                         "full,varrate,flat",
                                         "--kappas",
                                         "0.02,0.2,0.4",
                                         "--max-new-tokens",
                                         "8",
                                         "--threads",
                                         "2",
                                         "--out",
                                         qs(out.string())});
        QVERIFY2(r.exit_code == 0, qPrintable(r.err));
        QVERIFY2(r.out.contains("attention-output error per layer"), qPrintable(r.out));
        const nlohmann::json j = read_json_file(out / "rd.json");
        QCOMPARE(j["documents"].size(), size_t{2});
        QCOMPARE(j["documents"][0]["context_tokens"].get<int64_t>(), int64_t{256});
        QCOMPARE(j["points"].size(), size_t{1 + 2 * 3});
        QCOMPARE(j["answer_at"].get<std::vector<double>>(),
                 std::vector<double>{0.2});  // defaults on the grid
        QCOMPARE(j["model"].get<std::string>(), std::string("varrate-demo"));
        QVERIFY(!j["settings"].contains("budget"));
        QCOMPARE(j["source"]["niah"]["seed"].get<int64_t>(), int64_t{31337});
        for (const auto& p : j["points"]) {
            // Per-layer arrays where documents were measured (kappa 0.02 is infeasible at 256 tokens).
            QCOMPARE(p["layers"]["attn_output_error"].size(),
                     p["documents"].get<int64_t>() > 0 ? size_t{4} : size_t{0});
            QCOMPARE(p.value("answer_point", false),
                     p["kappa"].get<double>() == 0.2 || p["method"] == "full");
        }
        const std::vector<std::string> rows = lines(read_text_file(out / "rd.csv"));
        QCOMPARE(rows.size(), size_t{1 + 7});
        QVERIFY(rows[0].rfind("method,kappa,footprint,", 0) == 0);

        auto one_line_error = [&](const QStringList& args, const QString& needle) {
            const CliResult e = run_varrate(args);
            QVERIFY2(e.exit_code > 0, qPrintable(args.join(' ')));
            const QString err = e.err.trimmed();
            QVERIFY2(!err.contains('\n') && err.startsWith("varrate: error:"), qPrintable(err));
            QVERIFY2(err.contains(needle), qPrintable(needle + " not in: " + err));
        };
        const QString dir = qs(out.string());
        one_line_error({"rd", "--model", model, "--out", dir}, "--lengths");
        one_line_error({"rd", "--model", model, "--lengths", "256", "--kappas", "0.2", "--answer-at", "0.3",
                        "--out", dir},
                       "--answer-at");
        one_line_error({"rd", "--model", model, "--lengths", "256", "--question", "Why?", "--out", dir},
                       "--context-file");
        one_line_error({"rd", "--model", model, "--lengths", "256", "--budget", "0.2", "--out", dir},
                       "--budget");
    }
};

QTEST_GUILESS_MAIN(TestRateDistortion)
#include "test_core_rate_distortion.moc"
