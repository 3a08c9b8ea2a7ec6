// The desktop app's views on a real stories260k comparison (full/varrate/flat/snapkv): the run model's series
// against the diagnostics, the linked position axis, every view painting real content, hover/cursor/zoom
// linking, exports to PNG/SVG/PDF/clipboard, and a repaint-latency measurement on a synthetic 32k-token run.
#include "tests/test_support.h"

#include <QAbstractScrollArea>
#include <QApplication>
#include <QClipboard>
#include <QElapsedTimer>
#include <QFile>
#include <QMouseEvent>
#include <QPainter>
#include <QScrollBar>
#include <QSignalSpy>
#include <QSvgRenderer>
#include <QWheelEvent>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "base/error.h"
#include "base/file_io.h"
#include "core/compare.h"
#include "core/session.h"
#include "core/suites/stats.h"
#include "viz/axis_interaction.h"
#include "viz/chart_export.h"
#include "viz/document_view.h"
#include "viz/layer_summary.h"
#include "viz/niah_heatmap_view.h"
#include "viz/position_charts.h"
#include "viz/rank_heatmap.h"
#include "viz/run_model.h"
#include "viz/view_style.h"

using namespace varrate;
using namespace varrate::viz;

namespace {

// Share of pixels that differ from the most common colour: 0 for a blank widget.
double ink_share(const QImage& image) {
    std::map<QRgb, int> counts;
    const QImage img = image.convertToFormat(QImage::Format_RGB32);
    for (int y = 0; y < img.height(); ++y) {
        const auto* row = reinterpret_cast<const QRgb*>(img.constScanLine(y));
        for (int x = 0; x < img.width(); ++x) ++counts[row[x]];
    }
    int most = 0;
    for (const auto& [c, n] : counts) most = std::max(most, n);
    return 1.0 - static_cast<double>(most) / (img.width() * img.height());
}

int distinct_colours(const QImage& image) {
    std::map<QRgb, int> counts;
    const QImage img = image.convertToFormat(QImage::Format_RGB32);
    for (int y = 0; y < img.height(); ++y)
        for (int x = 0; x < img.width(); ++x) ++counts[img.pixel(x, y)];
    return static_cast<int>(counts.size());
}

QImage snapshot(QWidget* w) {
    return render_widget(w, 1.0).convertToFormat(QImage::Format_RGB32);
}

void send_mouse(QWidget* target, QEvent::Type type, QPointF pos, Qt::MouseButton button,
                Qt::MouseButtons buttons) {
    QMouseEvent ev(type, pos, target->mapToGlobal(pos), button, buttons, Qt::NoModifier);
    QApplication::sendEvent(target, &ev);
}

void send_wheel(QWidget* target, QPointF pos, int delta) {
    QWheelEvent ev(pos, target->mapToGlobal(pos), QPoint(), QPoint(0, delta), Qt::NoButton, Qt::NoModifier,
                   Qt::NoScrollPhase, false);
    QApplication::sendEvent(target, &ev);
}

// Counts the paint events of the widgets it filters.
class PaintCounter : public QObject {
  public:
    int count = 0;
    bool eventFilter(QObject*, QEvent* e) override {
        if (e->type() == QEvent::Paint) ++count;
        return false;
    }
};

// A synthetic comparison of `n` tokens and `layers` layers (varrate + flat) with the shapes the codec writes.
CompareResult synthetic_result(int64_t n, int64_t layers, int64_t dim) {
    CompareResult r;
    at::manual_seed(7);
    for (const char* name : {"varrate", "flat"}) {
        MethodRun run;
        run.method = name;
        run.context_ids.resize(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) run.context_ids[static_cast<size_t>(i)] = i % 500;
        for (int64_t l = 0; l < layers; ++l) {
            LayerDiagnostics d;
            d.method = name;
            d.layer = l;
            d.n_tokens = n;
            d.dim = dim;
            at::Tensor exact = (at::arange(n) % 16 == 0) | (at::arange(n) >= n - 64);
            d.exact = exact;
            d.rank = at::where(exact, at::full({n}, dim, at::kLong), at::randint(4, 200, {n}, at::kLong));
            d.n_exact = exact.sum().item<int64_t>();
            d.n_coded = n - d.n_exact;
            d.budget_B = d.n_coded * 32;
            d.min_rank = 4;
            d.max_rank = 199;
            d.mean_rank = 100;
            d.rel_error = at::where(exact, at::zeros({n}), at::rand({n}) * 0.5);
            d.mean_rel_error = d.rel_error.mean().item<double>();
            if (std::string(name) == "varrate") {
                d.salience = at::rand({n}).pow(4);
                d.salience_norm = at::where(exact, at::zeros({n}), d.salience / d.salience.max());
            }
            run.layers.push_back(d);
        }
        r.runs.push_back(std::move(run));
    }
    return r;
}

std::vector<QString> synthetic_texts(int64_t n) {
    std::vector<QString> texts;
    texts.reserve(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
        texts.push_back(i % 37 == 36 ? QStringLiteral(".\n") : QStringLiteral(" w%1").arg(i % 97));
    return texts;
}

}  // namespace

class GuiTestViews : public QObject {
    Q_OBJECT
    std::unique_ptr<Session> session_;
    CompareRequest request_;
    CompareResult result_;
    std::vector<QString> texts_;
    std::unique_ptr<RunModel> model_;
    std::unique_ptr<PositionAxis> axis_;
    std::filesystem::path tmp_;

