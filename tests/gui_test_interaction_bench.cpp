// The interaction benchmark of the desktop app (varrate-studio --bench-interaction) on a small real run:
// stories260k, a 512-token request (shortened to the fixture's positions), a few events per kind. A smoke
// test of the tool — every interaction kind is reported with positive finite latencies and real paints, the
// JSON is complete, the command line works — not a timing assertion.
#include "tests/test_support.h"

#include <QApplication>
#include <QFile>
#include <QProcess>
#include <QTemporaryDir>

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/studio/interaction_bench.h"
#include "base/error.h"

using namespace varrate;
using namespace varrate::viz;

namespace {

const std::vector<std::string> kKinds = {
    "hover_document",
    "scroll_document",
    "repaint_document_full",
    "repaint_salience_chart_full",
    "repaint_rank_chart_full",
    "repaint_error_chart_full",
    "repaint_rank_heatmap_full",
    "repaint_document_zoomed",
    "repaint_salience_chart_zoomed",
    "repaint_rank_chart_zoomed",
    "repaint_error_chart_zoomed",
    "repaint_rank_heatmap_zoomed",
    "cursor_linked",
    "hover_rank_chart",
    "wheel_zoom_linked",
    "zoom_reset_linked",
    "switch_metric",
    "switch_layer",
    "switch_method",
    "budget_step",
    "budget_step_worker",
    "rmin_step",
    "rmin_step_worker",
    "grab_window",
};

nlohmann::json read_json(const QString& path) {
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) return {};
    return nlohmann::json::parse(f.readAll().toStdString());
}

bool positive_finite(const nlohmann::json& v) {
    return v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0;
}

// Every kind present with n events and positive finite, ordered statistics; returns "" or what is wrong.
QString check_interactions(const nlohmann::json& j, int n) {
    if (!j.contains("interactions") || !j["interactions"].is_object()) return "no interactions object";
    const nlohmann::json& all = j["interactions"];
    if (all.size() != kKinds.size())
        return QString("%1 interaction kinds, expected %2").arg(all.size()).arg(kKinds.size());
    for (const std::string& kind : kKinds) {
        const QString k = QString::fromStdString(kind);
        if (!all.contains(kind)) return "missing " + k;
        const nlohmann::json& s = all[kind];
        if (s.value("n", 0) != n) return k + ": n is not " + QString::number(n);
        for (const char* field : {"median_ms", "p95_ms", "max_ms", "mean_ms", "paints_per_event"}) {
            // A *_worker kind is the worker's share of a step: timed off the GUI thread, it paints nothing.
            const bool worker = k.endsWith("_worker");
            if (worker && std::string(field) == "paints_per_event") {
                if (s.value(field, -1.0) != 0.0) return k + ": paints on the worker";
                continue;
            }
            if (!s.contains(field) || !positive_finite(s[field]))
                return k + ": " + field + " is not positive";
        }
        // A live step includes the worker's re-allocation.
        if (kind == "budget_step" &&
            !(s["median_ms"].get<double>() >= all["budget_step_worker"].value("median_ms", 0.0)))
            return k + ": faster than its worker share";
        if (!(s["median_ms"].get<double>() <= s["p95_ms"].get<double>() &&
              s["p95_ms"].get<double>() <= s["max_ms"].get<double>()))
            return k + ": median <= p95 <= max does not hold";
        if (s.value("description", std::string()).empty()) return k + ": no description";
    }
    return {};
}

}  // namespace

class GuiTestInteractionBench : public QObject {
    Q_OBJECT
    QTemporaryDir tmp_;

  private Q_SLOTS:
    void percentiles() {
        std::vector<double> v;
        for (int i = 20; i >= 1; --i) v.push_back(i);
        QCOMPARE(percentile_ms(v, 50), 10.0);
        QCOMPARE(percentile_ms(v, 95), 19.0);
        QCOMPARE(percentile_ms(v, 100), 20.0);
        QCOMPARE(percentile_ms({3.5}, 95), 3.5);
        QCOMPARE(percentile_ms({}, 50), 0.0);
    }

