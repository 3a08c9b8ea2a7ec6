// The NIAH tab without a model: a sweep's options come from the run panel's settings (methods, mode, codec,
// answer length, chat) and the tab's own grid and budget list, the read-only line that mirrors the panel, and
// the accuracy-vs-budget chart on synthetic summaries (one line per compressing method with the pooled
// accuracies, full as the reference, tooltips, theme colours, CSV data, PNG/SVG export, context menu).
#include "tests/test_support.h"

#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFile>
#include <QLineEdit>
#include <QMenu>
#include <QPainter>
#include <QSignalSpy>
#include <QSpinBox>
#include <QSvgRenderer>
#include <QTemporaryDir>
#include <QTimer>

#include <cmath>
#include <map>

#include "base/error.h"
#include "codec/registry.h"
#include "viz/chart_export.h"
#include "viz/niah_accuracy_chart.h"
#include "viz/niah_heatmap_view.h"
#include "viz/niah_tab.h"
#include "viz/run_panel.h"
#include "viz/view_style.h"

using namespace varrate;
using namespace varrate::viz;

namespace {

struct Counts {
    int64_t n = 0, correct = 0, infeasible = 0;
};

// A summary of `methods` x `budgets` over lengths x depths, each cell's counts from `counts(series, d, l)`.
NiahSummary make_summary(const std::vector<std::string>& methods, const std::vector<double>& budgets,
                         const std::vector<int64_t>& lengths, const std::vector<double>& depths,
                         const std::function<Counts(const NiahSeries&, size_t, size_t)>& counts) {
    NiahSummary s;
    s.model = "synthetic";
    s.mode = "query-agnostic";
    s.needles = "fresh";
    s.methods = methods;
    s.budgets = budgets;
    s.series = niah_series(methods, budgets);
    s.lengths = lengths;
    s.depths = depths;
    s.samples = 2;
    for (const NiahSeries& ser : s.series)
        for (size_t d = 0; d < depths.size(); ++d)
            for (size_t l = 0; l < lengths.size(); ++l) {
                const Counts c = counts(ser, d, l);
                s.cells.push_back(
                    {ser.method, ser.budget, lengths[l], depths[d], c.n, c.correct, c.infeasible});
            }
    return s;
}

// Four methods at three budgets listed out of order, 2 lengths x 3 depths, 2 documents per cell. Pooled over
// the 12 documents: full 12/12; varrate 0.05: 6/12, 0.1: 8/12, 0.3: 12/12; flat 0.05: 0, 0.1: 6/12, 0.3:
// 12/12; snapkv 0.05: 6/12, 0.1: 6/12, 0.3: no records (infeasible at every length).
NiahSummary sweep_summary() {
    return make_summary({"full", "varrate", "flat", "snapkv"}, {0.3, 0.05, 0.1}, {64, 128}, {0, 50, 100},
                        [](const NiahSeries& s, size_t d, size_t l) -> Counts {
                            const bool k005 = s.budget == 0.05, k01 = s.budget == 0.1;
                            if (s.method == "full") return {2, 2};
                            if (s.method == "varrate") return {2, k005 ? 1 : k01 ? (d == 0 ? 0 : 2) : 2};
                            if (s.method == "flat") return {2, k005 ? 0 : k01 ? 1 : 2};
                            if (k005) return {2, 1};
                            if (k01) return {2, l == 1 ? 0 : 2};
                            return {0, 0, 2};
                        });
}

// Run-panel settings that differ from every default, so that each one is seen to arrive.
RunSettings sample_run() {
    RunSettings run;
    run.methods = {"varrate", "snapkv"};
    run.mode = CompressionMode::QueryAgnostic;
    run.codec.budget = 0.15;
    run.codec.r_min = 3;
    run.codec.rank = 48;
    run.codec.stride = 8;
    run.codec.anchors = 2;
    run.codec.window = 12;
    run.codec.obs_window = 10;
    run.codec.pool_kernel = 3;
    run.codec.paper_accounting = true;
    run.max_new_tokens = 7;
    run.chat = true;
    return run;
}

double ink_share(const QImage& image) {
    std::map<QRgb, int> counts;
    const QImage img = image.convertToFormat(QImage::Format_RGB32);
    for (int y = 0; y < img.height(); ++y)
        for (int x = 0; x < img.width(); ++x) ++counts[img.pixel(x, y)];
    int most = 0;
    for (const auto& [c, n] : counts) most = std::max(most, n);
    return 1.0 - static_cast<double>(most) / (img.width() * img.height());
}

QColor pixel_at(const QImage& img, QPointF at) {
    return img.pixelColor(static_cast<int>(std::floor(at.x())), static_cast<int>(std::floor(at.y())));
}

}  // namespace

class GuiTestNiahTab : public QObject {
    Q_OBJECT
    QTemporaryDir tmp_;

