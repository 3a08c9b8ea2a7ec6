// The rate-distortion chart on hand-made points (no model needed): positions against the data and the
// chosen measure, clicks that set kappa and those that must not, hit tests that skip unmeasured points,
// tooltip and cursor, the CSV text and file, image exports and the context menu.
#include "tests/test_support.h"

#include <QApplication>
#include <QContextMenuEvent>
#include <QFile>
#include <QMenu>
#include <QMouseEvent>
#include <QSignalSpy>
#include <QTimer>
#include <QToolTip>

#include <cmath>
#include <map>

#include "base/error.h"
#include "viz/chart_export.h"
#include "viz/rd_chart.h"

using namespace varrate;
using namespace varrate::viz;

namespace {

const std::vector<double> kKappas = {0.05, 0.1, 0.2, 0.4};

// varrate, flat and snapkv at four budgets, flat infeasible at 0.02 (the text holds a comma), snapkv's
// attention-output error not measured at 0.05, and `full`. Footprints are all distinct.
std::vector<RdChartPoint> grid() {
    std::vector<RdChartPoint> v;
    for (double k : kKappas) {
        v.push_back({"varrate", k, k + 0.01, 0.30 - 0.5 * k, 0.20 - 0.4 * k, 0.10 - 0.2 * k, {}});
        v.push_back({"flat", k, k + 0.005, 0.26 - 0.5 * k, 0.30 - 0.5 * k, 0.15 - 0.3 * k, {}});
        v.push_back({"snapkv", k, k, 0.50 - k, 0.25 - 0.5 * k, k == 0.05 ? -1 : 0.12 - 0.25 * k, {}});
    }
    v.push_back({"flat", 0.02, 0, -1, -1, -1, "anchors, window and floor exceed the budget"});
    v.push_back({"full", 1, 1, 0, 0, 0, {}});
    return v;
}

// A copy, not a reference: callers pass the temporary grid(), which is gone at the end of their statement.
RdChartPoint find(const std::vector<RdChartPoint>& v, const QString& method, double kappa) {
    for (const RdChartPoint& p : v)
        if (p.method == method && p.kappa == kappa) return p;
    throw Error("no such point");
}

bool same(const std::optional<RdChartPoint>& a, const RdChartPoint& b) {
    return a && a->method == b.method && a->kappa == b.kappa;
}

double measure_of(const RdChartPoint& p, RdMeasure m) {
    return m == RdMeasure::KvError         ? p.kv_error
           : m == RdMeasure::WeightedError ? p.weighted_error
                                           : p.attn_output_error;
}

void send_mouse(QWidget* target, QEvent::Type type, QPointF pos, Qt::MouseButton button,
                Qt::MouseButtons buttons) {
    QMouseEvent ev(type, pos, target->mapToGlobal(pos), button, buttons, Qt::NoModifier);
    QApplication::sendEvent(target, &ev);
}

void click(QWidget* target, QPointF pos) {
    send_mouse(target, QEvent::MouseButtonPress, pos, Qt::LeftButton, Qt::LeftButton);
    send_mouse(target, QEvent::MouseButtonRelease, pos, Qt::LeftButton, Qt::NoButton);
}

QImage snapshot(QWidget* w) {
    return render_widget(w, 1.0).convertToFormat(QImage::Format_RGB32);
}

int sign(double v, double eps) {
    return v > eps ? 1 : v < -eps ? -1 : 0;
}

}  // namespace

class GuiTestRdChart : public QObject {
    Q_OBJECT

    std::unique_ptr<RdChart> make_chart() {
        auto chart = std::make_unique<RdChart>();
        chart->resize(480, 320);
        chart->set_points(grid());
        return chart;
    }

  private Q_SLOTS:
    void measure_names() {
        QCOMPARE(rd_measure_name(RdMeasure::KvError), QString("K/V error"));
        QCOMPARE(rd_measure_name(RdMeasure::WeightedError), QString("salience-weighted K/V error"));
        QCOMPARE(rd_measure_name(RdMeasure::AttentionOutput), QString("attention-output error"));
    }

