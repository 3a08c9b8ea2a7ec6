// The Evaluation tab on a small `varrate eval` folder of the demo model (2 RULER tasks x 1 length x 3
// samples, full and SnapKV at two budgets): the table's rows and values are summarize_eval's, the
// score-vs-kappa chart has one series per method and one panel per task plus the pooled one, the painters
// draw the cells in the NIAH heatmap's colours, a double-click opens the cell's samples from their records,
// and in the main window a sample is regenerated into the Analysis tab once the sweep's model is loaded.
#include "tests/test_support.h"

#include <QApplication>
#include <QComboBox>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTableView>
#include <QTemporaryDir>

#include <cmath>

#include <nlohmann/json.hpp>

#include "base/file_io.h"
#include "core/session.h"
#include "core/suites/eval.h"
#include "tests/gui_test_support.h"
#include "viz/eval_plot_paint.h"
#include "viz/eval_record_dialog.h"
#include "viz/eval_score_chart.h"
#include "viz/eval_tab.h"
#include "viz/eval_table_model.h"
#include "viz/main_window.h"
#include "viz/niah_heatmap_paint.h"
#include "viz/run_panel.h"

namespace fs = std::filesystem;
using namespace varrate;
using namespace varrate::viz;

namespace {

fs::path demo_dir() {
    return test::source_dir() / "resources/models/varrate-demo";
}

EvalRecord read_record(const fs::path& dir, const EvalCell& c, int64_t sample) {
    const fs::path p = eval_record_path(dir, c.method, c.budget, c.task, c.length, sample);
    return eval_record_from_json(nlohmann::json::parse(read_text_file(p)), p.string());
}

bool near(double a, double b) {
    return std::abs(a - b) < 1e-9;
}

}  // namespace

class GuiTestEvalTab : public QObject {
    Q_OBJECT
    QTemporaryDir tmp_;
    fs::path dir_;
    EvalSummary summary_;

    bool open(EvalTab& tab) {
        QSignalSpy loaded(&tab, &EvalTab::loaded);
        tab.open_folder(QString::fromStdString(dir_.string()));
        return loaded.wait(60000) && loaded.takeFirst().at(0).toBool();
    }

    int row_of(const EvalTableModel& m, const std::string& task, const std::string& method, double budget) {
        for (int r = 0; r < m.rowCount(); ++r) {
            const EvalCell* c = m.cell(r);
            if (c->task == task && c->method == method && near(c->budget, budget)) return r;
        }
        return -1;
    }

  private Q_SLOTS:
    void initTestCase() {
        QVERIFY(tmp_.isValid());
        if (!fs::exists(demo_dir() / "model.safetensors"))
            QSKIP("resources/models/varrate-demo has no weights");
        RuntimeOptions ro;
        ro.threads = 2;
        const auto session = Session::open(demo_dir(), ro);
        EvalSweepOptions o;
        o.tasks = {"niah_single_1", "niah_single_2"};
        o.lengths = {400};
        o.samples = 3;
        o.methods = {"full", "snapkv"};
        o.budgets = {0.2, 0.4};
        o.settings.window = 16;
        o.settings.obs_window = 16;
        o.max_new_tokens = 16;
        dir_ = fs::path(tmp_.filePath("eval").toStdString());
        o.out_dir = dir_;
        QCOMPARE(run_eval_sweep(*session, o, {}).computed, int64_t{18});  // 2 x 3 x (full + 2 budgets)
        summary_ = summarize_eval(read_eval_grid(dir_));
    }