  private Q_SLOTS:
    void initTestCase() { QVERIFY(tmp_.isValid()); }

    void options_take_the_run_panel_settings() {
        RunPanel panel;
        const RunSettings run = sample_run();
        QSignalSpy changed(&panel, &RunPanel::settings_changed);
        panel.set_settings(run);
        QVERIFY(changed.count() > 0);

        NiahTab tab;
        tab.set_lengths("64, 128");
        tab.set_depths("0 50");
        tab.set_samples(2);
        tab.set_budgets("0.1, 0.3");
        tab.set_output_dir(tmp_.filePath("sweep"));
        NiahSweepOptions o = tab.options(panel.settings());
        QCOMPARE(o.methods, (std::vector<std::string>{"varrate", "snapkv"}));
        QCOMPARE(o.mode, CompressionMode::QueryAgnostic);
        QCOMPARE(o.settings.r_min, int64_t{3});
        QCOMPARE(o.settings.rank, int64_t{48});
        QCOMPARE(o.settings.stride, int64_t{8});
        QCOMPARE(o.settings.anchors, int64_t{2});
        QCOMPARE(o.settings.window, int64_t{12});
        QCOMPARE(o.settings.obs_window, int64_t{10});
        QCOMPARE(o.settings.pool_kernel, int64_t{3});
        QVERIFY(o.settings.paper_accounting);
        QCOMPARE(o.max_new_tokens, int64_t{7});
        QVERIFY(o.doc.chat);
        // The tab's own: the grid and the budget list (the first budget is the settings' budget).
        QCOMPARE(o.lengths, (std::vector<int64_t>{64, 128}));
        QCOMPARE(o.depths, (std::vector<double>{0, 50}));
        QCOMPARE(o.samples, int64_t{2});
        QCOMPARE(o.budgets, (std::vector<double>{0.1, 0.3}));
        QCOMPARE(o.settings.budget, 0.1);
        QCOMPARE(QString::fromStdString(o.out_dir.string()), tmp_.filePath("sweep"));

        // An empty budget list sweeps the run panel's kappa alone.
        tab.set_budgets("  ");
        o = tab.options(panel.settings());
        QCOMPARE(o.budgets, (std::vector<double>{0.15}));
        QCOMPARE(o.settings.budget, 0.15);
        QCOMPARE(niah_budgets(o), (std::vector<double>{0.15}));

        // Errors name what is wrong and where to fix it.
        RunSettings none = panel.settings();
        none.methods.clear();
        EXPECT_ERROR(tab.options(none), "Run panel");
        tab.set_budgets("0.1, 2");
        EXPECT_ERROR(tab.options(panel.settings()), "NIAH budgets", "'2'");

        // The tab no longer duplicates the panel: no method check boxes, no mode choice.
        QVERIFY(tab.findChildren<QCheckBox*>().isEmpty());
        for (const QComboBox* c : tab.findChildren<QComboBox*>()) QCOMPARE(c->findText("query-aware"), -1);
        QVERIFY(tab.findChild<QLineEdit*>("niah_budget")->placeholderText().contains("Run panel"));
    }

    void run_settings_line_follows_the_panel() {
        QCOMPARE(
            niah_run_settings_text(sample_run()),
            QString("run panel: varrate, snapkv · query-agnostic · κ 0.15 · r_min 3 · R 48 · stride 8 · "
                    "anchors 2 · window 12 · obs. window 10 · pool 3 · 7 new tokens · paper accounting · "
                    "chat"));

        // Wired as the main window wires it: every editor of the panel refreshes the line.
        RunPanel panel;
        NiahTab tab;
        QObject::connect(&panel, &RunPanel::settings_changed, &tab,
                         [&] { tab.show_run_settings(panel.settings()); });
        panel.findChild<QDoubleSpinBox*>("budget")->setValue(0.25);
        QVERIFY2(tab.run_settings_text().contains("κ 0.25"), qPrintable(tab.run_settings_text()));
        QVERIFY(tab.run_settings_text().contains("flat"));
        panel.findChild<QCheckBox*>("method_flat")->setChecked(false);
        QVERIFY2(!tab.run_settings_text().contains("flat"), qPrintable(tab.run_settings_text()));
        // Every registered method has its box, described by the registry, ablations and baselines included.
        for (const std::string& name : method_names()) {
            const auto* box = panel.findChild<QCheckBox*>(QString::fromStdString("method_" + name));
            QVERIFY2(box, name.c_str());
            QCOMPARE(box->toolTip(), QString::fromStdString(method_description(name)));
        }
        panel.findChild<QCheckBox*>("method_varrate@kvzip")->setChecked(true);
        QVERIFY2(tab.run_settings_text().contains("varrate@kvzip"), qPrintable(tab.run_settings_text()));
        panel.findChild<QComboBox*>("mode")->setCurrentText("query-agnostic");
        QVERIFY(tab.run_settings_text().contains(" · query-agnostic · "));
        panel.findChild<QSpinBox*>("r_min")->setValue(5);
        QVERIFY(tab.run_settings_text().contains("r_min 5"));
        panel.findChild<QSpinBox*>("rank")->setValue(40);
        QVERIFY(tab.run_settings_text().contains("R 40"));
        QCOMPARE(tab.run_settings_text(), niah_run_settings_text(panel.settings()));
    }

