// The desktop app's main window, offscreen, on the stories260k fixture: start-up with a model and a generated
// NIAH document, a four-method run filling the answers table and every view, cancel during prefill and a
// second run, exports (PNG, SVG, PDF, CSV, JSON), a session round trip, a bad model directory, the session
// autosave restored after a crash, and a corrupt settings file reset with a message.
#include "tests/gui_test_support.h"
#include "tests/test_support.h"

#include <QApplication>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QFileInfo>
#include <QImage>
#include <QLabel>
#include <QPushButton>
#include <QSignalSpy>
#include <QSvgRenderer>
#include <QTemporaryDir>

#include <nlohmann/json.hpp>

#include "base/file_io.h"
#include "core/data_paths.h"
#include "viz/answers_table.h"
#include "viz/app_settings.h"
#include "viz/document_view.h"
#include "viz/layer_summary.h"
#include "viz/main_window.h"
#include "viz/niah_accuracy_chart.h"
#include "viz/niah_heatmap_view.h"
#include "viz/niah_tab.h"
#include "viz/position_charts.h"
#include "viz/rank_heatmap.h"
#include "viz/run_model.h"
#include "viz/run_panel.h"
#include "viz/session_file.h"

using namespace varrate;
using namespace varrate::viz;

namespace {

constexpr int kLoadTimeoutMs = 120000;
constexpr int kRunTimeoutMs = 300000;

QByteArray read_all(const QString& path) {
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

// Starts the window on a model and waits until the model is loaded and the NIAH document generated.
bool start_on(MainWindow& w, const std::filesystem::path& model) {
    QSignalSpy idle(&w, &MainWindow::idle);
    StartupOptions o;
    o.model = QString::fromStdString(model.string());
    o.use_defaults = false;
    w.start(o);
    return idle.wait(kLoadTimeoutMs) && w.error_text().isEmpty();
}

bool run_and_wait(MainWindow& w, bool* ok) {
    QSignalSpy done(&w, &MainWindow::run_finished);
    w.run();
    if (!done.wait(kRunTimeoutMs)) return false;
    *ok = done.takeFirst().at(0).toBool();
    return true;
}

}  // namespace

class GuiTestMainWindow : public QObject {
    Q_OBJECT
    QTemporaryDir tmp_;
    std::unique_ptr<MainWindow> w_;  // shared by the tests that need a finished run
    QString ini() const { return tmp_.filePath("studio.ini"); }

    MainWindow& window_with_run() {
        if (w_ && w_->outcome()) return *w_;
        w_ = std::make_unique<MainWindow>(ini());
        w_->resize(1400, 900);
        w_->show();
        const auto dir = test::fixture("stories260k");
        if (!start_on(*w_, dir)) qFatal("model did not load: %s", qPrintable(w_->error_text()));
        bool ok = false;
        if (!run_and_wait(*w_, &ok) || !ok) qFatal("run failed: %s", qPrintable(w_->error_text()));
        return *w_;
    }

  private Q_SLOTS:
    void initTestCase() { QVERIFY(tmp_.isValid()); }

    void empty_state_prompts_for_a_model() {
        MainWindow w(ini());
        w.show();
        StartupOptions o;
        o.use_defaults = false;
        w.start(o);
        QVERIFY(!w.has_model());
        auto* welcome = w.findChild<QLabel*>("welcome");
        QVERIFY(welcome);
        QVERIFY(welcome->isVisible());
        QVERIFY(welcome->text().contains("Open a model"));
        w.run();  // no model: a clear message, no crash
        QVERIFY(w.error_text().contains("No model"));
    }