    // Runs the four methods once on two of the model's own stories (~400 tokens).
    bool need_run() {
        if (model_) return true;
        const auto dir = test::fixture("stories260k");
        if (dir.empty()) return false;
        session_ = test::open_fixture_session();
        const auto greedy = read_json_file(dir / "expected_greedy.json");
        request_.context = greedy["cases"][0]["text"].get<std::string>() + "\n" +
                           greedy["cases"][2]["text"].get<std::string>();
        request_.questions = {"What did Sara find?"};
        request_.methods = {"full", "varrate", "flat", "snapkv"};
        request_.settings = test::small_codec_settings(
            0.4);  // 0.4 holds the charged self-calibrated basis (~0.32 at this length)
        request_.max_new_tokens = 4;
        result_ = run_compare(*session_, request_);
        texts_ = token_display_texts(session_->tokenizer(), result_.runs.at(0).context_ids);
        model_ = std::make_unique<RunModel>();
        axis_ = std::make_unique<PositionAxis>();
        model_->set_result(result_, request_, texts_);
        // Mark the second story's first sentence as the "needle".
        const std::string second = greedy["cases"][2]["text"].get<std::string>();
        model_->set_needle_span(
            text_token_span(texts_, QString::fromStdString(second.substr(0, 40)).trimmed()));
        axis_->set_length(model_->n_tokens());
        return true;
    }

    const MethodRun& run_of(const std::string& name) const {
        for (const MethodRun& r : result_.runs)
            if (r.method == name) return r;
        throw Error("no run " + name);
    }

  private Q_SLOTS:
    void initTestCase() { tmp_ = test::temp_dir("gui-views"); }
    void cleanupTestCase() { std::filesystem::remove_all(tmp_); }

    void axis_clamps_zooms_pans_and_signals() {
        PositionAxis a;
        QSignalSpy range(&a, &PositionAxis::range_changed);
        QSignalSpy cursor(&a, &PositionAxis::cursor_changed);
        a.set_length(1000);
        QCOMPARE(a.begin(), 0.0);
        QCOMPARE(a.end(), 1000.0);
        QCOMPARE(range.count(), 1);
        a.set_range(100, 50);  // reversed
        QCOMPARE(a.begin(), 50.0);
        QCOMPARE(a.end(), 100.0);
        a.set_range(10, 12);  // below the minimum width: 8 tokens around the centre
        QCOMPARE(a.begin(), 7.0);
        QCOMPARE(a.end(), 15.0);
        a.set_range(-50, 50);  // slid inside [0, length]
        QCOMPARE(a.begin(), 0.0);
        QCOMPARE(a.end(), 100.0);
        a.reset();
        a.zoom(0.5, 500);
        QCOMPARE(a.begin(), 250.0);
        QCOMPARE(a.end(), 750.0);
        a.zoom(0.5, 300);  // the anchor keeps its place on screen: (300-250)/500 = (300-b')/250
        QCOMPARE(a.begin(), 275.0);
        QCOMPARE(a.end(), 525.0);
        a.pan(10000);
        QCOMPARE(a.end(), 1000.0);
        QCOMPARE(a.width(), 250.0);
        a.pan(-10000);
        QCOMPARE(a.begin(), 0.0);
        const int before = range.count();
        a.set_range(0, 250);  // unchanged: no signal
        QCOMPARE(range.count(), before);
        a.set_cursor(10);
        a.set_cursor(10);
        QCOMPARE(cursor.count(), 1);
        a.set_cursor(5000);  // out of range = none
        QCOMPARE(a.cursor(), -1);
        a.set_cursor(999);
        a.set_length(5);  // a cursor past the new end is dropped
        QCOMPARE(a.cursor(), -1);
        QCOMPARE(a.end(), 5.0);
    }

