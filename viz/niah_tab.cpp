#include "viz/niah_tab.h"

#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMenu>
#include <QMessageBox>
#include <QProgressBar>
#include <QPushButton>
#include <QRegularExpression>
#include <QSpinBox>
#include <QSplitter>
#include <QStandardPaths>
#include <QVBoxLayout>

#include <algorithm>

#include "base/error.h"
#include "codec/registry.h"
#include "viz/chart_export.h"
#include "viz/niah_accuracy_chart.h"
#include "viz/niah_heatmap_view.h"

namespace varrate::viz {

namespace {

QStringList split_list(const QString& text) {
    return text.split(QRegularExpression("[,;\\s]+"), Qt::SkipEmptyParts);
}

}  // namespace

std::vector<int64_t> parse_int_list(const QString& text, const QString& what) {
    std::vector<int64_t> out;
    for (const QString& t : split_list(text)) {
        bool ok = false;
        const qlonglong v = t.toLongLong(&ok);
        if (!ok || v <= 0)
            throw Error(QString("%1: '%2' is not a positive whole number").arg(what, t).toStdString());
        out.push_back(v);
    }
    if (out.empty()) throw Error(what.toStdString() + ": give at least one value");
    return out;
}

std::vector<double> parse_double_list(const QString& text, const QString& what, double lo, double hi) {
    std::vector<double> out;
    for (const QString& t : split_list(text)) {
        bool ok = false;
        const double v = t.toDouble(&ok);
        if (!ok || v < lo || v > hi)
            throw Error(
                QString("%1: '%2' is not a number in [%3, %4]").arg(what, t).arg(lo).arg(hi).toStdString());
        out.push_back(v);
    }
    if (out.empty()) throw Error(what.toStdString() + ": give at least one value");
    return out;
}

NiahTab::NiahTab(QWidget* parent) : QWidget(parent) {
    auto* root = new QHBoxLayout(this);
    auto* side = new QWidget;
    side->setMaximumWidth(330);
    auto* sl = new QVBoxLayout(side);
    sl->setContentsMargins(0, 0, 0, 0);

    // The settings the sweep shares with the Run panel are edited there only; this line says which they are.
    run_settings_ = new QLabel;
    run_settings_->setObjectName("niah_run_settings");
    run_settings_->setWordWrap(true);
    run_settings_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    run_settings_->setStyleSheet("color: palette(mid); font-size: 11px;");
    run_settings_->setToolTip(
        "The sweep runs the Run panel's methods, mode, codec settings, max new tokens and chat template: "
        "change them there. Its budget κ is swept only when the budget list below is empty.");
    sl->addWidget(run_settings_);

    auto* grid = new QGroupBox("Sweep");
    auto* f = new QFormLayout(grid);
    lengths_ = new QLineEdit("128, 256, 400");
    lengths_->setObjectName("niah_lengths");
    lengths_->setToolTip("context lengths in the model's tokens");
    depths_ = new QLineEdit("0, 25, 50, 75, 100");
    depths_->setObjectName("niah_depths");
    depths_->setToolTip("needle depth in percent of the context");
    samples_ = new QSpinBox;
    samples_->setRange(1, 1000);
    samples_->setValue(1);
    samples_->setObjectName("niah_samples");
    distractors_ = new QSpinBox;
    distractors_->setRange(0, 32);
    seed_ = new QSpinBox;
    seed_->setRange(0, 1 << 30);
    seed_->setValue(42);
    budgets_ = new QLineEdit;
    budgets_->setObjectName("niah_budget");
    budgets_->setPlaceholderText("empty: the Run panel's κ only");
    budgets_->setToolTip(
        "kappa: fractions of the KV cache kept, one heatmap per method and budget (full runs once); empty: "
        "the Run panel's budget alone");
    needles_ = new QComboBox;
    needles_->setObjectName("niah_needles");
    needles_->addItems({"fresh", "fixed"});
    needles_->setToolTip(
        "fresh: every document draws its own needle and distractors (RULER); fixed: a sample's needles at "
        "every "
        "length and depth (the paper's protocol, and sweeps made before this choice)");
    f->addRow("Lengths", lengths_);
    f->addRow("Depths %", depths_);
    f->addRow("Samples", samples_);
    f->addRow("Distractors", distractors_);
    f->addRow("Seed", seed_);
    f->addRow("Budgets κ", budgets_);
    f->addRow("Needles", needles_);
    sl->addWidget(grid);

    auto* obox = new QGroupBox("Records");
    auto* ol = new QHBoxLayout(obox);
    out_dir_ = new QLineEdit;
    out_dir_->setObjectName("niah_out_dir");
    out_dir_->setToolTip("one JSON record per (method, length, depth, sample); a rerun skips finished ones");
    auto* browse = new QPushButton("…");
    browse->setMaximumWidth(32);
    ol->addWidget(out_dir_);
    ol->addWidget(browse);
    connect(browse, &QPushButton::clicked, this, [this] {
        const QString d = QFileDialog::getExistingDirectory(this, "NIAH output folder", out_dir_->text());
        if (!d.isEmpty()) out_dir_->setText(d);
    });
    sl->addWidget(obox);

    auto* buttons = new QHBoxLayout;
    run_ = new QPushButton("Run sweep");
    run_->setObjectName("niah_run");
    cancel_ = new QPushButton("Cancel");
    cancel_->setObjectName("niah_cancel");
    cancel_->setEnabled(false);
    load_ = new QPushButton("Show records");
    load_->setToolTip("summarise the records already in the output folder");
    buttons->addWidget(run_);
    buttons->addWidget(cancel_);
    buttons->addWidget(load_);
    sl->addLayout(buttons);
    progress_ = new QProgressBar;
    progress_->setRange(0, 1000);
    progress_->setTextVisible(false);
    progress_->setMaximumHeight(8);
    sl->addWidget(progress_);
    status_ = new QLabel("No sweep yet.");
    status_->setWordWrap(true);
    status_->setObjectName("niah_status");
    sl->addWidget(status_);
    overall_ = new QLabel;
    overall_->setWordWrap(true);
    overall_->setObjectName("niah_overall");
    overall_->setToolTip("Accuracy over every length and depth, with its 95 % Wilson score interval");
    sl->addWidget(overall_);
    retention_ = new QLabel;
    retention_->setWordWrap(true);
    retention_->setObjectName("niah_retention");
    retention_->setToolTip(
        "What each method kept of the tokens spelling the asked needle's value in the last layer (share of "
        "their K/V: rank / D, or for SnapKV the share of KV heads keeping them), averaged over right and "
        "wrong answers. Every record's needle_retention has it per layer.");
    sl->addWidget(retention_);
    sl->addStretch();
    connect(run_, &QPushButton::clicked, this, &NiahTab::run_requested);
    connect(cancel_, &QPushButton::clicked, this, &NiahTab::cancel_requested);
    connect(load_, &QPushButton::clicked, this, &NiahTab::load_requested);

    heatmaps_ = new NiahHeatmapView;
    heatmaps_->setObjectName("niah_heatmaps");
    accuracy_ = new NiahAccuracyChart;
    accuracy_->setObjectName("niah_accuracy");
    // The main window installs the other views' export menus; this chart lives only here, so the tab does,
    // with its data as CSV beside the images.
    install_export_menu(accuracy_, "niah-accuracy", [chart = accuracy_](QMenu& menu) {
        menu.addAction("Export data (CSV)...", chart, [chart] {
            const QString path =
                QFileDialog::getSaveFileName(chart, "Export data (CSV)", "niah-accuracy.csv", "CSV (*.csv)");
            if (path.isEmpty()) return;
            try {
                chart->export_csv(path);
            } catch (const std::exception& e) {
                QMessageBox::warning(chart, "Export failed", QString::fromStdString(e.what()));
            }
        });
    });
    auto* views = new QSplitter(Qt::Vertical);
    views->addWidget(heatmaps_);
    views->addWidget(accuracy_);
    views->setStretchFactor(0, 3);
    views->setStretchFactor(1, 2);
    views->setSizes({600, 400});  // the heatmaps' size hint would leave the chart its minimum height
    views->setChildrenCollapsible(false);
    root->addWidget(side);
    root->addWidget(views, 1);
    set_output_dir(QStandardPaths::writableLocation(QStandardPaths::AppLocalDataLocation) + "/niah/default");
}

NiahSweepOptions NiahTab::options(const RunSettings& run) const {
    NiahSweepOptions o;
    o.lengths = parse_int_list(lengths_->text(), "NIAH lengths");
    o.depths = parse_double_list(depths_->text(), "NIAH depths", 0, 100);
    o.samples = samples_->value();
    o.methods = run.methods;
    if (o.methods.empty()) throw Error("NIAH sweep: tick at least one method in the Run panel");
    o.settings = run.codec;
    o.budgets = budgets_->text().trimmed().isEmpty()
                    ? std::vector<double>{run.codec.budget}
                    : parse_double_list(budgets_->text(), "NIAH budgets", 0.001, 1.0);
    o.settings.budget = o.budgets.front();
    o.mode = run.mode;
    o.max_new_tokens = run.max_new_tokens;
    o.doc.chat = run.chat;  // the documents' lengths are counted as the chat prompt tokenizes them
    o.doc.needles = parse_needle_protocol(needles_->currentText().toStdString());
    o.doc.seed = static_cast<uint64_t>(seed_->value());
    o.doc.distractors = distractors_->value();
    const QString out = out_dir_->text().trimmed();
    if (out.isEmpty()) throw Error("NIAH sweep: choose an output folder");
    o.out_dir = QDir::cleanPath(out).toStdString();
    return o;
}

void NiahTab::apply_model(const ModelInfo& info) {
    const int64_t top = default_document_length(info.max_positions);
    lengths_->setText(QString("%1, %2, %3").arg(std::max<int64_t>(32, top / 4)).arg(top / 2).arg(top));
    const QString base = QStandardPaths::writableLocation(QStandardPaths::AppLocalDataLocation);
    set_output_dir(base + "/niah/" + (info.name.isEmpty() ? QString("model") : info.name));
}

void NiahTab::set_output_dir(const QString& dir) {
    out_dir_->setText(dir);
}
QString NiahTab::output_dir() const {
    return out_dir_->text();
}
void NiahTab::set_lengths(const QString& t) {
    lengths_->setText(t);
}
void NiahTab::set_depths(const QString& t) {
    depths_->setText(t);
}
void NiahTab::set_samples(int n) {
    samples_->setValue(n);
}

void NiahTab::set_budgets(const QString& t) {
    budgets_->setText(t);
}
void NiahTab::set_needles(NeedleProtocol p) {
    needles_->setCurrentText(QString::fromStdString(to_string(p)));
}

void NiahTab::show_run_settings(const RunSettings& run) {
    run_settings_->setText(niah_run_settings_text(run));
}

QString NiahTab::run_settings_text() const {
    return run_settings_->text();
}

void NiahTab::set_running(bool running) {
    running_ = running;
    run_->setEnabled(!running);
    load_->setEnabled(!running);
    cancel_->setEnabled(running);
    if (running) {
        progress_->setValue(0);
        status_->setText("Starting sweep…");
    }
}

void NiahTab::set_progress(const QString& cell, qint64 done, qint64 total, const QString& stage) {
    if (total > 0) progress_->setValue(static_cast<int>(1000.0 * double(done) / double(total)));
    status_->setText(QString("%1/%2 records · %3%4")
                         .arg(done)
                         .arg(total)
                         .arg(cell)
                         .arg(stage.isEmpty() ? QString() : " · " + stage));
}

void NiahTab::show_outcome(const NiahOutcome& o) {
    heatmaps_->set_summary(o.summary);
    accuracy_->set_summary(o.summary);
    QString text = QString("%1 records (%2 computed, %3 reused) in %4")
                       .arg(o.stats.total)
                       .arg(o.stats.computed)
                       .arg(o.stats.skipped)
                       .arg(o.out_dir);
    if (!o.complete) text = "Cancelled — finished records kept; run again to resume. " + text;
    status_->setText(text);
    overall_->setText(niah_overall_text(o.summary));
    retention_->setText(niah_retention_text(o.summary));
    if (o.complete) progress_->setValue(1000);
}

QString niah_overall_text(const NiahSummary& s) {
    QStringList lines;
    for (size_t m = 0; m < s.series.size(); ++m) {
        const NiahCell all = s.overall(m);
        const QString label = QString::fromStdString(s.series[m].label());
        if (all.n == 0) {
            lines << QStringLiteral("%1: no records").arg(label);
            continue;
        }
        const Interval ci = all.interval();
        lines << QStringLiteral("%1: %2 % (95 % interval %3-%4 %) of %5")
                     .arg(label)
                     .arg(100.0 * all.accuracy(), 0, 'f', 1)
                     .arg(100.0 * ci.low, 0, 'f', 1)
                     .arg(100.0 * ci.high, 0, 'f', 1)
                     .arg(all.n);
    }
    return lines.join('\n');
}

QString niah_run_settings_text(const RunSettings& run) {
    QStringList methods;
    for (const std::string& m : run.methods) methods << QString::fromStdString(m);
    const CodecSettings& c = run.codec;
    QStringList parts = {methods.isEmpty() ? QStringLiteral("no methods") : methods.join(", "),
                         QString::fromStdString(to_string(run.mode)),
                         QStringLiteral("κ %1").arg(c.budget),
                         QStringLiteral("r_min %1").arg(c.r_min),
                         QStringLiteral("R %1").arg(c.rank),
                         QStringLiteral("stride %1").arg(c.stride),
                         QStringLiteral("anchors %1").arg(c.anchors),
                         QStringLiteral("window %1").arg(c.window),
                         QStringLiteral("obs. window %1").arg(c.obs_window),
                         QStringLiteral("pool %1").arg(c.pool_kernel),
                         QStringLiteral("%1 new tokens").arg(run.max_new_tokens)};
    if (c.coef_bits < 16) parts << QStringLiteral("%1-bit coefficients").arg(c.coef_bits);
    if (c.paper_accounting) parts << QStringLiteral("paper accounting");
    if (run.chat) parts << QStringLiteral("chat");
    return QStringLiteral("run panel: ") + parts.join(QStringLiteral(" · "));
}

QString niah_retention_text(const NiahSummary& s) {
    auto last = [](const RetentionTally& t) {
        const std::vector<double> layers = t.mean_layer_kept_fraction();
        if (layers.empty()) return QStringLiteral("-");
        return QStringLiteral("%1 (%2)").arg(layers.back(), 0, 'f', 2).arg(t.n);
    };
    QStringList lines;
    for (const NiahSeries& ser : s.series) {
        const auto it = s.retention.find(ser.key());
        if (!method_takes_budget(ser.method) || it == s.retention.end()) continue;
        QString line = QStringLiteral("%1: right %2 · wrong %3")
                           .arg(QString::fromStdString(ser.label()), last(it->second.needle_correct),
                                last(it->second.needle_wrong));
        if (it->second.distractors.n > 0)
            line += QStringLiteral(" · distractors %1").arg(last(it->second.distractors));
        lines << line;
    }
    if (lines.isEmpty()) return {};
    return QStringLiteral("Needle value kept in the last layer (records):\n") + lines.join('\n');
}

QString NiahTab::status_text() const {
    return status_->text();
}

QString NiahTab::retention_text() const {
    return retention_->text();
}

QString NiahTab::overall_text() const {
    return overall_->text();
}

}  // namespace varrate::viz