    // x follows the footprint and y the chosen measure (up = larger), across methods; everything lies in
    // the plot, `full` (footprint 1, error 0) in its bottom-right corner.
    void positions_are_monotone() {
        auto chart = make_chart();
        const QRectF area = chart->plot_rect();
        QVERIFY(area.width() > 100 && area.height() > 100);
        for (RdMeasure m : {RdMeasure::KvError, RdMeasure::WeightedError, RdMeasure::AttentionOutput}) {
            chart->set_measure(m);
            QCOMPARE(chart->measure(), m);
            std::vector<std::pair<RdChartPoint, QPointF>> drawn;
            for (const RdChartPoint& p : grid()) {
                const QPointF at = chart->point_position(p);
                const bool expect = p.infeasible.isEmpty() && measure_of(p, m) >= 0;
                QCOMPARE(std::isfinite(at.x()) && std::isfinite(at.y()), expect);
                if (!expect) continue;
                QVERIFY(area.adjusted(-0.5, -0.5, 0.5, 0.5).contains(at));
                drawn.emplace_back(p, at);
            }
            QCOMPARE(static_cast<int>(drawn.size()), m == RdMeasure::AttentionOutput ? 12 : 13);
            for (const auto& [a, pa] : drawn)
                for (const auto& [b, pb] : drawn) {
                    QCOMPARE(sign(pa.x() - pb.x(), 1e-6), sign(a.footprint - b.footprint, 1e-12));
                    QCOMPARE(sign(pb.y() - pa.y(), 1e-6), sign(measure_of(a, m) - measure_of(b, m), 1e-12));
                }
            const QPointF full = chart->point_position(find(grid(), "full", 1));
            QVERIFY(std::abs(full.x() - area.right()) < 1e-6 && std::abs(full.y() - area.bottom()) < 1e-6);
        }
    }

    // Without `full` the x axis ends at a round value above the largest footprint (0.41), not at 1.
    void x_axis_fits_the_footprints() {
        RdChart chart;
        chart.resize(480, 320);
        std::vector<RdChartPoint> v = grid();
        v.pop_back();
        chart.set_points(v);
        const QRectF area = chart.plot_rect();
        const double x = chart.point_position(find(v, "varrate", 0.4)).x();
        QVERIFY2(x > area.left() + 0.6 * area.width() && x < area.right() - 1,
                 qPrintable(QString::number(x)));
    }

    void switching_measure_moves_points() {
        auto chart = make_chart();
        const RdChartPoint p = find(grid(), "varrate", 0.1);
        const QPointF kv = chart->point_position(p);
        chart->set_measure(RdMeasure::WeightedError);
        const QPointF weighted = chart->point_position(p);
        QCOMPARE(weighted.x(), kv.x());
        QVERIFY(std::abs(weighted.y() - kv.y()) > 1);
        QVERIFY(same(chart->point_at(weighted), p));
    }

    void click_on_a_point_sets_kappa() {
        auto chart = make_chart();
        QSignalSpy spy(chart.get(), &RdChart::kappa_selected);
        const QPointF at = chart->point_position(find(grid(), "varrate", 0.1));
        click(chart.get(), at + QPointF(2, -1));  // a few pixels off still hits
        QCOMPARE(spy.count(), 1);
        QCOMPARE(spy.at(0).at(0).toDouble(), 0.1);
        click(chart.get(), chart->point_position(find(grid(), "snapkv", 0.4)));
        QCOMPARE(spy.count(), 2);
        QCOMPARE(spy.at(1).at(0).toDouble(), 0.4);
        // A drag from one point to another is not a click.
        send_mouse(chart.get(), QEvent::MouseButtonPress, at, Qt::LeftButton, Qt::LeftButton);
        send_mouse(chart.get(), QEvent::MouseMove, at + QPointF(30, 0), Qt::NoButton, Qt::LeftButton);
        const QPointF other = chart->point_position(find(grid(), "flat", 0.2));
        send_mouse(chart.get(), QEvent::MouseButtonRelease, other, Qt::LeftButton, Qt::NoButton);
        QCOMPARE(spy.count(), 2);
        // The right button does not select.
        send_mouse(chart.get(), QEvent::MouseButtonPress, other, Qt::RightButton, Qt::RightButton);
        send_mouse(chart.get(), QEvent::MouseButtonRelease, other, Qt::RightButton, Qt::NoButton);
        QCOMPARE(spy.count(), 2);
    }

    void click_on_full_or_empty_space_does_nothing() {
        auto chart = make_chart();
        QSignalSpy spy(chart.get(), &RdChart::kappa_selected);
        const QPointF full = chart->point_position(find(grid(), "full", 1));
        QVERIFY(same(chart->point_at(full), find(grid(), "full", 1)));
        click(chart.get(), full);
        const QRectF area = chart->plot_rect();
        const QPointF empty(area.left() + 0.6 * area.width(), area.top() + 0.6 * area.height());
        QVERIFY(!chart->point_at(empty));
        click(chart.get(), empty);
        QCOMPARE(spy.count(), 0);
    }

