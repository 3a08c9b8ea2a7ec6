// The main window's live exploration: the LiveExplorer wired to the run panel, the worker and the views; the
// rate-distortion chart; pin + compare; the status bar's "what is kept" label.
#include <QAction>
#include <QBoxLayout>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLabel>
#include <QLocale>
#include <QMenuBar>
#include <QSplitter>
#include <QStatusBar>

#include "viz/answers_table.h"
#include "viz/chart_export.h"
#include "viz/document_view.h"
#include "viz/layer_summary.h"
#include "viz/live_explorer.h"
#include "viz/main_window.h"
#include "viz/rd_chart.h"
#include "viz/run_model.h"
#include "viz/run_panel.h"

namespace varrate::viz {

namespace {

RdMeasure rd_measure(LayerErrorMeasure m) {
    switch (m) {
        case LayerErrorMeasure::MeanKV:
            return RdMeasure::KvError;
        case LayerErrorMeasure::SalienceWeighted:
            return RdMeasure::WeightedError;
        case LayerErrorMeasure::AttentionOutput:
            return RdMeasure::AttentionOutput;
    }
    return RdMeasure::KvError;
}

// Mean over layers of a measure; -1 when a layer did not measure it.
double layer_mean(const MethodRun& r, double LayerDiagnostics::*field) {
    if (r.layers.empty()) return -1;
    double sum = 0;
    for (const LayerDiagnostics& d : r.layers) {
        if (d.*field < 0) return -1;
        sum += d.*field;
    }
    return sum / static_cast<double>(r.layers.size());
}

// One chart point per run of a result (the live or the pinned allocation).
std::vector<RdChartPoint> result_points(const CompareResult& result) {
    std::vector<RdChartPoint> out;
    for (const MethodRun& r : result.runs) {
        RdChartPoint p;
        p.method = QString::fromStdString(r.method);
        p.kappa = r.budget;
        p.infeasible = QString::fromStdString(r.infeasible);
        if (r.infeasible.empty()) {
            p.footprint = r.footprint_fraction;
            p.kv_error = layer_mean(r, &LayerDiagnostics::mean_rel_error);
            p.weighted_error = layer_mean(r, &LayerDiagnostics::weighted_rel_error);
            p.attn_output_error = layer_mean(r, &LayerDiagnostics::attn_output_error);
        }
        out.push_back(std::move(p));
    }
    return out;
}

std::vector<RdChartPoint> grid_points(const RateGrid& grid) {
    std::vector<RdChartPoint> out;
    for (const RatePoint& r : grid.points) {
        RdChartPoint p;
        p.method = QString::fromStdString(r.method);
        p.kappa = r.kappa;
        p.footprint = r.footprint;
        p.kv_error = r.kv_error;
        p.weighted_error = r.weighted_error;
        p.attn_output_error = r.attn_output_error;
        p.infeasible = QString::fromStdString(r.infeasible);
        out.push_back(std::move(p));
    }
    return out;
}

QString mib(int64_t bytes) {
    return QString::number(static_cast<double>(bytes) / (1024.0 * 1024.0), 'f', 1) + " MiB";
}

QString kappa_label(const RunOutcome& o) {
    return QString("κ %1").arg(o.request.settings.budget, 0, 'g', 3);
}

}  // namespace

void MainWindow::build_live() {
    live_ = new LiveExplorer(panel_, worker_, this);
    connect(live_, &LiveExplorer::job_posted, this, [this](JobKind kind) { jobs_.push_back(kind); });
    connect(live_, &LiveExplorer::outcome_ready, this, &MainWindow::apply_live_outcome);
    connect(live_, &LiveExplorer::grid_ready, this, [this](std::shared_ptr<const RateGrid> g) {
        rd_chart_->set_points(grid_points(*g));
        show_current_rd_points();
    });
    connect(live_, &LiveExplorer::pinned_changed, this, &MainWindow::apply_pin);
    connect(live_, &LiveExplorer::state_changed, this, &MainWindow::update_cache_label);

    // The rate-distortion chart in a column right of the linked views (its own axes, the full height); the
    // "Layer error" selector picks its measure too.
    rd_chart_ = new RdChart;
    rd_chart_->setObjectName("rd_chart");
    auto* views = qobject_cast<QSplitter*>(doc_view_->parentWidget());
    auto* box = views ? qobject_cast<QBoxLayout*>(views->parentWidget()->layout()) : nullptr;
    if (box) {
        auto* columns = new QSplitter(Qt::Horizontal);
        columns->setObjectName("analysis_columns");
        box->insertWidget(box->indexOf(views), columns, 1);
        columns->addWidget(views);  // moves it out of the layout
        columns->addWidget(rd_chart_);
        columns->setStretchFactor(0, 3);
        columns->setStretchFactor(1, 1);
        columns->setSizes({900, 340});  // proportions: the chart keeps room for its axis labels
    }
    install_export_menu(rd_chart_, "rate-distortion", [this](QMenu& menu) {
        menu.addAction("Export data (CSV)…", this, [this] {
            const QString path =
                ask_save_path("Export rate-distortion data", "rate-distortion.csv", "CSV (*.csv)");
            if (!path.isEmpty()) export_rate_distortion_csv(path);
        });
    });
    rd_chart_->installEventFilter(this);
    connect(rd_chart_, &RdChart::kappa_selected, this, [this](double kappa) {
        panel_->budget_box()->setValue(kappa);  // a live change like any other
        live_->decode_now();                    // a click is a deliberate choice: answers at once
    });
    const auto pick_measure = [this] {
        const auto m = static_cast<LayerErrorMeasure>(error_box_->currentData().toInt());
        rd_chart_->set_measure(rd_measure(m));
        if (m == LayerErrorMeasure::AttentionOutput) live_->request_grid(true);
    };
    connect(error_box_, &QComboBox::currentIndexChanged, this, pick_measure);
    pick_measure();

    QMenu* explore = menuBar()->addMenu("E&xplore");
    pin_action_ =
        explore->addAction("&Pin Allocation", QKeySequence("Ctrl+P"), this, &MainWindow::pin_allocation);
    unpin_action_ =
        explore->addAction("&Unpin", QKeySequence("Ctrl+Shift+P"), this, &MainWindow::unpin_allocation);
    explore->addAction("&Decode Answers Now", QKeySequence("Ctrl+Return"), this, [this] {
        if (live_->active()) live_->decode_now();
    });
    unpin_action_->setEnabled(false);

    cache_label_ = new QLabel;
    cache_label_->setObjectName("cache_label");
    cache_label_->setContentsMargins(10, 0, 10, 0);
    statusBar()->insertPermanentWidget(0, cache_label_);
    update_cache_label();
}

void MainWindow::apply_live_outcome(std::shared_ptr<const RunOutcome> o) {
    const QString step = o->step;
    const double ms = o->step_ms;
    apply_outcome(std::move(o));  // the answers table keeps its pinned columns (set_pinned persists)
    show_current_rd_points();
    QString msg = QString("%1 · %2 %3 ms").arg(kappa_label(*outcome_), step).arg(ms, 0, 'f', 1);
    if (outcome_->answers_stale) msg += " · answers stale (Enter: decode now)";
    status(msg);
    Q_EMIT live_applied();
}

void MainWindow::show_current_rd_points() {
    if (!outcome_) return;
    rd_chart_->set_current_kappa(outcome_->request.settings.budget);
    rd_chart_->set_current_points(result_points(outcome_->result));
}

void MainWindow::pin_allocation() {
    if (!outcome_) {
        show_error("Nothing to pin: run a comparison first");
        return;
    }
    live_->pin(outcome_);  // what the views show now
}

void MainWindow::unpin_allocation() {
    if (live_) live_->unpin();
}

void MainWindow::apply_pin() {
    const std::shared_ptr<const RunOutcome> pinned = live_->pinned();
    const bool same_tokens = pinned && outcome_ && pinned->token_texts.size() == outcome_->token_texts.size();
    const QString label = pinned ? "pinned " + kappa_label(*pinned) : QString();
    if (same_tokens) {
        model_->set_pinned(pinned->result, label);
        answers_->set_pinned(pinned->result, kappa_label(*pinned));
        rd_chart_->set_pinned_points(result_points(pinned->result));
    } else {
        model_->set_pinned(std::nullopt);
        answers_->set_pinned(std::nullopt);
        rd_chart_->set_pinned_points({});
    }
    if (outcome_) {
        answers_->set_stale(outcome_->answers_stale);
        answers_->set_result(outcome_->result, outcome_->request);
    }
    pin_action_->setEnabled(outcome_ != nullptr);
    unpin_action_->setEnabled(pinned != nullptr);
}

bool MainWindow::export_rate_distortion_csv(const QString& path) {
    try {
        rd_chart_->export_csv(path);
        status("Exported " + path);
        return true;
    } catch (const std::exception& e) {
        show_error(QString::fromUtf8(e.what()));
        return false;
    }
}

QString MainWindow::cache_text() const {
    return cache_label_ ? cache_label_->text() : QString();
}

void MainWindow::update_cache_label() {
    if (!cache_label_) return;
    const std::shared_ptr<const RunOutcome> o = live_->outcome();
    if (!live_->active() || !o) {
        cache_label_->setText("nothing kept");
        cache_label_->setToolTip(
            "Run a comparison: its prefill is kept, and the codec settings become live.");
        return;
    }
    QString text = QString("kept: %1 capture%2 · %3 tokens · %4")
                       .arg(o->captures)
                       .arg(o->captures == 1 ? "" : "s")
                       .arg(QLocale().toString(static_cast<qlonglong>(o->token_texts.size())))
                       .arg(mib(o->held_bytes));
    text += o->answers_stale ? " · answers stale" : " · answers current";
    cache_label_->setText(text);
    cache_label_->setToolTip(
        "The run's prefill capture and every method's analysis stay in memory: κ, r_min, R and the "
        "coefficient bits re-allocate them, structural settings re-analyse them. A prefill runs again only "
        "for another model, document, questions (query-aware), dtype or device, or a longer observation "
        "window.");
}

}  // namespace varrate::viz