    // Default start-up on a fresh machine: the embedded demo model with its recorded codec defaults, a
    // generated needle document, and a run whose uncompressed answer is right.
    void starts_with_the_embedded_demo_model() {
        if (!std::filesystem::exists(test::source_dir() / "resources/models/varrate-demo/model.safetensors"))
            QSKIP("resources/models/varrate-demo has no weights yet (train them: see its MODEL_CARD.md)");
        MainWindow w(tmp_.filePath("fresh.ini"));
        w.resize(1400, 900);
        w.show();
        QSignalSpy idle(&w, &MainWindow::idle);
        w.start(StartupOptions{});
        QVERIFY(idle.wait(kLoadTimeoutMs));
        QVERIFY2(w.error_text().isEmpty(), qPrintable(w.error_text()));
        QCOMPARE(w.model_info().name, QString("varrate-demo"));
        QCOMPARE(w.model_info().joint_dim, int64_t{128});  // 2 * 2 kv heads * 32
        QVERIFY(!w.model_info().basis_source.isEmpty());
        QVERIFY(w.run_panel()->defaults_text().contains("varrate-codec.json"));
        const RunSettings s = w.run_panel()->settings();
        QCOMPARE(s.codec.rank, w.model_info().codec_defaults->rank);
        // The first-run regime, not the model's general-use budget: kappa 0.09, query-agnostic, a document
        // with three distractor needles (as `varrate demo`).
        QCOMPARE(s.codec.budget, DemoRegime{}.budget);
        QVERIFY(s.codec.budget < w.model_info().codec_defaults->budget);
        QCOMPARE(s.mode, CompressionMode::QueryAgnostic);
        QCOMPARE(w.document().count("The special magic number for"), 1 + 3);
        bool ok = false;
        QVERIFY(run_and_wait(w, &ok) && ok);
        QVERIFY(w.outcome());
        QCOMPARE(w.outcome()->result.runs.at(0).method, std::string("full"));
        QCOMPARE(w.outcome()->result.runs.at(0).correct.at(0), 1);
        // The methods part ways: at least one compressing method misses what full finds.
        int wrong = 0;
        for (const MethodRun& r : w.outcome()->result.runs)
            if (r.method != "full" && (!r.infeasible.empty() || (!r.correct.empty() && r.correct[0] == 0)))
                ++wrong;
        QVERIFY2(wrong >= 1, "every method answered right in the first-run regime");
    }

    void opens_with_model_and_default_document() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        MainWindow w(ini());
        QVERIFY2(start_on(w, dir), qPrintable(w.error_text()));
        QVERIFY(w.has_model());
        QCOMPARE(w.model_info().joint_dim, int64_t{64});  // 2 * 4 kv heads * 8
        QCOMPARE(w.model_info().n_layer, int64_t{5});
        // A generated NIAH document with its question and expected answer.
        QVERIFY(w.document().contains("The special magic number for"));
        const RunSettings s = w.run_panel()->settings();
        QCOMPARE(s.questions.size(), size_t{1});
        QVERIFY(QString::fromStdString(s.questions[0]).startsWith("What is the special magic number"));
        QCOMPARE(s.answers.size(), size_t{1});
        QVERIFY(w.document().contains(QString::fromStdString(s.answers[0])));
        // RULER's prompt: the reply's start is given, and with the expected value it is the needle's
        // sentence.
        QCOMPARE(s.answer_prefixes.size(), size_t{1});
        QVERIFY(
            w.document().contains(QString::fromStdString(s.answer_prefixes[0] + " " + s.answers[0] + ".")));
        // Small-model defaults for D = 64, and the UI says so.
        QCOMPARE(s.codec.rank, int64_t{64});
        QCOMPARE(s.codec.r_min, int64_t{4});
        QCOMPARE(s.codec.stride, int64_t{32});
        QCOMPARE(s.codec.window, int64_t{16});
        QCOMPARE(s.codec.obs_window, int64_t{16});
        QCOMPARE(s.codec.budget, 0.4);
        QVERIFY(w.run_panel()->defaults_text().contains("D = 64"));
        QCOMPARE(s.methods, (std::vector<std::string>{"full", "varrate", "flat", "snapkv"}));
    }