    void token_helpers() {
        const std::vector<QString> t = {QStringLiteral("The"), QStringLiteral(" cat"), QStringLiteral(" sat"),
                                        QStringLiteral(".\n"), QStringLiteral("It")};
        QCOMPARE(text_token_span(t, QStringLiteral(" cat sat")), std::make_optional(std::make_pair(1, 3)));
        QCOMPARE(text_token_span(t, QStringLiteral("at s")), std::make_optional(std::make_pair(1, 3)));
        QCOMPARE(text_token_span(t, QStringLiteral("sat.\nIt")), std::make_optional(std::make_pair(2, 5)));
        QVERIFY(!text_token_span(t, QStringLiteral("dog")));
        QCOMPARE(visible_whitespace(QStringLiteral(" a\tb\n")), QString::fromUtf8("\xc2\xb7"
                                                                                  "a\xe2\x86\x92"
                                                                                  "b\xe2\x86\xb5"));
    }

    // The shared zoom / pan / cursor filter on a bare widget whose plot area is x in [100, 500].
    void axis_interaction_zooms_pans_clicks_and_resets() {
        QWidget view;
        view.resize(600, 200);
        PositionAxis axis;
        axis.set_length(1000);
        const QRectF plot(100, 20, 400, 160);
        auto* ia = new AxisInteraction(&view, &axis, [plot] { return plot; });
        QSignalSpy clicks(ia, &AxisInteraction::clicked), hovers(ia, &AxisInteraction::hovered);
        QCOMPARE(ia->position_at(300), 500.0);
        // Hover: the cursor follows the mouse inside the plot only.
        send_mouse(&view, QEvent::MouseMove, QPointF(200, 50), Qt::NoButton, Qt::NoButton);
        QCOMPARE(axis.cursor(), 250);
        send_mouse(&view, QEvent::MouseMove, QPointF(50, 50), Qt::NoButton, Qt::NoButton);
        QCOMPARE(axis.cursor(), 250);
        QCOMPARE(hovers.count(), 2);  // both moves are reported (the heatmap's layer hover needs them)
        // Wheel up zooms in around the position under the mouse (it stays under the mouse).
        send_wheel(&view, QPointF(200, 50), 120);
        QCOMPARE(axis.width(), 800.0);
        QVERIFY(std::abs(ia->position_at(200) - 250) < 1e-9);
        // A drag pans by the dragged distance in positions, keeping the width; it is not a click.
        const double begin = axis.begin();
        send_mouse(&view, QEvent::MouseButtonPress, QPointF(300, 50), Qt::LeftButton, Qt::LeftButton);
        send_mouse(&view, QEvent::MouseMove, QPointF(250, 50), Qt::NoButton, Qt::LeftButton);
        send_mouse(&view, QEvent::MouseButtonRelease, QPointF(250, 50), Qt::LeftButton, Qt::NoButton);
        QCOMPARE(axis.begin(), begin + 50.0 / 400.0 * 800.0);
        QCOMPARE(axis.width(), 800.0);
        QCOMPARE(clicks.count(), 0);
        // Press and release in place: a click at that point.
        send_mouse(&view, QEvent::MouseButtonPress, QPointF(310, 60), Qt::LeftButton, Qt::LeftButton);
        send_mouse(&view, QEvent::MouseButtonRelease, QPointF(311, 60), Qt::LeftButton, Qt::NoButton);
        QCOMPARE(clicks.count(), 1);
        QCOMPARE(clicks.at(0).at(0).toPointF(), QPointF(311, 60));
        // Double click shows everything again.
        send_mouse(&view, QEvent::MouseButtonDblClick, QPointF(300, 50), Qt::LeftButton, Qt::LeftButton);
        QCOMPARE(axis.begin(), 0.0);
        QCOMPARE(axis.end(), 1000.0);
        // A horizontal wheel is not a zoom and is left to the view.
        QWheelEvent sideways(QPointF(200, 50), view.mapToGlobal(QPointF(200, 50)), QPoint(), QPoint(120, 0),
                             Qt::NoButton, Qt::NoModifier, Qt::NoScrollPhase, false);
        QApplication::sendEvent(&view, &sideways);
        QCOMPARE(axis.width(), 1000.0);
    }

