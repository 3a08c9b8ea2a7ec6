#include "viz/eval_tab.h"

#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QFutureWatcher>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>

#include <nlohmann/json.hpp>

#include "viz/chart_export.h"
#include "viz/eval_record_dialog.h"
#include "viz/eval_score_chart.h"
#include "viz/eval_table_model.h"

namespace varrate::viz {

namespace {

struct LoadResult {
    std::shared_ptr<const EvalFolder> folder;
    QString error;
};

// On a worker thread: touches nothing but the folder.
LoadResult load_folder(const std::filesystem::path& dir) {
    LoadResult out;
    try {
        auto f = std::make_shared<EvalFolder>();
        f->dir = dir;
        f->options = read_eval_grid(dir);
        auto summary = std::make_shared<EvalSummary>(summarize_eval(f->options));
        for (const EvalCell& c : summary->overall) f->records += c.n + c.infeasible;
        f->summary = std::move(summary);
        out.folder = std::move(f);
    } catch (const std::exception& e) {
        out.error = QString::fromUtf8(e.what());
    }
    return out;
}

}  // namespace

EvalTab::EvalTab(QWidget* parent) : QWidget(parent) {
    auto* root = new QVBoxLayout(this);
    auto* bar = new QHBoxLayout;
    open_ = new QPushButton("Open results folder…");
    open_->setObjectName("eval_open");
    open_->setToolTip("a `varrate eval --out` folder (sweep.json, records/)");
    dir_ = new QLineEdit;
    dir_->setObjectName("eval_dir");
    dir_->setPlaceholderText("results folder of varrate eval");
    reload_ = new QPushButton("Reload");
    reload_->setToolTip("read the folder's records again (a sweep still running adds records)");
    cancel_ = new QPushButton("Cancel");
    cancel_->setEnabled(false);
    progress_ = new QProgressBar;
    progress_->setRange(0, 1);
    progress_->setMaximumWidth(120);
    progress_->setMaximumHeight(8);
    progress_->setTextVisible(false);
    bar->addWidget(open_);
    bar->addWidget(dir_, 1);
    bar->addWidget(reload_);
    bar->addWidget(cancel_);
    bar->addWidget(progress_);
    root->addLayout(bar);
    status_ = new QLabel("No evaluation folder open.");
    status_->setObjectName("eval_status");
    status_->setWordWrap(true);
    root->addWidget(status_);

    model_ = new EvalTableModel(this);
    table_ = new QTableView;
    table_->setObjectName("eval_table");
    table_->setModel(model_);
    table_->setSelectionBehavior(QAbstractItemView::SelectRows);
    table_->setSelectionMode(QAbstractItemView::SingleSelection);
    table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
    table_->verticalHeader()->setVisible(false);
    table_->verticalHeader()->setDefaultSectionSize(table_->fontMetrics().height() + 6);
    table_->horizontalHeader()->setStretchLastSection(true);
    table_->setToolTip("double-click a task's row to read its samples");

    auto* right = new QWidget;
    auto* rl = new QVBoxLayout(right);
    rl->setContentsMargins(0, 0, 0, 0);
    auto* lrow = new QHBoxLayout;
    lrow->addWidget(new QLabel("Length"));
    length_box_ = new QComboBox;
    length_box_->setObjectName("eval_length");
    length_box_->setToolTip("the context length the chart shows");
    lrow->addWidget(length_box_);
    lrow->addStretch();
    rl->addLayout(lrow);
    chart_ = new EvalScoreChart;
    chart_->setObjectName("eval_score_chart");
    install_export_menu(chart_, "eval-score-vs-kappa");
    rl->addWidget(chart_, 1);

    auto* split = new QSplitter(Qt::Horizontal);
    split->addWidget(table_);
    split->addWidget(right);
    split->setStretchFactor(0, 1);
    split->setStretchFactor(1, 1);
    split->setChildrenCollapsible(false);
    split->setSizes({620, 680});  // the chart's size hint would leave the table too narrow
    root->addWidget(split, 1);

    connect(open_, &QPushButton::clicked, this, [this] {
        const QString d = QFileDialog::getExistingDirectory(this, "Evaluation results folder", dir_->text());
        if (!d.isEmpty()) open_folder(d);
    });
    connect(dir_, &QLineEdit::returnPressed, this, [this] { open_folder(dir_->text()); });
    connect(reload_, &QPushButton::clicked, this, [this] { open_folder(dir_->text()); });
    connect(cancel_, &QPushButton::clicked, this, &EvalTab::cancel_load);
    connect(length_box_, &QComboBox::currentIndexChanged, this, [this] {
        if (length_box_->currentIndex() >= 0) chart_->set_length(length_box_->currentData().toLongLong());
    });
    connect(table_, &QTableView::doubleClicked, this,
            [this](const QModelIndex& index) { open_row(index.row()); });
}

EvalTab::~EvalTab() = default;

void EvalTab::set_loading(bool loading) {
    loading_ = loading;
    cancel_->setEnabled(loading);
    reload_->setEnabled(!loading);
    progress_->setRange(0, loading ? 0 : 1);  // busy indicator: summarize_eval reports no progress
    progress_->setValue(loading ? 0 : 1);
}

void EvalTab::open_folder(const QString& dir) {
    const QString clean = QDir::cleanPath(dir.trimmed());
    if (clean.isEmpty() || clean == ".") {
        status_->setText("Choose a results folder.");
        Q_EMIT loaded(false);
        return;
    }
    dir_->setText(clean);
    const int generation = ++generation_;
    set_loading(true);
    status_->setText(QStringLiteral("Reading %1…").arg(clean));
    auto* watcher = new QFutureWatcher<LoadResult>(this);
    connect(watcher, &QFutureWatcher<LoadResult>::finished, this, [this, watcher, generation] {
        watcher->deleteLater();
        if (generation != generation_) return;  // superseded or cancelled
        set_loading(false);
        const LoadResult r = watcher->result();
        if (!r.folder) {
            status_->setText(QStringLiteral("Cannot open the folder: %1").arg(r.error));
            Q_EMIT loaded(false);
            return;
        }
        show_folder(r.folder);
        Q_EMIT loaded(true);
    });
    const std::filesystem::path path = clean.toStdString();
    watcher->setFuture(QtConcurrent::run([path] { return load_folder(path); }));
}

void EvalTab::cancel_load() {
    if (!loading_) return;
    ++generation_;
    set_loading(false);
    status_->setText(folder_ ? QStringLiteral("Reading cancelled; showing %1.")
                                   .arg(QString::fromStdString(folder_->dir.string()))
                             : QStringLiteral("Reading cancelled."));
    Q_EMIT loaded(false);
}

QString EvalTab::folder() const {
    return folder_ ? QString::fromStdString(folder_->dir.string()) : QString();
}

void EvalTab::show_folder(std::shared_ptr<const EvalFolder> folder) {
    folder_ = std::move(folder);
    const EvalSummary& s = *folder_->summary;
    model_->set_summary(s);
    table_->resizeColumnsToContents();
    const int64_t keep = length_box_->currentIndex() >= 0 ? length_box_->currentData().toLongLong() : 0;
    {
        const QSignalBlocker block(length_box_);
        length_box_->clear();
        for (int64_t l : s.lengths) length_box_->addItem(QString::number(l), QVariant::fromValue<qint64>(l));
        const int i = length_box_->findData(QVariant::fromValue<qint64>(keep));
        length_box_->setCurrentIndex(i >= 0 ? i : 0);
    }
    chart_->set_summary(folder_->summary, length_box_->currentData().toLongLong());
    // Records of a finished sweep (LongBench datasets with fewer samples have fewer).
    const int64_t expected = static_cast<int64_t>(s.cells.size()) * s.samples;
    status_->setText(
        QStringLiteral("%1 · %2 suite · %3 · %4 task%5 × %6 length%7 × %8 sample%9 · reference %10 · "
                       "%11 of %12 records")
            .arg(QString::fromStdString(s.model.empty() ? "no records yet" : s.model),
                 QString::fromStdString(s.suite), QString::fromStdString(s.mode))
            .arg(s.tasks.size())
            .arg(s.tasks.size() == 1 ? "" : "s")
            .arg(s.lengths.size())
            .arg(s.lengths.size() == 1 ? "" : "s")
            .arg(s.samples)
            .arg(s.samples == 1 ? "" : "s")
            .arg(QString::fromStdString(s.reference))
            .arg(folder_->records)
            .arg(expected));
    update_analysis_state();
}

void EvalTab::set_model(const QString& name) {
    model_name_ = name;
    update_analysis_state();
}

void EvalTab::update_analysis_state() {
    if (!dialog_) return;
    QString why;
    const EvalSummary* s = folder_ ? folder_->summary.get() : nullptr;
    const std::string haystack =
        s && s->identity.is_object() ? s->identity.value("haystack", "procedural") : "";
    if (!s)
        why = "no folder open";
    else if (s->suite != "ruler")
        why = "LongBench records do not hold their context, and the files are not read here";
    else if (haystack != "procedural")
        why = QStringLiteral("the sweep's essay haystack (%1) is needed to regenerate the context")
                  .arg(QString::fromStdString(haystack));
    else if (model_name_.isEmpty())
        why = QStringLiteral("open the sweep's model (%1) to regenerate the context")
                  .arg(QString::fromStdString(s->model));
    else if (model_name_.toStdString() != s->model)
        why = QStringLiteral("the loaded model is %1, the sweep's %2")
                  .arg(model_name_, QString::fromStdString(s->model));
    dialog_->set_analysis_available(why.isEmpty(), why);
}

bool EvalTab::open_row(int row) {
    const EvalCell* c = model_->cell(row);
    if (!c || !folder_) return false;
    if (c->task.empty()) {
        status_->setText("A pooled row has no single sample: double-click a task's row.");
        return false;
    }
    if (!dialog_) {
        dialog_ = new EvalRecordDialog(this);
        dialog_->setObjectName("eval_record_dialog");
        connect(dialog_, &EvalRecordDialog::open_in_analysis, this, &EvalTab::open_sample_requested);
        update_analysis_state();
    }
    dialog_->show_cell(folder_->dir, *c, folder_->summary->samples);
    dialog_->show();
    dialog_->raise();
    return true;
}

QString EvalTab::status_text() const {
    return status_->text();
}

}  // namespace varrate::viz