    void accuracy_chart_draws_each_method() {
        const NiahSummary s = sweep_summary();
        NiahAccuracyChart chart;
        chart.resize(720, 340);
        chart.set_summary(s);
        chart.show();
        // One line per compressing method with records; full is the reference, not a line.
        QCOMPARE(chart.series_count(), 3);
        QVERIFY(chart.has_reference());
        QCOMPARE(chart.value_at("full", 0.1), 1.0);
        QCOMPARE(chart.value_at("varrate", 0.05), 0.5);
        QCOMPARE(chart.value_at("varrate", 0.1), 8.0 / 12);
        QCOMPARE(chart.value_at("varrate", 0.3), 1.0);
        QCOMPARE(chart.value_at("flat", 0.05), 0.0);
        QCOMPARE(chart.value_at("flat", 0.1), 0.5);
        QCOMPARE(chart.value_at("snapkv", 0.1), 0.5);
        QCOMPARE(chart.value_at("snapkv", 0.3), -1.0);   // infeasible everywhere: no point
        QCOMPARE(chart.value_at("varrate", 0.2), -1.0);  // not in the sweep
        QCOMPARE(chart.value_at("other", 0.1), -1.0);

        // x: the budgets in ascending order on a log scale; y: accuracy, 1 at the top.
        const QRectF area = chart.plot_rect();
        const QPointF v005 = chart.point_position("varrate", 0.05),
                      v01 = chart.point_position("varrate", 0.1), v03 = chart.point_position("varrate", 0.3);
        QVERIFY(v005.x() < v01.x() && v01.x() < v03.x());
        QVERIFY(std::abs((v01.x() - v005.x()) / (v03.x() - v01.x()) - std::log(2.0) / std::log(3.0)) < 0.01);
        QVERIFY(std::abs(v03.y() - area.top()) < 0.5);
        QVERIFY(std::abs(v005.y() - area.center().y()) < 0.5);
        QVERIFY(std::abs(chart.point_position("flat", 0.05).y() - area.bottom()) < 0.5);
        QVERIFY(chart.point_position("snapkv", 0.3).isNull());

        // Each point is drawn in its method's colour, and the colours differ.
        const QImage img = render_widget(&chart, 1.0).convertToFormat(QImage::Format_RGB32);
        const QPalette pal = chart.palette();
        for (const char* m : {"varrate", "flat", "snapkv"})
            for (double k : {0.05, 0.1, 0.3}) {
                if (chart.value_at(m, k) < 0) continue;
                QCOMPARE(pixel_at(img, chart.point_position(m, k)).rgb(), method_colour(m, pal).rgb());
            }
        QVERIFY(method_colour("varrate", pal) != method_colour("flat", pal));
        QVERIFY(method_colour("snapkv", pal) != method_colour("varrate", pal));
        QVERIFY(method_colour("snapkv", pal) != method_colour("flat", pal));
        // The dark theme repaints in its own colours.
        QPalette dark = pal;
        dark.setColor(QPalette::Window, QColor(0x20, 0x20, 0x20));
        dark.setColor(QPalette::Base, QColor(0x18, 0x18, 0x18));
        dark.setColor(QPalette::WindowText, Qt::white);
        chart.setPalette(dark);
        const QImage dimg = render_widget(&chart, 1.0).convertToFormat(QImage::Format_RGB32);
        QVERIFY(method_colour("varrate", dark) != method_colour("varrate", pal));
        QCOMPARE(pixel_at(dimg, v01).rgb(), method_colour("varrate", dark).rgb());
        QCOMPARE(dimg.pixelColor(2, dimg.height() - 2), QColor(0x18, 0x18, 0x18));

        // Hover: the point's method, kappa, accuracy, interval and n; full's line; nothing between points.
        const QString tip = chart.tooltip_at(v005 + QPointF(2, 1));
        QVERIFY2(
            tip.startsWith("varrate, κ 0.05: 50.0 % (95 % interval ") && tip.contains("6 of n = 12 correct"),
            qPrintable(tip));
        const Interval ci = wilson_interval(6, 12);
        QVERIFY(tip.contains(QString("%1-%2 %").arg(100 * ci.low, 0, 'f', 1).arg(100 * ci.high, 0, 'f', 1)));
        QVERIFY(chart.tooltip_at(chart.point_position("snapkv", 0.1)).startsWith("snapkv, κ 0.1: 50.0 %"));
        const QString full = chart.tooltip_at(QPointF(area.left() + 4, area.top()));
        QVERIFY2(full.startsWith("full (reference") && full.contains("12 of n = 12"), qPrintable(full));
        QVERIFY(chart.tooltip_at(QPointF((v005.x() + v01.x()) / 2, area.bottom() - 3)).isEmpty());

        // A summary whose cells do not fill the grid draws nothing; clear() empties the chart.
        NiahSummary bad = s;
        bad.cells.pop_back();
        chart.set_summary(bad);
        QCOMPARE(chart.series_count(), 0);
        QVERIFY(!chart.has_reference());
        chart.set_summary(s);
        QCOMPARE(chart.series_count(), 3);
        chart.clear();
        QCOMPARE(chart.series_count(), 0);
    }