    void run_model_series_match_diagnostics() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        QVERIFY(need_run());
        QCOMPARE(model_->methods(), QStringList({"full", "varrate", "flat", "snapkv"}));
        const MethodRun& v = run_of("varrate");
        const int n = static_cast<int>(v.context_ids.size());
        QCOMPARE(model_->n_tokens(), n);
        QCOMPARE(model_->n_layer(), static_cast<int>(v.layers.size()));
        QCOMPARE(model_->joint_dim(), 64);
        QVERIFY(n > 300);
        // One layer: the codec's tensors; mean: the mean over layers.
        for (TokenMetric m : {TokenMetric::Rank, TokenMetric::Salience, TokenMetric::RelError}) {
            const std::vector<float> l1 = model_->series("varrate", m, 1);
            const std::vector<float> mean = model_->series("varrate", m, -1);
            QCOMPARE(static_cast<int>(l1.size()), n);
            QCOMPARE(static_cast<int>(mean.size()), n);
            const at::Tensor t = m == TokenMetric::Rank       ? v.layers[1].rank
                                 : m == TokenMetric::Salience ? v.layers[1].salience
                                                              : v.layers[1].rel_error;
            for (int i : {0, 7, n / 2, n - 1}) {
                QCOMPARE(l1[static_cast<size_t>(i)], t[i].item<float>());
                double sum = 0;
                for (const LayerDiagnostics& d : v.layers) {
                    const at::Tensor& x = m == TokenMetric::Rank       ? d.rank
                                          : m == TokenMetric::Salience ? d.salience
                                                                       : d.rel_error;
                    sum += x[i].item<double>();
                }
                QVERIFY(std::abs(mean[static_cast<size_t>(i)] - sum / v.layers.size()) <=
                        1e-4 * (1 + std::abs(sum)));
            }
        }
        // Anchors (every stride) and the window are exact in every layer.
        const std::vector<uint8_t> exact = model_->exact_mask("varrate", -1);
        QCOMPARE(static_cast<int>(exact.size()), n);
        QCOMPARE(int(exact[0]), 1);
        QCOMPARE(int(exact[32]), 1);
        QCOMPARE(int(exact[static_cast<size_t>(n - 1)]), 1);
        QCOMPARE(int(exact[1]), 0);
        const LayerDiagnostics& d0 = v.layers[0];
        QCOMPARE(model_->uniform_rank("varrate", 0), double(d0.budget_B) / double(d0.n_coded));
        QCOMPARE(model_->rank_floor(), 4);
        // Methods without a metric give empty series; unknown methods too.
        QCOMPARE(model_->series("flat", TokenMetric::Salience, 0).empty(),
                 !run_of("flat").layers[0].salience.defined());
        QVERIFY(model_->series("nope", TokenMetric::Rank, -1).empty());
        QVERIFY(model_->run("nope") == nullptr);
        // The needle span covers the sentence's tokens.
        const auto needle = model_->needle_span();
        QVERIFY(needle.has_value());
        QVERIFY(needle->first > 0 && needle->second > needle->first && needle->second <= n);
        // Token texts that do not match the context are refused.
        RunModel other;
        QVERIFY_THROWS_EXCEPTION(Error, other.set_result(result_, request_, std::vector<QString>(3)));
        QVERIFY(!other.has_result());
    }

    void views_paint_real_content() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        QVERIFY(need_run());
        axis_->reset();
        axis_->set_cursor(-1);
        DocumentView doc(model_.get(), axis_.get());
        PositionCharts charts(model_.get(), axis_.get());
        RankHeatmap heat(model_.get(), axis_.get());
        LayerSummary summary(model_.get(), axis_.get());
        for (QWidget* w : std::initializer_list<QWidget*>{&doc, &charts, &heat, &summary}) {
            w->resize(900, w == &charts ? 600 : 320);
            w->show();
        }
        QVERIFY(QTest::qWaitForWindowExposed(&doc));
        for (QWidget* w : std::initializer_list<QWidget*>{&doc, charts.salience(), charts.rank(),
                                                          charts.error(), &heat, &summary}) {
            const QImage img = snapshot(w);
            QVERIFY2(ink_share(img) > 0.02,
                     qPrintable(QString("%1 ink %2").arg(w->metaObject()->className()).arg(ink_share(img))));
            QVERIFY(distinct_colours(img) > 8);
        }
        // The summary's error column follows the chosen measure, each one measured by the run.
        const QImage mean_kv = snapshot(&summary);
        for (auto m : {LayerErrorMeasure::SalienceWeighted, LayerErrorMeasure::AttentionOutput}) {
            for (const LayerDiagnostics& d : model_->run("varrate")->layers) QVERIFY(layer_error(d, m) >= 0);
            summary.set_error_measure(m);
            QVERIFY2(snapshot(&summary) != mean_kv, qPrintable(error_measure_name(m)));
        }
        summary.set_error_measure(LayerErrorMeasure::MeanKV);
        QVERIFY(charts.salience()->has_data());
        QVERIFY(charts.rank()->has_data());
        QCOMPARE(charts.error()->series_count(), 2);  // varrate vs flat
        QVERIFY(charts.error()->has_data());