    void small_real_run() {
        VARRATE_REQUIRE_FIXTURE(model, "stories260k");
        InteractionBenchOptions o;
        o.model_dir = QString::fromStdString(model.string());
        o.tokens = 512;
        o.repeats = 4;
        o.warmup = 1;
        o.window_size = QSize(1400, 900);
        o.settings_file = tmp_.filePath("bench.ini");
        o.job_timeout_s = 120;
        QStringList lines;
        o.log = [&](const QString& line) { lines << line; };
        const InteractionBenchReport r = run_interaction_bench(o);
        QVERIFY(lines.join('\n').contains("run finished"));

        const QString out = tmp_.filePath("bench.json");
        write_report(r, out);
        const nlohmann::json j = read_json(out);
        QCOMPARE(j.value("format", std::string()), std::string("varrate-studio-interaction-bench"));
        QCOMPARE(j.value("requested_tokens", 0), 512);
        // The fixture has 512 positions: the document leaves room for the question and the answer.
        const int tokens = j.value("tokens", 0);
        QVERIFY2(tokens >= 300 && tokens <= 512, qPrintable(QString::number(tokens)));
        QCOMPARE(j.value("layers", 0), 5);
        QCOMPARE(j.value("joint_dim", 0), 64);
        QCOMPARE(j["methods"].size(), size_t(4));
        QCOMPARE(j.value("platform", std::string()), QGuiApplication::platformName().toStdString());
        QCOMPARE(j["window_size"].value("width", 0), 1400);
        QCOMPARE(j["window_size"].value("height", 0), 900);
        QVERIFY(j["document_viewport"].value("width", 0) > 0 &&
                j["document_viewport"].value("height", 0) > 0);
        QVERIFY(positive_finite(j["run_wall_s"]));
        QVERIFY(positive_finite(j["run_total_s"]));
        const QString bad = check_interactions(j, 4);
        QVERIFY2(bad.isEmpty(), qPrintable(bad));
        // A hover and a linked cursor move repaint the document view, the three charts and the heatmap.
        QVERIFY(j["interactions"]["hover_document"]["paints_per_event"].get<double>() >= 5);
        QVERIFY(j["interactions"]["cursor_linked"]["paints_per_event"].get<double>() >= 5);

        const QString table = format_table(r);
        for (const std::string& kind : kKinds) QVERIFY(table.contains(QString::fromStdString(kind)));
    }

    void command_line() {
        VARRATE_REQUIRE_FIXTURE(model, "stories260k");
        const auto exe = test::bin_dir() / "varrate-studio";
        QVERIFY2(std::filesystem::exists(exe), "varrate-studio is not built (the suites depend on it)");
        const QString out = tmp_.filePath("cli.json");
        QProcess p;
        p.start(QString::fromStdString(exe.string()),
                {"--bench-interaction", out, "--model", QString::fromStdString(model.string()), "--tokens",
                 "512", "--repeats", "2", "--settings", tmp_.filePath("cli.ini")});
        QVERIFY(p.waitForFinished(120000));
        const QString err = QString::fromUtf8(p.readAllStandardError());
        QVERIFY2(p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0, qPrintable(err));
        const QString table = QString::fromUtf8(p.readAllStandardOutput());
        QVERIFY2(table.contains("hover_document") && table.contains("median ms"), qPrintable(table));
        QVERIFY(err.contains("running full,varrate,flat,snapkv"));
        const nlohmann::json j = read_json(out);
        QCOMPARE(j.value("requested_tokens", 0), 512);  // a document longer than the view: scrolling is timed
        const QString bad = check_interactions(j, 2);
        QVERIFY2(bad.isEmpty(), qPrintable(bad));

        // A missing model directory is one error line and a non-zero exit; no file is written.
        const QString none = tmp_.filePath("none.json");
        p.start(QString::fromStdString(exe.string()),
                {"--bench-interaction", none, "--model", tmp_.filePath("no-such-model")});
        QVERIFY(p.waitForFinished(60000));
        QCOMPARE(p.exitCode(), 1);
        QVERIFY(QString::fromUtf8(p.readAllStandardError()).contains("not a model directory"));
        QVERIFY(!QFile::exists(none));
    }

    void bad_options() {
        InteractionBenchOptions o;
        QVERIFY_THROWS_EXCEPTION(Error, run_interaction_bench(o));  // no model
        o.model_dir = tmp_.filePath("missing");
        QVERIFY_THROWS_EXCEPTION(Error, run_interaction_bench(o));
    }
};

QTEST_MAIN(GuiTestInteractionBench)
#include "gui_test_interaction_bench.moc"