    // snapkv at 0.05 has no attention-output error: under that measure it is drawn nowhere and never hit;
    // under the K/V error it is.
    void unmeasured_points_are_not_hit() {
        auto chart = make_chart();
        const RdChartPoint p = find(grid(), "snapkv", 0.05);
        const QPointF kv = chart->point_position(p);
        QVERIFY(same(chart->point_at(kv), p));
        chart->set_measure(RdMeasure::AttentionOutput);
        QVERIFY(std::isnan(chart->point_position(p).x()));
        const QRectF area = chart->plot_rect().adjusted(-10, -10, 10, 10);
        int hits = 0;
        for (double y = area.top(); y <= area.bottom(); y += 2)
            for (double x = area.left(); x <= area.right(); x += 2) {
                const auto q = chart->point_at({x, y});
                QVERIFY(!same(q, p));
                hits += q.has_value();
            }
        QVERIFY(hits > 0);  // the scan does find the other points
        // The infeasible flat point is never drawn either.
        QVERIFY(std::isnan(chart->point_position(find(grid(), "flat", 0.02)).y()));
    }

    void hover_shows_tooltip_and_hand() {
        auto chart = make_chart();
        chart->show();
        QVERIFY(QTest::qWaitForWindowExposed(chart.get()));
        const QPointF at = chart->point_position(find(grid(), "flat", 0.1));
        send_mouse(chart.get(), QEvent::MouseMove, at, Qt::NoButton, Qt::NoButton);
        QCOMPARE(chart->cursor().shape(), Qt::PointingHandCursor);
        const QString tip = QToolTip::text();
        for (const char* part : {"flat, kappa 0.10", "footprint 0.105", "K/V error: 0.21",
                                 "salience-weighted K/V error: 0.25", "attention-output error: 0.12",
                                 "kappa 0.02 infeasible: anchors, window and floor exceed the budget"})
            QVERIFY2(tip.contains(part), qPrintable(tip));
        // full shows its values but is not clickable: no hand.
        send_mouse(chart.get(), QEvent::MouseMove, chart->point_position(find(grid(), "full", 1)),
                   Qt::NoButton, Qt::NoButton);
        QCOMPARE(chart->cursor().shape(), Qt::ArrowCursor);
        QVERIFY2(QToolTip::text().contains("full, kappa 1.00"), qPrintable(QToolTip::text()));
        const QRectF area = chart->plot_rect();
        send_mouse(chart.get(), QEvent::MouseMove, area.center() + QPointF(0.1 * area.width(), 0),
                   Qt::NoButton, Qt::NoButton);
        QCOMPARE(chart->cursor().shape(), Qt::ArrowCursor);
    }

    // Current and pinned points are drawn (the image changes) and hit; a grid point under the current
    // marker stays clickable.
    void current_and_pinned_points() {
        auto chart = make_chart();
        const QImage plain = snapshot(chart.get());
        chart->set_current_kappa(0.1);
        const QImage marked = snapshot(chart.get());
        QVERIFY(marked != plain);
        QSignalSpy spy(chart.get(), &RdChart::kappa_selected);
        click(chart.get(), chart->point_position(find(grid(), "varrate", 0.1)));
        QCOMPARE(spy.count(), 1);

        RdChartPoint live{"varrate", 0.15, 0.16, 0.22, 0.14, 0.07, {}};
        chart->set_current_points({live});
        QVERIFY(snapshot(chart.get()) != marked);
        const QPointF at = chart->point_position(live);
        QVERIFY(same(chart->point_at(at), live));
        click(chart.get(), at);  // the live point is not a grid point: no new kappa
        QCOMPARE(spy.count(), 1);

        RdChartPoint pinned{"flat", 0.3, 0.31, 0.11, 0.15, 0.06, {}};
        const QImage before_pin = snapshot(chart.get());
        chart->set_pinned_points({pinned});
        QVERIFY(snapshot(chart.get()) != before_pin);
        QVERIFY(same(chart->point_at(chart->point_position(pinned)), pinned));
        chart->set_pinned_points({});
        QCOMPARE(snapshot(chart.get()), before_pin);
    }

    // Colours come from the palette at paint time: a dark palette paints a different image.
    void theme_switches_at_paint_time() {
        auto chart = make_chart();
        const QImage light = snapshot(chart.get());
        QPalette dark = chart->palette();
        dark.setColor(QPalette::Window, QColor(0x20, 0x22, 0x28));
        dark.setColor(QPalette::Base, QColor(0x18, 0x1a, 0x1f));
        dark.setColor(QPalette::WindowText, QColor(0xe0, 0xe0, 0xe0));
        chart->setPalette(dark);
        const QImage darkimg = snapshot(chart.get());
        QVERIFY(darkimg != light);
        QVERIFY(qGray(darkimg.pixel(2, 2)) < 64);
    }