    void accuracy_csv_is_exact() {
        // full 4/4; varrate at 0.1: 2/4; at 0.2: no records (one infeasible document per cell).
        const NiahSummary s = make_summary({"full", "varrate"}, {0.1, 0.2}, {64}, {0, 100},
                                           [](const NiahSeries& ser, size_t, size_t) -> Counts {
                                               if (ser.method == "full") return {2, 2};
                                               if (ser.budget == 0.1) return {2, 1};
                                               return {0, 0, 1};
                                           });
        QCOMPARE(niah_accuracy_csv(s), QString("method,budget,correct,n,accuracy,ci_low,ci_high\n"
                                               "full,1,4,4,1,0.510109,1\n"
                                               "varrate,0.1,2,4,0.5,0.150039,0.849961\n"
                                               "varrate,0.2,0,0,,,\n"));
        QCOMPARE(niah_accuracy_csv(NiahSummary{}),
                 QString("method,budget,correct,n,accuracy,ci_low,ci_high\n"));
    }

    void accuracy_chart_exports() {
        NiahAccuracyChart chart;
        chart.resize(640, 300);
        chart.set_summary(sweep_summary());
        chart.show();
        const QString png = tmp_.filePath("niah-accuracy.png"), svg = tmp_.filePath("niah-accuracy.svg");
        export_widget(&chart, png);
        export_widget(&chart, svg);
        const QImage image(png);
        QVERIFY2(!image.isNull(), qPrintable(png));
        QCOMPARE(image.size(), chart.size() * 2);
        QVERIFY(ink_share(image) > 0.02);
        QSvgRenderer renderer(svg);
        QVERIFY2(renderer.isValid(), qPrintable(svg));
        QImage from_svg(chart.size(), QImage::Format_RGB32);
        from_svg.fill(Qt::white);
        QPainter p(&from_svg);
        renderer.render(&p);
        p.end();
        QVERIFY(ink_share(from_svg) > 0.02);
        // The data as CSV, atomically; a folder that does not exist is an error naming the path.
        const QString csv = tmp_.filePath("niah-accuracy.csv");
        chart.export_csv(csv);
        QFile f(csv);
        QVERIFY(f.open(QIODevice::ReadOnly));
        QCOMPARE(QString::fromUtf8(f.readAll()), niah_accuracy_csv(sweep_summary()));
        EXPECT_ERROR(chart.export_csv(tmp_.filePath("missing/data.csv")), "missing/data.csv");
    }

    void tab_feeds_the_chart_and_its_menu() {
        NiahTab tab;
        tab.resize(1200, 800);
        tab.show();
        NiahOutcome o;
        o.summary = sweep_summary();
        o.complete = false;  // a cancelled sweep still shows what it finished
        o.out_dir = tmp_.filePath("sweep");
        tab.show_outcome(o);
        QVERIFY(tab.status_text().startsWith("Cancelled"));
        QVERIFY(tab.heatmaps()->has_summary());
        NiahAccuracyChart* chart = tab.accuracy_chart();
        QCOMPARE(chart->series_count(), 3);
        QCOMPARE(chart->value_at("varrate", 0.1), 8.0 / 12);
        QVERIFY(chart->isVisible() && chart->height() > 100);

        // The context menu: the image exports of every chart and the data as CSV.
        QStringList entries;
        QTimer::singleShot(0, this, [&] {
            if (auto* menu = qobject_cast<QMenu*>(QApplication::activePopupWidget())) {
                for (const QAction* a : menu->actions())
                    if (!a->isSeparator()) entries << a->text();
                menu->close();
            }
        });
        Q_EMIT chart->customContextMenuRequested(chart->rect().center());
        QVERIFY2(entries.contains("Export SVG...") && entries.contains("Export data (CSV)..."),
                 qPrintable(entries.join(", ")));
    }
};

QTEST_MAIN(GuiTestNiahTab)
#include "gui_test_niah_tab.moc"
