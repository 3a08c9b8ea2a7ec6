// Interaction benchmark: one real run shown in the real main window, then synchronous timed events. A timed
// event is sent with QApplication::sendEvent (or a direct call the GUI makes on that event), and the update
// requests it leaves are flushed before the timer stops, so each latency includes the paints it causes.
#include "app/studio/interaction_bench.h"

#include <QAbstractScrollArea>
#include <QApplication>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QElapsedTimer>
#include <QEventLoop>
#include <QFile>
#include <QFileInfo>
#include <QHelpEvent>
#include <QMouseEvent>
#include <QPixmap>
#include <QScrollBar>
#include <QSpinBox>
#include <QTimer>
#include <QToolTip>
#include <QWheelEvent>
#include <QWindow>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "viz/document_view.h"
#include "viz/layer_summary.h"
#include "viz/live_explorer.h"
#include "viz/main_window.h"
#include "viz/position_charts.h"
#include "viz/rank_heatmap.h"
#include "viz/run_model.h"
#include "viz/run_panel.h"
#include "viz/session_file.h"

namespace varrate::viz {

namespace {

using Log = std::function<void(const QString&)>;

// Room after the context for the question and the answer (as default_document_length leaves).
constexpr int64_t kQuestionRoom = 112;

// Counts the paint events of the widgets it filters.
class PaintCounter : public QObject {
  public:
    int64_t count = 0;
    bool eventFilter(QObject*, QEvent* e) override {
        if (e->type() == QEvent::Paint) ++count;
        return false;
    }
};

QString seconds(double s) {
    return QString::number(s, 'f', s < 10 ? 2 : 1) + " s";
}

// Runs the event loop until the window has no job left, logging the run panel's stage now and then.
void wait_idle(MainWindow& w, const QString& what, int timeout_s, const Log& log) {
    QElapsedTimer t;
    t.start();
    QEventLoop loop;
    QTimer poll;
    poll.setInterval(200);
    QString last_stage;
    qint64 last_log = 0;
    bool timed_out = false;
    QObject::connect(&poll, &QTimer::timeout, &loop, [&] {
        if (!w.busy()) {
            loop.quit();
            return;
        }
        if (timeout_s > 0 && t.elapsed() > qint64(timeout_s) * 1000) {
            timed_out = true;
            loop.quit();
            return;
        }
        const QString stage = w.run_panel()->stage_text();
        const qint64 now = t.elapsed();
        if ((stage != last_stage && now - last_log >= 5000) || now - last_log >= 30000) {
            log(QString("  [%1] %2: %3").arg(seconds(now / 1000.0), what, stage));
            last_stage = stage;
            last_log = now;
        }
    });
    QObject::connect(&w, &MainWindow::idle, &loop, [&] {
        if (!w.busy()) loop.quit();
    });
    poll.start();
    if (w.busy()) loop.exec();
    if (timed_out) {
        w.cancel();
        throw Error(what.toStdString() + ": not finished after " + std::to_string(timeout_s) + " s");
    }
    if (!w.error_text().isEmpty()) throw Error(what.toStdString() + ": " + w.error_text().toStdString());
}

QSize size_of(const QWidget* w) {
    return w ? w->size() : QSize();
}

nlohmann::json size_json(const QSize& s) {
    return {{"width", s.width()}, {"height", s.height()}};
}

// Times interaction kinds one after another on the populated window.
class Bench {
  public:
    Bench(MainWindow& w, const InteractionBenchOptions& o)
        : w_(w), rng_(o.seed), repeats_(std::max(1, o.repeats)), warmup_(std::max(0, o.warmup)), log_(o.log) {
        for (QWidget* v : linked_views()) v->installEventFilter(&paints_);
    }

    std::vector<InteractionStats> run_all();

  private:
    using Step = std::function<void(int)>;

    std::vector<QWidget*> linked_views() const {
        return {w_.document_view()->viewport(), w_.charts()->salience(), w_.charts()->rank(),
                w_.charts()->error(),           w_.rank_heatmap(),       w_.layer_summary()};
    }

    // Paints whatever the last event left dirty: queued update requests, then the window's backing store.
    void flush() {
        QApplication::sendPostedEvents(nullptr, QEvent::UpdateRequest);
        QEvent ev(QEvent::UpdateRequest);
        QApplication::sendEvent(&w_, &ev);
    }

    int random_int(int lo, int hi) {  // [lo, hi]
        return std::uniform_int_distribution<int>(lo, std::max(lo, hi))(rng_);
    }