    // Nothing measured under the chosen measure: nothing to hit, and the chart still paints.
    void nothing_measured() {
        RdChart chart;
        chart.resize(400, 300);
        chart.set_points({{"varrate", 0.1, 0.11, 0.2, 0.1, -1, {}}, {"flat", 0.1, 0.1, 0.3, 0.2, -1, {}}});
        chart.set_measure(RdMeasure::AttentionOutput);
        const QRectF area = chart.plot_rect();
        for (double y = area.top(); y <= area.bottom(); y += 4)
            for (double x = area.left(); x <= area.right(); x += 4) QVERIFY(!chart.point_at({x, y}));
        QVERIFY(!snapshot(&chart).isNull());
    }

    void csv_text() {
        std::vector<RdChartPoint> v = {
            {"varrate", 0.1, 0.1034, 0.25, 0.125, -1, {}},
            {"flat", 0.02, 0, -1, -1, -1, "anchors, window and floor exceed the budget"},
            {"snapkv", 0.05, 0.05, 1.0 / 3, 0.5, 2e-7, "needs \"r_min\" lower"},
            {"full", 1, 1, 0, 0, 0, {}},
        };
        const QString csv = rd_chart_csv(v);
        QCOMPARE(csv, QString("method,kappa,footprint,kv_error,weighted_error,attn_output_error,infeasible\n"
                              "varrate,0.1,0.1034,0.25,0.125,,\n"
                              "flat,0.02,0,,,,\"anchors, window and floor exceed the budget\"\n"
                              "snapkv,0.05,0.05,0.3333333333333333,0.5,2e-07,\"needs \"\"r_min\"\" lower\"\n"
                              "full,1,1,0,0,0,\n"));
        QCOMPARE(csv.split('\n').at(3).split(',').at(3).toDouble(), 1.0 / 3);  // round-trips
        QCOMPARE(rd_chart_csv({}), QString("method,kappa,footprint,kv_error,weighted_error,attn_output_error,"
                                           "infeasible\n"));
    }

    void csv_file() {
        auto chart = make_chart();
        const std::filesystem::path dir = test::temp_dir("rd_chart_csv");
        const QString path = QString::fromStdString((dir / "rd.csv").string());
        chart->export_csv(path);
        QFile f(path);
        QVERIFY(f.open(QIODevice::ReadOnly));
        QCOMPARE(QString::fromUtf8(f.readAll()), rd_chart_csv(grid()));
        // A path under a regular file cannot be written, whoever runs the test.
        const QString bad = QString::fromStdString((dir / "rd.csv" / "x.csv").string());
        EXPECT_ERROR(chart->export_csv(bad), bad.toStdString());
    }

    void image_exports() {
        auto chart = make_chart();
        chart->set_current_kappa(0.2);
        const std::filesystem::path dir = test::temp_dir("rd_chart_export");
        const QString png = QString::fromStdString((dir / "rd.png").string());
        const QString svg = QString::fromStdString((dir / "rd.svg").string());
        export_widget(chart.get(), png);
        export_widget(chart.get(), svg);
        const QImage image(png);
        QVERIFY(!image.isNull());
        QCOMPARE(image.size(), QSize(960, 640));  // exports render at twice the widget's size
        QFile f(svg);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QByteArray text = f.readAll();
        QVERIFY(text.contains("<svg"));
        QVERIFY(text.contains("footprint (fraction of the full cache)"));
    }

    // The context menu has the image exports of every view and the chart's data export.
    void context_menu_has_csv_export() {
        auto chart = make_chart();
        chart->show();
        QVERIFY(QTest::qWaitForWindowExposed(chart.get()));
        QStringList texts;
        bool seen = false;
        QTimer::singleShot(0, chart.get(), [&] {
            QMenu* menu = chart->findChild<QMenu*>();
            if (!menu) return;
            seen = true;
            for (QAction* a : menu->actions()) texts << a->text();
            menu->close();
        });
        QContextMenuEvent ev(QContextMenuEvent::Mouse, QPoint(50, 50), chart->mapToGlobal(QPoint(50, 50)));
        QApplication::sendEvent(chart.get(), &ev);
        QVERIFY(seen);
        for (const char* label :
             {"Export PNG...", "Export SVG...", "Export PDF...", "Export data (CSV)...", "Copy image"})
            QVERIFY2(texts.contains(label), qPrintable(texts.join(" | ")));
    }
};

QTEST_MAIN(GuiTestRdChart)
#include "gui_test_rd_chart.moc"