    void table_rows_are_the_summary() {
        EvalTab tab;
        tab.resize(1300, 700);
        tab.show();
        QVERIFY(open(tab));
        QCOMPARE(tab.folder(), QString::fromStdString(dir_.string()));
        QVERIFY2(tab.status_text().contains("18 of 18 records"), qPrintable(tab.status_text()));
        const EvalTableModel& m = *tab.model();
        // One length: the cells, then the pooled rows (no per-length pooled rows).
        QCOMPARE(m.rowCount(), static_cast<int>(summary_.cells.size() + summary_.overall.size()));
        QCOMPARE(m.rowCount(), 9);  // 2 tasks x 3 series + 3 pooled
        std::vector<EvalCell> want = summary_.cells;
        want.insert(want.end(), summary_.overall.begin(), summary_.overall.end());
        for (int r = 0; r < m.rowCount(); ++r) {
            const EvalCell& w = want[static_cast<size_t>(r)];
            auto at = [&](int col, int role = Qt::DisplayRole) { return m.data(m.index(r, col), role); };
            QCOMPARE(at(EvalTableModel::Task, Qt::UserRole).toString().toStdString(), w.task);
            QCOMPARE(at(EvalTableModel::Length, Qt::UserRole).toLongLong(), w.length);
            QCOMPARE(at(EvalTableModel::Method).toString().toStdString(), w.method);
            QVERIFY(near(at(EvalTableModel::Budget, Qt::UserRole).toDouble(), w.budget));
            QCOMPARE(at(EvalTableModel::N, Qt::UserRole).toLongLong(), w.n);
            QVERIFY(near(at(EvalTableModel::Mean, Qt::UserRole).toDouble(), w.mean));
            QCOMPARE(at(EvalTableModel::Mean).toString(), QString::number(w.mean, 'f', 1));
            if (w.vs_reference.n == 0) {
                QVERIFY(at(EvalTableModel::Difference).toString().isEmpty());
                continue;
            }
            QVERIFY(near(at(EvalTableModel::Difference, Qt::UserRole).toDouble(),
                         w.vs_reference.mean_difference));
            const QVariantList ci = at(EvalTableModel::Interval, Qt::UserRole).toList();
            QVERIFY(near(ci.at(0).toDouble(), w.vs_reference.interval.low));
            QVERIFY(near(ci.at(1).toDouble(), w.vs_reference.interval.high));
            QVERIFY(near(at(EvalTableModel::SignP, Qt::UserRole).toDouble(), w.vs_reference.sign_test_p));
            QCOMPARE(at(EvalTableModel::WinsLosses).toString(),
                     QString("%1/%2").arg(w.vs_reference.wins).arg(w.vs_reference.losses));
        }
        QCOMPARE(m.data(m.index(6, EvalTableModel::Task)).toString(), QString("all tasks"));
        QCOMPARE(m.data(m.index(6, EvalTableModel::Length)).toString(), QString("all"));
        QVERIFY(m.headerData(EvalTableModel::Difference, Qt::Horizontal).toString().contains("full"));
    }

    void chart_has_one_series_per_method() {
        EvalTab tab;
        tab.resize(1300, 700);
        tab.show();
        QVERIFY(open(tab));
        QCOMPARE(tab.length_box()->count(), 1);
        QCOMPARE(tab.length_box()->currentText(), QString("400"));
        EvalScoreChart* chart = tab.chart();
        QCOMPARE(chart->length(), int64_t{400});
        QCOMPARE(chart->series(), (QStringList{"full", "snapkv"}));
        QCOMPARE(chart->panel_count(), 3);  // two tasks and every task pooled
        for (int panel = 0; panel < 3; ++panel)
            for (double k : {0.2, 0.4}) {
                const QPointF at = chart->point_position(panel, "snapkv", k);
                QVERIFY(!at.isNull());
                QVERIFY(chart->rect().contains(at.toPoint()));
            }
        QVERIFY(chart->point_position(0, "snapkv", 0.2).x() < chart->point_position(0, "snapkv", 0.4).x());
        // The panels: each task's reference and a SnapKV line of two points; the pooled one is by_length's.
        const std::vector<EvalScorePanel> panels = eval_score_panels(summary_, 400);
        QCOMPARE(panels.size(), size_t{3});
        QCOMPARE(panels[2].task, std::string());
        QVERIFY(panels[2].reference.has_value());
        QVERIFY(near(panels[2].reference->mean, summary_.overall[0].mean));  // one length: pooled = overall
        QCOMPARE(panels[0].lines.size(), size_t{1});
        QCOMPARE(panels[0].lines[0].points.size(), size_t{2});
        QVERIFY(near(panels[2].lines[0].points[1].vs_reference.interval.low,
                     summary_.overall[2].vs_reference.interval.low));
        const QImage img = chart->grab().toImage();
        QVERIFY(!img.isNull());
    }

    void painters_draw_the_cells() {
        const EvalPlotStyle style = EvalPlotStyle::png();
        const EvalScorePainter score(summary_, 400, style);
        QVERIFY(score.size().width() >= 3 * 300);
        const QImage plot = score.render();
        QCOMPARE(plot.size(), score.size());
        const EvalHeatmapPainter heat(summary_, "niah_single_1", style);
        const QImage img = heat.render();
        for (const EvalCell& c : summary_.cells) {
            if (c.task != "niah_single_1") continue;
            const QRect r = heat.cell_rect(0, c.method, c.budget);
            QVERIFY(!r.isEmpty());
            QCOMPARE(img.pixelColor(r.topLeft() + QPoint(3, 3)), niah_colour(c.mean / 100.0));
        }
        // `full` spans the budgets' columns.
        QVERIFY(heat.cell_rect(0, "full", 1).width() >= 2 * heat.cell_rect(0, "snapkv", 0.2).width());
    }