        // Document view, rank shading: a high-rank and a low-rank coded token get different backgrounds, and
        // the higher one is further from the base colour.
        doc.set_metric(TokenMetric::Rank);
        doc.set_layer(0);
        const std::vector<float> rank = model_->series("varrate", TokenMetric::Rank, 0);
        const std::vector<uint8_t> exact = model_->exact_mask("varrate", 0);
        int lo = -1, hi = -1;
        for (int i = 0; i < model_->n_tokens(); ++i) {
            const QRect r = doc.token_rect(i);
            const auto needle = model_->needle_span();
            const bool in_needle = needle && i >= needle->first && i < needle->second;  // boxed: skip
            if (exact[static_cast<size_t>(i)] || in_needle || r.isEmpty() ||
                !doc.viewport()->rect().contains(r))
                continue;
            if (lo < 0 || rank[static_cast<size_t>(i)] < rank[static_cast<size_t>(lo)]) lo = i;
            if (hi < 0 || rank[static_cast<size_t>(i)] > rank[static_cast<size_t>(hi)]) hi = i;
        }
        QVERIFY(lo >= 0 && hi >= 0 && rank[static_cast<size_t>(hi)] > rank[static_cast<size_t>(lo)]);
        const QImage img = snapshot(&doc);
        const QPoint off = doc.viewport()->mapTo(&doc, QPoint(0, 0));
        const QColor base = doc.palette().color(QPalette::Base);
        auto distance = [&](int token) {
            const QColor c = img.pixelColor(doc.token_rect(token).topLeft() + off + QPoint(1, 1));
            return std::abs(c.red() - base.red()) + std::abs(c.green() - base.green()) +
                   std::abs(c.blue() - base.blue());
        };
        QVERIFY2(distance(hi) > distance(lo),
                 qPrintable(QString("hi %1 lo %2").arg(distance(hi)).arg(distance(lo))));
        // Tooltip of a token names its values.
        const QString tip = doc.token_tooltip(hi);
        QVERIFY(tip.contains(QStringLiteral("position %1").arg(hi)));
        QVERIFY(tip.contains(QStringLiteral("rank %1").arg(rank[static_cast<size_t>(hi)])));
        QVERIFY(tip.contains(QStringLiteral("coded")));
        QVERIFY(doc.token_tooltip(0).contains(QStringLiteral("exact")));

        // Heatmap: each cell has the colour of its rank (zoomed in so tokens are several pixels wide).
        axis_->set_range(0, 16);
        const QImage hm = snapshot(&heat);
        const QRectF area = heat.plot_rect();
        const int D = model_->joint_dim();
        for (int layer : {0, model_->n_layer() - 1})
            for (int pos : {1, 5, 12}) {
                QCOMPARE(heat.rank_at(layer, pos),
                         int(model_->series("varrate", TokenMetric::Rank, layer)[static_cast<size_t>(pos)]));
                const QPointF c(area.left() + (pos + 0.5) / 16 * area.width(),
                                area.top() + (layer + 0.5) / model_->n_layer() * area.height());
                QCOMPARE(hm.pixelColor(c.toPoint()).rgb(),
                         sequential_colour(double(heat.rank_at(layer, pos)) / D).rgb());
            }
        axis_->reset();