    void run_fills_answers_and_views() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        MainWindow& w = window_with_run();
        const auto outcome = w.outcome();
        QVERIFY(outcome);
        QCOMPARE(outcome->result.runs.size(), size_t{4});
        // Answers table: one row per method with its answer, footprint and times.
        AnswersTable* t = w.answers();
        QCOMPARE(t->rowCount(), 4);
        QStringList names;
        for (int r = 0; r < 4; ++r) names << t->item(r, 0)->text();
        QCOMPARE(names, (QStringList{"full", "varrate", "flat", "snapkv"}));
        for (int r = 0; r < 4; ++r) {
            QVERIFY(t->item(r, t->correct_column())->text().endsWith("/1"));
            QVERIFY(t->item(r, t->footprint_column())->text().endsWith("%"));
        }
        QCOMPARE(t->item(0, t->footprint_column())->text(), QString("100.00 %"));
        const double fp = outcome->result.runs[1].footprint_fraction;
        QVERIFY2(fp > 0.3 && fp <= 0.4 + 1e-9, qPrintable(QString::number(fp)));
        QVERIFY(outcome->result.runs[1].basis_bytes > 0);  // the self-calibrated basis is charged
        // No basis ships with stories260k: VarRate/flat self-calibrate and the window says so.
        QVERIFY(outcome->result.runs[1].self_calibrated);
        QCOMPARE(t->item(1, t->footprint_column() + 4)->text(), QString("yes"));
        QCOMPARE(t->item(0, t->footprint_column() + 4)->text(), QString("no"));
        // Resident beside accounted: VarRate's compressed store holds exactly its accounted bytes (ranks are
        // charged with the anchor indices, positions derived); the full cache holds all of it.
        const MethodRun& vr = outcome->result.runs[1];
        QVERIFY2(
            vr.resident_bytes == vr.stored_bytes,
            qPrintable(QString("resident %1, accounted %2").arg(vr.resident_bytes).arg(vr.stored_bytes)));
        QCOMPARE(t->item(0, t->footprint_column() + 1)->text(), QString("100.00 %"));
        QVERIFY(t->item(1, t->footprint_column() + 1)->text().endsWith("%"));
        QVERIFY(w.run_panel()->self_calibrated_shown());
        // The data model and every view got the run.
        RunModel* m = w.run_model();
        QVERIFY(m->has_result());
        QCOMPARE(m->n_layer(), 5);
        QVERIFY(m->n_tokens() > 300);
        QCOMPARE(w.axis()->length(), m->n_tokens());
        QVERIFY(m->needle_span().has_value());  // the generated needle is marked
        QVERIFY(w.charts()->salience()->has_data());
        QVERIFY(w.charts()->rank()->has_data());
        QVERIFY(w.charts()->error()->has_data());
        QCOMPARE(w.rank_heatmap()->method(), QString("varrate"));
        const auto& ranks = outcome->result.runs[1].layers[2].rank;
        QCOMPARE(w.rank_heatmap()->rank_at(2, 100), static_cast<int>(ranks[100].item<int64_t>()));
        QVERIFY(w.document_view()->token_tooltip(1).size() > 0);
        QCOMPARE(w.document_view()->method(), QString("varrate"));
        QVERIFY(!w.grab().toImage().isNull());
        QVERIFY(w.error_text().isEmpty());
    }

    void exports_are_valid_files() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        MainWindow& w = window_with_run();
        const QString base = tmp_.path() + "/export";
        // Results JSON: the `varrate compare --json` schema, one object per method.
        QVERIFY(w.export_results_json(base + ".json"));
        const auto j = nlohmann::json::parse(read_all(base + ".json").toStdString());
        QVERIFY(j.is_array() || j.is_object());
        const auto& methods = j.is_array() ? j : j.at("methods");
        QCOMPARE(methods.size(), size_t{4});
        QCOMPARE(methods[1]["method"].get<std::string>(), std::string("varrate"));
        QCOMPARE(methods[1]["footprint_fraction"].get<double>(),
                 w.outcome()->result.runs[1].footprint_fraction);
        // Rank log CSV: header + one row per method, layer and position.
        QVERIFY(w.export_rank_log(base + ".csv"));
        const QList<QByteArray> lines = read_all(base + ".csv").trimmed().split('\n');
        QCOMPARE(lines[0],
                 QByteArray("method,layer,position,token_id,token_text,salience,rank,exact,rel_error"));
        int64_t rows = 0;
        for (const auto& r : w.outcome()->result.runs)
            for (const auto& d : r.layers) rows += d.n_tokens;
        QCOMPARE(static_cast<int64_t>(lines.size() - 1), rows);
        QVERIFY(lines[1].startsWith("full,0,0,"));
        // Answers CSV.
        QVERIFY(w.export_answers_csv(base + "_answers.csv"));
        QCOMPARE(read_all(base + "_answers.csv").trimmed().split('\n').size(), 5);
        // Charts: PNG decodes, SVG parses, PDF has its header; the current chart follows clicks.
        w.set_current_chart(w.charts()->rank());
        QVERIFY(w.export_chart(base + ".png"));
        const QImage png(base + ".png");
        QVERIFY(!png.isNull());
        QVERIFY(png.width() >= w.charts()->rank()->width());
        QVERIFY(w.export_chart(base + ".svg"));
        QSvgRenderer svg(base + ".svg");
        QVERIFY(svg.isValid());
        QVERIFY(read_all(base + ".svg").contains("<svg"));
        QVERIFY(w.export_chart(base + ".pdf"));
        QVERIFY(read_all(base + ".pdf").startsWith("%PDF"));
        // A bad target shows an error instead of crashing.
        QVERIFY(!w.export_chart(base + ".bmpx"));
        QVERIFY(!w.error_text().isEmpty());
        w.clear_error();
    }

    void session_round_trip() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        MainWindow& w = window_with_run();
        RunSettings s = w.run_panel()->settings();
        s.codec.budget = 0.35;
        s.mode = CompressionMode::QueryAgnostic;
        s.max_new_tokens = 9;
        s.questions.push_back("Who is Lily?");
        s.answers.push_back("girl");
        s.answer_prefixes.resize(s.questions.size());
        s.answer_prefixes.back() = "Lily is a";
        w.run_panel()->set_settings(s);
        const QString path = tmp_.filePath("s.varrate.json");
        QVERIFY(w.save_session(path));

        MainWindow w2(ini());
        QVERIFY(w2.open_session(path));
        const RunSettings r = w2.run_panel()->settings();
        QCOMPARE(r.codec.budget, 0.35);
        QCOMPARE(r.codec.r_min, s.codec.r_min);
        QCOMPARE(r.codec.stride, s.codec.stride);
        QVERIFY(r.mode == CompressionMode::QueryAgnostic);
        QCOMPARE(r.max_new_tokens, int64_t{9});
        QCOMPARE(r.questions, s.questions);
        QCOMPARE(r.answers, s.answers);
        QCOMPARE(r.answer_prefixes, s.answer_prefixes);
        QCOMPARE(r.methods, s.methods);
        QCOMPARE(w2.document(), w.document());
        QCOMPARE(w2.model_dir(), w.model_dir());
        // Results and per-token diagnostics come back without re-running.
        QVERIFY(w2.outcome());
        const auto& a = w.outcome()->result.runs;
        const auto& b = w2.outcome()->result.runs;
        QCOMPARE(b.size(), a.size());
        for (size_t i = 0; i < a.size(); ++i) {
            QCOMPARE(b[i].method, a[i].method);
            QCOMPARE(b[i].answers, a[i].answers);
            QCOMPARE(b[i].correct, a[i].correct);
            QCOMPARE(b[i].footprint_fraction, a[i].footprint_fraction);
            QCOMPARE(b[i].context_ids, a[i].context_ids);
            QCOMPARE(b[i].layers.size(), a[i].layers.size());
        }
        QCOMPARE(w2.answers()->rowCount(), 4);
        QCOMPARE(w2.run_model()->n_tokens(), w.run_model()->n_tokens());
        for (int layer : {-1, 0, 4})
            QCOMPARE(w2.run_model()->series("varrate", TokenMetric::Rank, layer),
                     w.run_model()->series("varrate", TokenMetric::Rank, layer));
        QCOMPARE(w2.run_model()->exact_mask("snapkv", 1), w.run_model()->exact_mask("snapkv", 1));
        QCOMPARE(w2.run_model()->needle_span(), w.run_model()->needle_span());
        // A file that is not a session is refused with a message.
        QVERIFY(!w2.open_session(tmp_.filePath("export.csv")));
        QVERIFY(!w2.error_text().isEmpty());
        QSignalSpy idle(&w2, &MainWindow::idle);
        if (w2.busy()) QVERIFY(idle.wait(kLoadTimeoutMs));
    }

    void cancel_during_prefill_then_run_again() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        MainWindow w(ini());
        w.show();
        QVERIFY2(start_on(w, dir), qPrintable(w.error_text()));
        const QString short_doc = w.document();
        const RunSettings s0 = w.run_panel()->settings();
        // A long document (~10k tokens) so the prefill takes seconds on the CPU.
        const auto greedy = read_json_file(dir / "expected_greedy.json");
        QString story = QString::fromStdString(greedy["cases"][0]["text"].get<std::string>()) + "\n";
        QString long_doc;
        while (long_doc.size() < 45000) long_doc += story;
        w.set_document(long_doc, "pasted");
        RunSettings s = s0;
        s.methods = {"full", "snapkv"};  // no calibration pass before the first prefill
        w.run_panel()->set_settings(s);

        QSignalSpy done(&w, &MainWindow::run_finished);
        w.run();
        QVERIFY(w.run_panel()->running());
        QTRY_VERIFY_WITH_TIMEOUT(w.run_panel()->stage_text().contains("prefill"), 60000);
        QElapsedTimer t;
        t.start();
        w.cancel();
        QVERIFY(done.wait(5000));
        const qint64 ms = t.elapsed();
        QVERIFY2(ms < 1000, qPrintable(QString("cancel took %1 ms").arg(ms)));
        QCOMPARE(done.takeFirst().at(0).toBool(), false);
        QVERIFY(!w.run_panel()->running());
        QVERIFY(w.error_text().isEmpty());  // a cancel is not an error

        // The app stays usable: the next run (short document, the loaded session reused) completes.
        w.set_document(short_doc, "generated");
        w.run_panel()->set_settings(s0);
        bool ok = false;
        QVERIFY(run_and_wait(w, &ok));
        QVERIFY2(ok, qPrintable(w.error_text()));
        QCOMPARE(w.answers()->rowCount(), 4);
    }

    void bad_model_directory_shows_an_error() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        MainWindow w(ini());
        w.show();
        QVERIFY(start_on(w, dir));
        const QString good = w.model_dir();
        // A folder without config.json.
        QTemporaryDir empty;
        QSignalSpy idle(&w, &MainWindow::idle);
        w.open_model(empty.path());
        QVERIFY(idle.wait(kLoadTimeoutMs));
        QVERIFY2(w.error_text().contains(QDir::cleanPath(empty.path())), qPrintable(w.error_text()));
        QVERIFY(w.error_text().contains("config.json"));
        // The loaded model stays in use.
        QCOMPARE(w.model_dir(), good);
        // A path that does not exist.
        w.open_model(empty.path() + "/missing");
        QVERIFY(idle.wait(kLoadTimeoutMs));
        QVERIFY(w.error_text().contains("does not exist"));
        bool ok = false;
        QVERIFY(run_and_wait(w, &ok));
        QVERIFY2(ok, qPrintable(w.error_text()));
    }

    void niah_sweep_shows_heatmaps() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        MainWindow& w = window_with_run();
        NiahTab* tab = w.niah_tab();
        tab->set_lengths("64, 128");
        tab->set_depths("25 75");
        tab->set_samples(1);
        // Methods and mode come from the Run panel; the tab's line follows it.
        const RunSettings before = w.run_panel()->settings();
        RunSettings run = before;
        run.methods = {"full", "snapkv"};
        run.mode = CompressionMode::QueryAgnostic;
        w.run_panel()->set_settings(run);
        QVERIFY2(tab->run_settings_text().startsWith("run panel: full, snapkv · query-agnostic · "),
                 qPrintable(tab->run_settings_text()));
        tab->set_budgets("0.3, 0.5");
        const QString out = tmp_.filePath("niah");
        tab->set_output_dir(out);
        QSignalSpy done(&w, &MainWindow::niah_finished);
        w.run_niah();
        QVERIFY(done.wait(kRunTimeoutMs));
        QVERIFY2(done.takeFirst().at(0).toBool(), qPrintable(w.error_text()));
        const NiahSummary& s = tab->heatmaps()->summary();
        QCOMPARE(s.methods, (std::vector<std::string>{"full", "snapkv"}));
        QCOMPARE(s.mode, std::string("query-agnostic"));
        // One heatmap per method and budget: full once, SnapKV at 0.3 and 0.5.
        QCOMPARE(s.series.size(), size_t{3});
        QCOMPARE(s.cells.size(), size_t{3 * 2 * 2});
        for (const NiahCell& c : s.cells) QCOMPARE(c.n, int64_t{1});
        QCOMPARE(s.cell(2, 0, 0).budget, 0.5);
        QVERIFY(QFile::exists(out + "/summary.json"));
        // Accuracy vs budget from the same summary: SnapKV's line at both budgets, full as the reference.
        const NiahAccuracyChart* chart = tab->accuracy_chart();
        QCOMPARE(chart->series_count(), 1);
        QVERIFY(chart->has_reference());
        for (size_t i : {size_t{1}, size_t{2}})
            QCOMPARE(chart->value_at("snapkv", s.series[i].budget), s.overall(i).accuracy());
        // The overall line of each method and budget, and the cells' tooltips, carry the 95 % interval.
        const QString overall = tab->overall_text();
        QVERIFY2(overall.contains("snapkv, budget 0.5: ") && overall.contains("95 % interval"),
                 qPrintable(overall));
        const QString tip = niah_cell_tooltip(s, 2, s.cell(2, 1, 1));
        QVERIFY2(
            tip.startsWith("snapkv, budget 0.5, length 128, depth 75%: ") && tip.contains("95 % interval"),
            qPrintable(tip));
        // What SnapKV kept of the needle, over its 4 records; nothing for full, which keeps everything.
        const QString kept = tab->retention_text();
        QVERIFY2(kept.contains("snapkv, budget 0.3: right") && !kept.contains("full:"), qPrintable(kept));
        const auto& t = s.retention.at("snapkv/k0.3");
        QCOMPARE(t.needle_correct.n + t.needle_wrong.n, int64_t{4});
        QVERIFY(kept.contains(
            QString("(%1)").arg(t.needle_correct.n > 0 ? t.needle_correct.n : t.needle_wrong.n)));
        QVERIFY(QFile::exists(out + "/records/snapkv/k0.5/L128_D75_S0.json"));
        QCOMPARE(QDir(out + "/records/snapkv/k0.3").entryList(QDir::Files).size(), 4);
        // Rerunning resumes: every record is reused.
        w.run_niah();
        QVERIFY(done.wait(kRunTimeoutMs));
        QVERIFY(tab->status_text().contains("0 computed"));
        w.run_panel()->set_settings(before);
    }

    // Run > Calibrate on Files: a basis from text files, written beside the model through the worker (with
    // progress and cancel), and used by the next run instead of self-calibration.
    void calibrate_on_files_writes_basis_beside_model() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        // A copy of the fixture model (links), so that the basis is written beside it and not into the
        // fixture.
        const QString model = tmp_.filePath("calibrated-model");
        QVERIFY(QDir().mkpath(model));
        for (const char* f : {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                              "tokenizer_config.json"})
            std::filesystem::create_symlink(dir / f, std::filesystem::path(model.toStdString()) / f);
        const QString texts =
            QString::fromStdString((test::source_dir() / "resources/eval/stories260k").string());
        const QStringList files = {texts + "/calib_a.txt", texts + "/calib_b.txt"};
        const QString basis = model + "/varrate-basis.safetensors";
        MainWindow w(tmp_.filePath("calibrate.ini"));  // not the shared ini: its recent models stay
        w.show();
        QVERIFY2(start_on(w, model.toStdString()), qPrintable(w.error_text()));
        QVERIFY(w.model_info().basis_source.isEmpty());  // none shipped: runs self-calibrate
        QSignalSpy done(&w, &MainWindow::calibration_finished);

        // Cancelled while queued behind a document generation: nothing is written.
        w.generate_document(NiahDocRequest{});
        w.calibrate_on_files(files);
        QVERIFY(w.run_panel()->cancel_button()->isEnabled());
        w.cancel();
        QVERIFY(done.wait(kRunTimeoutMs));
        QCOMPARE(done.takeFirst().at(0).toBool(), false);
        QVERIFY(!QFile::exists(basis));
        QSignalSpy idle(&w, &MainWindow::idle);
        if (w.busy()) QVERIFY(idle.wait(kLoadTimeoutMs));

        w.calibrate_on_files(files);
        QVERIFY(done.wait(kRunTimeoutMs));
        QVERIFY2(done.takeFirst().at(0).toBool(), qPrintable(w.error_text()));
        QVERIFY(QFile::exists(basis));
        QCOMPARE(w.model_info().basis_source, basis);
        QVERIFY(!w.run_panel()->cancel_button()->isEnabled());
        bool ok = false;
        QVERIFY(run_and_wait(w, &ok) && ok);
        QCOMPARE(w.outcome()->result.runs.at(1).method, std::string("varrate"));
        QVERIFY(!w.outcome()->result.runs.at(1).self_calibrated);
        QCOMPARE(QString::fromStdString(w.outcome()->result.basis_source), basis);
    }

    void theme_and_recent_models_persist() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        {
            MainWindow w(ini());
            w.set_theme("light");
            QCOMPARE(QApplication::palette().color(QPalette::Window).lightness() > 128, true);
        }
        MainWindow w2(ini());
        QCOMPARE(w2.theme(), QString("light"));
        AppSettings s(ini());
        QCOMPARE(QDir::cleanPath(s.last_model()), QDir::cleanPath(QString::fromStdString(dir.string())));
        w2.set_theme("dark");
        QVERIFY(QApplication::palette().color(QPalette::Window).lightness() < 80);
    }

    // A run is autosaved; the window is destroyed without closing (as a crash leaves it); the next start
    // restores the model, document, settings and results. A normal close removes the autosave.
    void autosave_restores_the_last_state_after_a_crash() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const QString ini = tmp_.filePath("crash.ini");
        const QString autosave = AppSettings(ini).autosave_file();
        QString document;
        std::vector<std::vector<std::string>> answers;
        double budget = 0;
        {
            auto w = test::window_after_fixture_run(ini, kLoadTimeoutMs, kRunTimeoutMs, 60000);
            // The autosave of the run's results: one of the document alone may come first when the run
            // takes longer than the autosave's delay (a loaded machine).
            const auto autosave_has_results = [&] {
                try {
                    return QFileInfo::exists(autosave) && load_session(autosave).outcome != nullptr;
                } catch (const std::exception&) {
                    return false;
                }
            };
            QTRY_VERIFY_WITH_TIMEOUT(autosave_has_results(), 10000);
            document = w->document();
            budget = w->run_panel()->settings().codec.budget;
            for (const MethodRun& r : w->outcome()->result.runs) answers.push_back(r.answers);
        }  // no close(): the autosave stays, as after a crash
        QVERIFY(QFileInfo::exists(autosave));
        MainWindow w(ini);
        w.show();
        QSignalSpy idle(&w, &MainWindow::idle);
        w.start(StartupOptions{});  // as the app starts: no --model, no --document
        QVERIFY(idle.wait(kLoadTimeoutMs));
        QVERIFY2(w.error_text().isEmpty(), qPrintable(w.error_text()));
        QCOMPARE(QDir::cleanPath(w.model_dir()), QDir::cleanPath(QString::fromStdString(dir.string())));
        QCOMPARE(w.document(), document);
        QCOMPARE(w.run_panel()->settings().codec.budget, budget);
        QVERIFY(w.outcome());
        std::vector<std::vector<std::string>> restored;
        for (const MethodRun& r : w.outcome()->result.runs) restored.push_back(r.answers);
        QVERIFY(restored == answers);
        w.close();
        QVERIFY(!QFileInfo::exists(autosave));
    }

    // Binary bytes in the settings file: set aside, defaults used, and the banner says so once.
    void corrupt_settings_are_reset_with_a_message() {
        const QString ini = tmp_.filePath("corrupt.ini");
        {
            QFile f(ini);
            QVERIFY(f.open(QIODevice::WriteOnly));
            static const char bytes[] = "[view]\ntheme=light\n\0\xff\xfe[window";
            f.write(QByteArray(bytes, sizeof bytes - 1));  // the NUL inside included
        }
        {
            MainWindow w(ini);
            QVERIFY2(w.error_text().contains("corrupt.ini was reset to defaults: it holds binary bytes"),
                     qPrintable(w.error_text()));
            QCOMPARE(w.theme(), QString("dark"));
            QCOMPARE(QDir(tmp_.path()).entryList({"corrupt.ini.corrupt-*"}).size(), 1);
            w.set_theme("light");
            w.close();
        }
        MainWindow again(ini);
        QVERIFY2(again.error_text().isEmpty(), qPrintable(again.error_text()));
        QCOMPARE(again.theme(), QString("light"));
        again.set_theme("dark");
    }

    void cleanupTestCase() { w_.reset(); }
};

QTEST_MAIN(GuiTestMainWindow)
#include "gui_test_main_window.moc"