    void double_click_opens_the_samples() {
        EvalTab tab;
        tab.resize(1300, 700);
        tab.show();
        QVERIFY(open(tab));
        QVERIFY(QTest::qWaitForWindowExposed(&tab));
        QTableView* table = tab.table();
        const int row = row_of(*tab.model(), "niah_single_2", "snapkv", 0.2);
        QVERIFY(row >= 0);
        const QModelIndex index = tab.model()->index(row, EvalTableModel::Method);
        table->scrollTo(index);
        const QPoint at = table->visualRect(index).center();
        QTest::mouseClick(table->viewport(), Qt::LeftButton, {}, at);
        QTest::mouseDClick(table->viewport(), Qt::LeftButton, {}, at);
        EvalRecordDialog* d = tab.record_dialog();
        QVERIFY(d);
        QVERIFY(d->isVisible());
        const EvalCell& cell = *tab.model()->cell(row);
        const EvalRecord r0 = read_record(dir_, cell, 0);
        QCOMPARE(d->sample(), int64_t{0});
        QVERIFY(d->record());
        QCOMPARE(d->prediction_text().toStdString(), r0.prediction);
        QCOMPARE(d->question_text().toStdString(), r0.question);
        QVERIFY(d->references_text().contains(QString::fromStdString(r0.answers.front())));
        QVERIFY2(d->score_text().contains(QString::number(*r0.score, 'f', 1)), qPrintable(d->score_text()));
        auto* open_button = d->findChild<QPushButton*>("eval_record_open");
        QVERIFY(open_button);
        QVERIFY(!open_button->isEnabled());  // no model loaded
        d->findChild<QSpinBox*>("eval_record_sample")->setValue(2);
        QCOMPARE(d->prediction_text().toStdString(), read_record(dir_, cell, 2).prediction);
        // A pooled row has no single sample.
        QVERIFY(!tab.open_row(tab.model()->rowCount() - 1));
        // A folder that is not an evaluation: named, nothing replaced.
        QSignalSpy loaded(&tab, &EvalTab::loaded);
        tab.open_folder(tmp_.filePath("nowhere"));
        QVERIFY(loaded.wait(10000));
        QVERIFY(!loaded.takeFirst().at(0).toBool());
        QVERIFY2(tab.status_text().contains("nowhere"), qPrintable(tab.status_text()));
        QCOMPARE(tab.model()->rowCount(), 9);
    }

    // In the window: with the sweep's model loaded, a sample opens in the Analysis tab (regenerated context,
    // the run panel's question and answer prefix).
    void main_window_opens_a_sample_in_analysis() {
        MainWindow w(tmp_.filePath("studio.ini"));
        w.resize(1400, 900);
        w.show();
        QVERIFY(w.eval_tab());
        StartupOptions o;
        o.model = QString::fromStdString(demo_dir().string());
        o.use_defaults = false;
        QSignalSpy ready(&w, &MainWindow::model_ready);
        w.start(o);
        QVERIFY(ready.wait(120000));
        test::wait_idle(w, 60000);
        EvalTab& tab = *w.eval_tab();
        QVERIFY(open(tab));
        const int row = row_of(*tab.model(), "niah_single_1", "full", 1);
        QVERIFY(tab.open_row(row));
        EvalRecordDialog* d = tab.record_dialog();
        auto* open_button = d->findChild<QPushButton*>("eval_record_open");
        QVERIFY2(open_button->isEnabled(), qPrintable(open_button->toolTip()));
        QSignalSpy changed(&w, &MainWindow::document_changed);
        open_button->click();
        QVERIFY(changed.wait(60000));
        QVERIFY2(w.error_text().isEmpty(), qPrintable(w.error_text()));
        const EvalRecord r = *d->record();
        const RunSettings run = w.run_panel()->settings();
        QCOMPARE(run.questions, std::vector<std::string>{r.question});
        QCOMPARE(run.answer_prefixes, std::vector<std::string>{r.answer_prefix});
        QVERIFY(w.document().contains(QString::fromStdString(r.answers.front())));
    }
};

QTEST_MAIN(GuiTestEvalTab)
#include "gui_test_eval_tab.moc"