        // Layer summary: a click selects the row's layer.
        QSignalSpy clicked(&summary, &LayerSummary::layer_clicked);
        const QImage si = snapshot(&summary);
        int y = -1;
        for (int py = 0; py < summary.height(); ++py)
            if (summary.row_at(QPoint(10, py)) == 2) {
                y = py;
                break;
            }
        QVERIFY(y > 0);
        send_mouse(&summary, QEvent::MouseButtonPress, QPointF(10, y + 2), Qt::LeftButton, Qt::LeftButton);
        QCOMPARE(clicked.count(), 1);
        QCOMPARE(clicked.at(0).at(0).toInt(), 2);
        QCOMPARE(summary.layer(), 2);
        QVERIFY(snapshot(&summary) != si);  // the highlighted row
    }

    void dark_palette_is_followed() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        QVERIFY(need_run());
        axis_->reset();
        QPalette dark;
        dark.setColor(QPalette::Window, QColor(0x20, 0x22, 0x26));
        dark.setColor(QPalette::Base, QColor(0x18, 0x1a, 0x1d));
        dark.setColor(QPalette::WindowText, QColor(0xe0, 0xe0, 0xe0));
        dark.setColor(QPalette::Text, QColor(0xe0, 0xe0, 0xe0));
        PositionChart chart(model_.get(), axis_.get(), PositionChartKind::Rank);
        DocumentView doc(model_.get(), axis_.get());
        for (QWidget* w : std::initializer_list<QWidget*>{&chart, &doc}) {
            w->resize(640, 240);
            w->show();
            const QImage light = snapshot(w);
            w->setPalette(dark);
            const QImage img = snapshot(w);
            QVERIFY(img != light);
            QVERIFY(ink_share(img) > 0.02);
            // The dominant colour is the dark base, not the light theme's background.
            QCOMPARE(img.pixelColor(w == &chart
                                        ? QPoint(2, w->height() - 3)
                                        : doc.viewport()->mapTo(&doc, QPoint(doc.viewport()->width() - 3,
                                                                             doc.viewport()->height() - 3))),
                     dark.color(QPalette::Base));
        }
        QVERIFY(style_colour(StyleColour::Method, dark) !=
                style_colour(StyleColour::Method, QPalette(Qt::white)));
    }

    void niah_heatmap_colours_and_cells() {
        QCOMPARE(niah_colour(0.0), QColor(0xF0, 0x49, 0x6E));
        QCOMPARE(niah_colour(0.5), QColor(0xEB, 0xB8, 0x39));
        QCOMPARE(niah_colour(1.0), QColor(0x0C, 0xD7, 0x9F));
        QCOMPARE(niah_colour(2.0), niah_colour(1.0));  // fixed scale: clamped
        QVERIFY(!niah_colour(-1).isValid());
        NiahSummary s;
        s.model = "stories260k";
        s.mode = "query-agnostic";
        s.needles = "fresh";
        s.budgets = {0.3};
        s.methods = {"varrate", "snapkv"};
        s.series = niah_series(s.methods, s.budgets);
        s.depths = {0, 50, 100};
        s.lengths = {256, 512, 1024, 2048};
        for (size_t m = 0; m < 2; ++m)
            for (size_t d = 0; d < 3; ++d)
                for (size_t l = 0; l < 4; ++l) {
                    NiahCell c{s.methods[m], 0.3, s.lengths[l],
                               s.depths[d],  4,   static_cast<int64_t>((m + d + l) % 5)};
                    if (m == 1 && d == 2 && l == 3) c.n = c.correct = 0;  // missing record
                    s.cells.push_back(c);
                }
        NiahHeatmapView view;
        view.resize(900, 320);
        view.set_summary(s);
        view.show();
        QVERIFY(view.has_summary());
        const QImage img = snapshot(&view);
        QVERIFY(ink_share(img) > 0.2);
        for (int m = 0; m < 2; ++m)
            for (int d = 0; d < 3; ++d)
                for (int l = 0; l < 4; ++l) {
                    const QRectF r = view.cell_rect(m, d, l);
                    QVERIFY(!r.isEmpty());
                    const QColor px = img.pixelColor((r.topLeft() + QPointF(3, 3)).toPoint());
                    const double acc = s.cell(m, d, l).accuracy();
                    if (acc < 0)
                        for (double a : {0.0, 0.25, 0.5, 0.75, 1.0}) QVERIFY(px != niah_colour(a));
                    else
                        QCOMPARE(px.rgb(), niah_colour(acc).rgb());
                }
        QVERIFY(view.cell_rect(2, 0, 0).isEmpty());
        // A summary whose cells do not fill the grid is not drawn half-way.
        s.cells.pop_back();
        view.set_summary(s);
        QVERIFY(!view.has_summary());
    }

    void cursor_hover_zoom_and_pan_are_linked() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        QVERIFY(need_run());
        axis_->reset();
        axis_->set_cursor(-1);
        DocumentView doc(model_.get(), axis_.get());
        PositionCharts charts(model_.get(), axis_.get());
        RankHeatmap heat(model_.get(), axis_.get());
        doc.resize(700, 260);
        charts.resize(900, 600);
        heat.resize(900, 240);
        for (QWidget* w : std::initializer_list<QWidget*>{&doc, &charts, &heat}) w->show();
        QVERIFY(QTest::qWaitForWindowExposed(&charts));
        const std::vector<QWidget*> views = {&doc, charts.salience(), charts.rank(), charts.error(), &heat};
        std::vector<QImage> before;
        for (QWidget* w : views) before.push_back(snapshot(w));

        // Cursor set on the axis: every view draws it; the document scrolls to a token out of sight.
        const int n = model_->n_tokens();
        axis_->set_cursor(n - 3);
        for (size_t i = 0; i < views.size(); ++i)
            QVERIFY2(snapshot(views[i]) != before[i], views[i]->metaObject()->className());
        QVERIFY(doc.viewport()->rect().contains(doc.token_rect(n - 3)));

        // Hover on a chart moves the cursor to the token under the mouse.
        PositionChart* chart = charts.rank();
        const QRectF area = chart->plot_rect();
        const int target = n / 3;
        const double x = area.left() + (target + 0.5) / n * area.width();
        send_mouse(chart, QEvent::MouseMove, QPointF(x, area.center().y()), Qt::NoButton, Qt::NoButton);
        QVERIFY2(std::abs(axis_->cursor() - target) <= 1, qPrintable(QString::number(axis_->cursor())));
        // Hover on the document view.
        const int token = 20;
        axis_->set_cursor(token);  // scrolls it into view
        axis_->set_cursor(-1);
        const QRect r = doc.token_rect(token);
        QVERIFY(doc.viewport()->rect().contains(r));
        send_mouse(doc.viewport(), QEvent::MouseMove, r.center(), Qt::NoButton, Qt::NoButton);
        QCOMPARE(axis_->cursor(), token);
        QCOMPARE(doc.token_at(r.center()), token);
        // Hover on the heatmap.
        const QRectF ha = heat.plot_rect();
        send_mouse(&heat, QEvent::MouseMove,
                   QPointF(ha.left() + (target + 0.5) / n * ha.width(), ha.center().y()), Qt::NoButton,
                   Qt::NoButton);
        QVERIFY(std::abs(axis_->cursor() - target) <= 1);

        // Wheel zooms around the mouse on every linked view; drag pans; double click resets.
        const QImage heat_full = snapshot(&heat);
        send_wheel(chart, QPointF(x, area.center().y()), 240);
        QVERIFY(axis_->width() < n);
        QVERIFY(axis_->begin() <= target && axis_->end() >= target);
        QVERIFY(snapshot(&heat) != heat_full);
        const double begin = axis_->begin(), width = axis_->width();
        send_mouse(chart, QEvent::MouseButtonPress, QPointF(x, 50), Qt::LeftButton, Qt::LeftButton);
        send_mouse(chart, QEvent::MouseMove, QPointF(x - 100, 50), Qt::NoButton, Qt::LeftButton);
        send_mouse(chart, QEvent::MouseButtonRelease, QPointF(x - 100, 50), Qt::LeftButton, Qt::NoButton);
        QVERIFY(axis_->begin() > begin);
        QCOMPARE(axis_->width(), width);
        send_mouse(&heat, QEvent::MouseButtonDblClick, QPointF(ha.center()), Qt::LeftButton, Qt::LeftButton);
        QCOMPARE(axis_->begin(), 0.0);
        QCOMPARE(axis_->end(), double(n));
    }

    void exports_write_valid_files() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        QVERIFY(need_run());
        axis_->reset();
        DocumentView doc(model_.get(), axis_.get());
        PositionChart chart(model_.get(), axis_.get(), PositionChartKind::Rank);
        RankHeatmap heat(model_.get(), axis_.get());
        LayerSummary summary(model_.get(), axis_.get());
        const std::vector<std::pair<QString, QWidget*>> views = {
            {"document", &doc}, {"rank", &chart}, {"heatmap", &heat}, {"layers", &summary}};
        for (auto& [name, w] : views) {
            w->resize(640, 300);
            w->show();
        }
        const QString out = QString::fromStdString(tmp_.string());
        for (auto& [name, w] : views) {
            const QString png = out + "/" + name + ".png", svg = out + "/" + name + ".svg",
                          pdf = out + "/" + name + ".pdf";
            export_widget(w, png);
            export_widget(w, svg);
            export_widget(w, pdf, ExportFormat::Pdf);
            const QImage image(png);
            QVERIFY2(!image.isNull(), qPrintable(png));
            QCOMPARE(image.size(), w->size() * 2);
            QVERIFY(ink_share(image) > 0.02);
            QSvgRenderer renderer(svg);
            QVERIFY2(renderer.isValid(), qPrintable(svg));
            QImage from_svg(w->size(), QImage::Format_RGB32);
            from_svg.fill(Qt::white);
            QPainter p(&from_svg);
            renderer.render(&p);
            p.end();
            QVERIFY(ink_share(from_svg) > 0.02);
            QFile f(pdf);
            QVERIFY(f.open(QIODevice::ReadOnly));
            const QByteArray bytes = f.readAll();
            QVERIFY(bytes.startsWith("%PDF-"));
            QVERIFY(bytes.trimmed().endsWith("%%EOF"));
            QVERIFY(bytes.size() > 1000);
        }
        // Only the exported files: no temporaries left behind by the atomic writes.
        int files = 0;
        for (const auto& e : std::filesystem::directory_iterator(tmp_)) files += e.is_regular_file() ? 1 : 0;
        QCOMPARE(files, 3 * static_cast<int>(views.size()));
        // Bad paths and formats are errors naming the path; an existing file is left as it was.
        QVERIFY_THROWS_EXCEPTION(Error, export_format_for(QStringLiteral("plot.jpg")));
        QVERIFY_THROWS_EXCEPTION(Error, export_widget(&chart, out + "/missing-dir/plot.png"));
        EXPECT_ERROR(export_widget(&chart, out + "/plot.gif"), "plot.gif");
        // Clipboard.
        copy_widget_to_clipboard(&chart);
        QCOMPARE(QApplication::clipboard()->image().size(), chart.size() * 2);
    }

    // Not a speed assertion: measures what a hover or a zoom step costs on a 32k-token, 32-layer run and
    // prints it, so regressions show in the log.
    void repaint_latency_32k() {
        const int64_t n = 32768, layers = 32;
        RunModel model;
        PositionAxis axis;
        QElapsedTimer t;
        t.start();
        CompareRequest req;
        req.settings.r_min = 4;
        model.set_result(synthetic_result(n, layers, 1024), req, synthetic_texts(n));
        axis.set_length(model.n_tokens());
        const double load_ms = t.nsecsElapsed() / 1e6;
        t.restart();
        DocumentView doc(&model, &axis);
        PositionCharts charts(&model, &axis);
        RankHeatmap heat(&model, &axis);
        doc.resize(1200, 400);
        charts.resize(1400, 600);
        heat.resize(1400, 300);
        for (QWidget* w : std::initializer_list<QWidget*>{&doc, &charts, &heat}) w->show();
        QVERIFY(QTest::qWaitForWindowExposed(&heat));
        const double build_ms = t.nsecsElapsed() / 1e6;
        QVERIFY(charts.rank()->has_data());
        QCOMPARE(heat.rank_at(3, 16), 1024);  // an anchor: exact

        std::mt19937 rng(1);
        std::uniform_int_distribution<int> pos(0, static_cast<int>(n) - 1);
        // One hover or zoom step as the event loop handles it: the axis signal marks every linked view dirty,
        // then the pending update requests paint each of them once.
        auto flush = [] { QApplication::sendPostedEvents(nullptr, QEvent::UpdateRequest); };
        QWidget* each[5] = {doc.viewport(), charts.salience(), charts.rank(), charts.error(), &heat};
        PaintCounter painted;
        for (QWidget* w : each) w->installEventFilter(&painted);
        flush();
        std::vector<double> hover, zoom, per_view[5];
        for (int i = 0; i < 40; ++i) {
            t.restart();
            axis.set_cursor(pos(rng));
            flush();
            hover.push_back(t.nsecsElapsed() / 1e6);
        }
        for (int i = 0; i < 40; ++i) {
            t.restart();
            axis.zoom(i % 2 ? 1.25 : 0.8, n / 2.0);
            flush();
            zoom.push_back(t.nsecsElapsed() / 1e6);
        }
        axis.reset();
        flush();
        // Every hover and zoom step repainted all five views (the measurement is of real paints).
        QVERIFY2(painted.count >= 80 * 5, qPrintable(QString::number(painted.count)));
        for (int i = 0; i < 20; ++i)
            for (int v = 0; v < 5; ++v) {
                t.restart();
                each[v]->repaint();
                per_view[v].push_back(t.nsecsElapsed() / 1e6);
            }
        qInfo("32k tokens x %d layers: model %.1f ms, views built %.1f ms", int(layers), load_ms, build_ms);
        qInfo("hover (cursor move + paint of 5 linked views): median %.2f ms, max %.2f ms", median(hover),
              *std::max_element(hover.begin(), hover.end()));
        qInfo("zoom step (range + paint of 5 linked views): median %.2f ms", median(zoom));
        qInfo("repaint median ms: document %.2f, salience %.2f, rank %.2f, error %.2f, heatmap %.2f",
              median(per_view[0]), median(per_view[1]), median(per_view[2]), median(per_view[3]),
              median(per_view[4]));
    }

    void bench_repaint_32k() {
        const int64_t n = 32768;
        RunModel model;
        PositionAxis axis;
        model.set_result(synthetic_result(n, 32, 1024), CompareRequest{}, synthetic_texts(n));
        axis.set_length(model.n_tokens());
        PositionChart chart(&model, &axis, PositionChartKind::Rank);
        RankHeatmap heat(&model, &axis);
        chart.resize(1400, 240);
        heat.resize(1400, 300);
        chart.show();
        heat.show();
        QVERIFY(QTest::qWaitForWindowExposed(&heat));
        int p = 0;
        QBENCHMARK {
            axis.set_cursor(p = (p + 997) % int(n));
            chart.repaint();
            heat.repaint();
        }
    }
};

QTEST_MAIN(GuiTestViews)
#include "gui_test_views.moc"