    int random_token() { return random_int(0, w_.run_model()->n_tokens() - 1); }

    // Zooms the shared axis to a window of about 1/64 of the document around a random token.
    void random_zoom_in() {
        const double n = w_.run_model()->n_tokens();
        const double width = std::max(64.0, n / 64);
        const double c = random_token();
        w_.axis()->set_range(c - width / 2, c + width / 2);
    }

    // setup (untimed, then flushed) prepares the event; act is the timed event and must paint what it
    // changes.
    void measure(const QString& kind, const QString& description, const Step& setup, const Step& act);
    void add(InteractionStats s);  // statistics of s.ms, logged and reported

    // A point of the document viewport over a token, after scrolling to a random place.
    QPoint random_token_point(int* token);

    MainWindow& w_;
    std::mt19937_64 rng_;
    int repeats_, warmup_;
    Log log_;
    PaintCounter paints_;
    std::vector<InteractionStats> out_;
};

void Bench::measure(const QString& kind, const QString& description, const Step& setup, const Step& act) {
    InteractionStats s;
    s.kind = kind;
    s.description = description;
    int64_t painted = 0;
    QElapsedTimer t;
    for (int i = 0; i < warmup_ + repeats_; ++i) {
        QCoreApplication::processEvents();  // what the event loop does between two user events
        if (setup) setup(i);
        flush();
        paints_.count = 0;
        t.start();
        act(i);
        const double ms = static_cast<double>(t.nsecsElapsed()) / 1e6;
        if (i < warmup_) continue;
        s.ms.push_back(ms);
        painted += paints_.count;
    }
    s.paints_per_event = static_cast<double>(painted) / static_cast<double>(s.ms.size());
    add(std::move(s));
}

void Bench::add(InteractionStats s) {
    s.median_ms = percentile_ms(s.ms, 50);
    s.p95_ms = percentile_ms(s.ms, 95);
    s.max_ms = s.ms.empty() ? 0 : *std::max_element(s.ms.begin(), s.ms.end());
    s.mean_ms =
        s.ms.empty() ? 0 : std::accumulate(s.ms.begin(), s.ms.end(), 0.0) / static_cast<double>(s.ms.size());
    if (log_)
        log_(QString("  %1: median %2 ms, p95 %3 ms, max %4 ms (%5 paints/event)")
                 .arg(s.kind)
                 .arg(s.median_ms, 0, 'f', 2)
                 .arg(s.p95_ms, 0, 'f', 2)
                 .arg(s.max_ms, 0, 'f', 2)
                 .arg(s.paints_per_event, 0, 'f', 1));
    out_.push_back(std::move(s));
}

QPoint Bench::random_token_point(int* token) {
    DocumentView* doc = w_.document_view();
    QScrollBar* sb = doc->verticalScrollBar();
    sb->setValue(random_int(sb->minimum(), sb->maximum()));
    flush();
    const QSize vp = doc->viewport()->size();
    for (int tries = 0; tries < 500; ++tries) {
        const QPoint p(random_int(0, vp.width() - 1), random_int(0, vp.height() - 1));
        const int at = doc->token_at(p);
        if (at >= 0) {
            *token = at;
            return p;
        }
    }
    throw Error("interaction benchmark: no token found under the document view (is it laid out?)");
}

std::vector<InteractionStats> Bench::run_all() {
    DocumentView* doc = w_.document_view();
    QWidget* vp = doc->viewport();
    PositionCharts* charts = w_.charts();
    RankHeatmap* heat = w_.rank_heatmap();
    PositionAxis* axis = w_.axis();
    auto* method_box = w_.findChild<QComboBox*>(QStringLiteral("method_box"));
    auto* metric_box = w_.findChild<QComboBox*>(QStringLiteral("metric_box"));
    auto* layer_box = w_.findChild<QComboBox*>(QStringLiteral("layer_box"));
    if (!method_box || !metric_box || !layer_box)
        throw Error("interaction benchmark: the view selectors of the main window were not found");
    const int n = w_.run_model()->n_tokens();
    axis->reset();
    axis->set_cursor(-1);

    // Hover in the document view: mouse move over a token (sets the linked cursor, every linked view
    // repaints) and the tooltip the hover shows (text built and the tip placed).
    int hovered = -1;
    QPoint at;
    int missed = 0;
    measure(
        "hover_document", "mouse move over a random token + its tooltip; linked views repaint",
        [&](int) { at = random_token_point(&hovered); },
        [&](int) {
            const QPoint global = vp->mapToGlobal(at);
            QMouseEvent move(QEvent::MouseMove, at, global, Qt::NoButton, Qt::NoButton, Qt::NoModifier);
            QApplication::sendEvent(vp, &move);
            QHelpEvent help(QEvent::ToolTip, at, global);
            QApplication::sendEvent(vp, &help);
            flush();
            if (axis->cursor() != hovered) ++missed;
        });
    QToolTip::hideText();
    if (missed > 0)
        throw Error("interaction benchmark: " + std::to_string(missed) +
                    " hover events did not move the linked cursor");

    QScrollBar* sb = doc->verticalScrollBar();
    measure("scroll_document", "document view scrolled to a random position + repaint", {}, [&](int) {
        sb->setValue(random_int(sb->minimum(), sb->maximum()));
        flush();
    });

    // Repaint of one view with everything else unchanged, at full zoom-out and zoomed in.
    const std::vector<std::pair<QString, QWidget*>> views = {{"document", vp},
                                                             {"salience_chart", charts->salience()},
                                                             {"rank_chart", charts->rank()},
                                                             {"error_chart", charts->error()},
                                                             {"rank_heatmap", heat}};
    axis->reset();
    for (const auto& [name, view] : views) {
        QWidget* v = view;
        measure("repaint_" + name + "_full",
                QString("repaint() of the %1 at full zoom-out (%2 tokens)").arg(name).arg(n), {},
                [v](int) { v->repaint(); });
    }
    for (const auto& [name, view] : views) {
        QWidget* v = view;
        measure(
            "repaint_" + name + "_zoomed",
            QString("repaint() of the %1 zoomed in to about 1/64 of the document").arg(name),
            [&](int) { random_zoom_in(); }, [v](int) { v->repaint(); });
    }
    axis->reset();

    // Linked interactions: every view on the shared axis follows.
    measure("cursor_linked", "linked cursor set to a random token; every linked view repaints", {}, [&](int) {
        axis->set_cursor(random_token());
        flush();
    });
    measure("hover_rank_chart", "mouse move over the rank chart (moves the linked cursor)", {}, [&](int) {
        const QRectF r = charts->rank()->plot_rect();
        const QPointF p(r.left() + random_int(0, std::max(0, int(r.width()) - 1)), r.center().y());
        QMouseEvent move(QEvent::MouseMove, p, charts->rank()->mapToGlobal(p), Qt::NoButton, Qt::NoButton,
                         Qt::NoModifier);
        QApplication::sendEvent(charts->rank(), &move);
        flush();
    });
    axis->reset();
    measure("wheel_zoom_linked",
            "wheel step over the rank heatmap (8 in, 8 out, ...); every linked view re-decimates", {},
            [&](int i) {
                const QRectF r = heat->plot_rect();
                const QPointF p(r.left() + random_int(0, std::max(0, int(r.width()) - 1)), r.center().y());
                const int delta = (i / 8) % 2 == 0 ? 120 : -120;
                QWheelEvent wheel(p, heat->mapToGlobal(p), QPoint(), QPoint(0, delta), Qt::NoButton,
                                  Qt::NoModifier, Qt::NoScrollPhase, false);
                QApplication::sendEvent(heat, &wheel);
                flush();
            });
    measure(
        "zoom_reset_linked",
        "double click on the rank heatmap from a zoomed-in view: all tokens decimated again in every view",
        [&](int) { random_zoom_in(); },
        [&](int) {
            const QPointF p = heat->plot_rect().center();
            QMouseEvent dbl(QEvent::MouseButtonDblClick, p, heat->mapToGlobal(p), Qt::LeftButton,
                            Qt::LeftButton, Qt::NoModifier);
            QApplication::sendEvent(heat, &dbl);
            flush();
        });
    axis->reset();

    // Re-shading: the view selectors as the user changes them.
    const auto next = [](QComboBox* box) { return (box->currentIndex() + 1) % std::max(1, box->count()); };
    measure("switch_metric", "document view re-shaded by the next metric (salience, rank, error)", {},
            [&](int) {
                metric_box->setCurrentIndex(next(metric_box));
                flush();
            });
    metric_box->setCurrentIndex(0);
    measure("switch_layer", "a random other layer (or the mean) for the document view, charts and summary",
            {}, [&](int) {
                int i = layer_box->currentIndex();
                if (layer_box->count() > 1)
                    while (i == layer_box->currentIndex()) i = random_int(0, layer_box->count() - 1);
                layer_box->setCurrentIndex(i);
                flush();
            });
    layer_box->setCurrentIndex(0);
    measure("switch_method", "the next method in every view (series reloaded, heatmap rebuilt)", {},
            [&](int) {
                method_box->setCurrentIndex(next(method_box));
                flush();
            });
    method_box->setCurrentIndex(std::max(0, method_box->findText(featured_method())));
    flush();

    // Live controls: a step of kappa or r_min re-allocates the kept run on the worker (no prefill) and
    // every view, the answers table and the rate-distortion chart show it. Timed from the spin box's change
    // to the repainted window. Answers are not decoded on rest here (a drag does not rest).
    LiveExplorer* live = w_.live();
    if (!live->active()) throw Error("interaction benchmark: the run is not kept for live exploration");
    live->set_auto_decode(false);
    const int64_t prefills_before = w_.prefills();
    std::vector<double> worker_ms;  // of the timed steps: the update on the worker alone
    const auto live_step = [&](const std::function<void()>& change) {
        QEventLoop loop;
        bool applied = false;
        const auto c1 = QObject::connect(&w_, &MainWindow::live_applied, &loop, [&] {
            applied = true;
            loop.quit();
        });
        QTimer limit;
        limit.setSingleShot(true);
        QObject::connect(&limit, &QTimer::timeout, &loop, &QEventLoop::quit);
        limit.start(60000);
        change();
        if (!applied) loop.exec();
        QObject::disconnect(c1);
        if (!applied) throw Error("interaction benchmark: a live step was not applied within 60 s");
        flush();
        worker_ms.push_back(w_.outcome()->step_ms);
    };
    // The worker's share of the steps just measured (warm-up steps left out).
    const auto add_worker_share = [&](const QString& kind) {
        InteractionStats s;
        s.kind = kind + "_worker";
        s.description = "of " + kind + ": the re-allocation on the worker thread alone (LiveCompare::update)";
        s.ms.assign(worker_ms.end() - std::min<ptrdiff_t>(repeats_, worker_ms.size()), worker_ms.end());
        add(std::move(s));
        worker_ms.clear();
    };
    QDoubleSpinBox* kappa = w_.run_panel()->budget_box();
    const double kappa0 = kappa->value();
    measure("budget_step", "kappa +/- 0.01 in the run panel: re-allocation on the worker, every view updated",
            {}, [&](int i) { live_step([&] { kappa->setValue(kappa0 + (i % 2 == 0 ? 0.01 : 0.0)); }); });
    add_worker_share("budget_step");
    live_step([&] { kappa->setValue(kappa0 + 0.005); });
    live_step([&] { kappa->setValue(kappa0); });
    QSpinBox* r_min = w_.run_panel()->r_min_box();
    const int r0 = r_min->value();
    measure("rmin_step", "r_min +/- 1 in the run panel: re-allocation on the worker, every view updated", {},
            [&](int i) { live_step([&] { r_min->setValue(r0 + (i % 2 == 0 ? 1 : 0)); }); });
    add_worker_share("rmin_step");
    if (r_min->value() != r0) live_step([&] { r_min->setValue(r0); });
    if (w_.prefills() != prefills_before) throw Error("interaction benchmark: a live step ran a prefill");
    live->set_auto_decode(true);

    measure("grab_window", "the whole window rendered to a pixmap (QWidget::grab)", {}, [&](int) {
        const QPixmap pm = w_.grab();
        if (pm.isNull()) throw Error("interaction benchmark: grabbing the window failed");
    });
    return std::move(out_);
}

}  // namespace

double percentile_ms(std::vector<double> values, double percent) {
    if (values.empty()) return 0;
    std::sort(values.begin(), values.end());
    const double rank = std::ceil(percent / 100.0 * static_cast<double>(values.size()));
    const size_t i = static_cast<size_t>(std::clamp(rank, 1.0, static_cast<double>(values.size()))) - 1;
    return values[i];
}

InteractionBenchReport run_interaction_bench(const InteractionBenchOptions& o) {
    const Log log = o.log ? o.log : Log([](const QString&) {});
    if (o.model_dir.isEmpty()) throw Error("interaction benchmark: no model directory given");
    if (!QFileInfo(o.model_dir).isDir()) throw Error(o.model_dir.toStdString() + ": not a model directory");
    if (o.tokens < 16) throw Error("interaction benchmark: --tokens must be at least 16");
    QString ini = o.settings_file;
    if (ini.isEmpty()) {
        // Never the user's settings: a scratch ini, emptied first.
        ini = QDir::temp().filePath(QStringLiteral("varrate-studio-bench.ini"));
        QFile::remove(ini);
    }

    InteractionBenchReport r;
    r.requested_tokens = o.tokens;
    r.repeats = std::max(1, o.repeats);
    r.warmup = std::max(0, o.warmup);
    r.platform = QGuiApplication::platformName();

    MainWindow w(ini);
    w.resize(o.window_size);
    w.show();
    QElapsedTimer exposed;
    exposed.start();
    while ((!w.windowHandle() || !w.windowHandle()->isExposed()) && exposed.elapsed() < 5000)
        QCoreApplication::processEvents(QEventLoop::AllEvents, 50);

    // 1. The model, through the window's worker (start-up also generates a default NIAH document).
    log("loading " + o.model_dir + " …");
    StartupOptions start;
    start.model = o.model_dir;
    start.use_defaults = false;
    w.start(start);
    wait_idle(w, "load", o.job_timeout_s, log);
    if (!w.has_model()) throw Error(o.model_dir.toStdString() + ": the model did not load");
    const ModelInfo info = w.model_info();
    r.model_dir = info.model_dir;
    r.model_name = info.name;
    r.device = info.device;
    r.dtype = info.dtype;
    r.load_s = info.load_s;
    r.joint_dim = info.joint_dim;
    log(QString("loaded %1 in %2 (%3 layers, D %4, %5 positions, %6 %7)")
            .arg(info.name, seconds(info.load_s))
            .arg(info.n_layer)
            .arg(info.joint_dim)
            .arg(info.max_positions)
            .arg(info.device, info.dtype));

    // 2. A NIAH document of the requested length, as File > Generate NIAH Document makes it.
    int64_t length = o.tokens;
    const int64_t room = info.max_positions - kQuestionRoom;
    if (info.max_positions > 0 && length > room) {
        length = std::max<int64_t>(64, room);
        log(QString(
                "the model has %1 positions: the document is %2 tokens (room for the question and answer)")
                .arg(info.max_positions)
                .arg(length));
    }
    NiahDocRequest doc;
    doc.length = length;
    QElapsedTimer t;
    t.start();
    log(QString("generating a %1-token NIAH document …").arg(length));
    w.generate_document(doc);
    wait_idle(w, "document", o.job_timeout_s, log);
    r.document_s = static_cast<double>(t.nsecsElapsed()) / 1e9;
    log(QString("document ready in %1").arg(seconds(r.document_s)));

    // 3. The default comparison (the run panel's methods and the model's codec defaults).
    for (const std::string& m : w.run_panel()->settings().methods) r.methods << QString::fromStdString(m);
    log("running " + r.methods.join(",") + " …");
    t.restart();
    w.run();
    wait_idle(w, "run", o.job_timeout_s, log);
    QCoreApplication::processEvents();
    r.run_total_s = static_cast<double>(t.nsecsElapsed()) / 1e9;
    if (!w.outcome() || !w.run_model()->has_result())
        throw Error("interaction benchmark: the run produced no results");
    r.run_wall_s = w.outcome()->wall_s;
    for (const MethodRun& m : w.outcome()->result.runs)
        r.method_timings.push_back({QString::fromStdString(m.method), m.prefill_ms, m.compress_ms});
    r.tokens = w.run_model()->n_tokens();
    r.layers = w.run_model()->n_layer();
    log(QString("run finished in %1 (%2 tokens, %3 layers)")
            .arg(seconds(r.run_wall_s))
            .arg(r.tokens)
            .arg(r.layers));
    if (r.tokens < 2) throw Error("interaction benchmark: the run has fewer than 2 tokens");

    // 4. The interactions, on the window as the run left it.
    r.window_size = w.size();
    r.document_viewport = size_of(w.document_view()->viewport());
    r.chart_size = size_of(w.charts()->rank());
    r.heatmap_size = size_of(w.rank_heatmap());
    log(QString("measuring %1 events per interaction (after %2 warm-up events) …")
            .arg(r.repeats)
            .arg(r.warmup));
    r.interactions = Bench(w, o).run_all();
    return r;
}

nlohmann::json to_json(const InteractionBenchReport& r) {
    nlohmann::json methods = nlohmann::json::array();
    for (const QString& m : r.methods) methods.push_back(m.toStdString());
    nlohmann::json timings = nlohmann::json::array();
    for (const MethodTiming& m : r.method_timings)
        timings.push_back({{"method", m.method.toStdString()},
                           {"prefill_ms", m.prefill_ms},
                           {"compress_ms", m.compress_ms}});
    nlohmann::json kinds = nlohmann::json::object();
    for (const InteractionStats& s : r.interactions)
        kinds[s.kind.toStdString()] = {{"description", s.description.toStdString()},
                                       {"n", s.ms.size()},
                                       {"median_ms", s.median_ms},
                                       {"p95_ms", s.p95_ms},
                                       {"max_ms", s.max_ms},
                                       {"mean_ms", s.mean_ms},
                                       {"paints_per_event", s.paints_per_event}};
    return {{"format", "varrate-studio-interaction-bench"},
            {"version", 1},
            {"model_dir", r.model_dir.toStdString()},
            {"model", r.model_name.toStdString()},
            {"device", r.device.toStdString()},
            {"dtype", r.dtype.toStdString()},
            {"qt_version", qVersion()},
            {"platform", r.platform.toStdString()},
            {"requested_tokens", r.requested_tokens},
            {"tokens", r.tokens},
            {"layers", r.layers},
            {"joint_dim", r.joint_dim},
            {"methods", methods},
            {"window_size", size_json(r.window_size)},
            {"document_viewport", size_json(r.document_viewport)},
            {"chart_size", size_json(r.chart_size)},
            {"heatmap_size", size_json(r.heatmap_size)},
            {"load_s", r.load_s},
            {"document_s", r.document_s},
            {"run_wall_s", r.run_wall_s},
            {"run_total_s", r.run_total_s},
            {"run_methods", timings},
            {"repeats", r.repeats},
            {"warmup", r.warmup},
            {"interactions", kinds}};
}

QString format_table(const InteractionBenchReport& r) {
    QString out = QString("%1 %2 %3 %4 %5\n")
                      .arg(QStringLiteral("interaction"), -28)
                      .arg(QStringLiteral("median ms"), 10)
                      .arg(QStringLiteral("p95 ms"), 10)
                      .arg(QStringLiteral("max ms"), 10)
                      .arg(QStringLiteral("paints/event"), 13);
    for (const InteractionStats& s : r.interactions)
        out += QString("%1 %2 %3 %4 %5\n")
                   .arg(s.kind, -28)
                   .arg(s.median_ms, 10, 'f', 2)
                   .arg(s.p95_ms, 10, 'f', 2)
                   .arg(s.max_ms, 10, 'f', 2)
                   .arg(s.paints_per_event, 13, 'f', 1);
    out += QString("%1 tokens (requested %2), %3 layers, D %4, methods %5, %6 %7\n")
               .arg(r.tokens)
               .arg(r.requested_tokens)
               .arg(r.layers)
               .arg(r.joint_dim)
               .arg(r.methods.join(','), r.device, r.dtype);
    out += QString("platform %1, window %2x%3, document view %4x%5, %6 events per kind after %7 warm-up\n")
               .arg(r.platform)
               .arg(r.window_size.width())
               .arg(r.window_size.height())
               .arg(r.document_viewport.width())
               .arg(r.document_viewport.height())
               .arg(r.repeats)
               .arg(r.warmup);
    out += QString("model load %1, document %2, run %3 (worker), %4 from Run to the views\n")
               .arg(seconds(r.load_s), seconds(r.document_s), seconds(r.run_wall_s), seconds(r.run_total_s));
    QStringList parts;
    double accounted = 0;
    for (const MethodTiming& m : r.method_timings) {
        parts << QString("%1 prefill %2 + codec %3")
                     .arg(m.method, seconds(m.prefill_ms / 1000), seconds(m.compress_ms / 1000));
        accounted += (m.prefill_ms + m.compress_ms) / 1000;
    }
    if (!parts.isEmpty())
        out += QString("run time: %1; rest (calibration, decoding) %2\n")
                   .arg(parts.join(", "), seconds(std::max(0.0, r.run_wall_s - accounted)));
    return out;
}

void write_report(const InteractionBenchReport& r, const QString& path) {
    write_file_atomic_qt(path, QByteArray::fromStdString(to_json(r).dump(2) + "\n"));
}

}  // namespace varrate::viz
