#include "viz/main_window.h"

#include <QAction>
#include <QActionGroup>
#include <QApplication>
#include <QCloseEvent>
#include <QComboBox>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QDockWidget>
#include <QDoubleSpinBox>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QFrame>
#include <QHBoxLayout>
#include <QLabel>
#include <QMenuBar>
#include <QMimeData>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QSplitter>
#include <QStackedWidget>
#include <QStatusBar>
#include <QStyleFactory>
#include <QTabWidget>
#include <QToolButton>
#include <QVBoxLayout>

#include "base/error.h"
#include "base/file_io.h"
#include "core/data_paths.h"
#include "viz/answers_table.h"
#include "viz/app_settings.h"
#include "viz/chart_export.h"
#include "viz/document_view.h"
#include "viz/layer_summary.h"
#include "viz/live_explorer.h"
#include "viz/niah_heatmap_view.h"
#include "viz/niah_tab.h"
#include "viz/position_charts.h"
#include "viz/rank_heatmap.h"
#include "viz/run_model.h"
#include "viz/run_panel.h"
#include "viz/session_file.h"
#include "viz/view_style.h"

namespace varrate::viz {

bool is_demo_model(const QString& dir) {
    const QString demo = MainWindow::find_demo_model();
    return !demo.isEmpty() && QDir::cleanPath(demo) == QDir::cleanPath(dir);
}

NiahDocRequest startup_document(const QString& model_dir) {
    NiahDocRequest r;
    if (!is_demo_model(model_dir)) return r;
    const DemoRegime demo;
    r.length = demo.length;
    r.depth_percent = demo.depth_percent;
    r.seed = demo.seed;
    r.distractors = demo.distractors;
    return r;
}

MainWindow::MainWindow(const QString& settings_file, QWidget* parent)
    : QMainWindow(parent), settings_(std::make_unique<AppSettings>(settings_file)) {
    setWindowTitle("VarRate Studio");
    setAcceptDrops(true);
    setDockOptions(QMainWindow::AnimatedDocks | QMainWindow::AllowTabbedDocks);
    worker_ = new RunWorker(this);
    model_ = new RunModel(this);
    axis_ = new PositionAxis(this);
    build_views();
    build_menus();
    connect_worker();
    build_live();
    build_autosave();
    set_theme(settings_->theme());
    if (!settings_->geometry().isEmpty())
        restoreGeometry(settings_->geometry());
    else
        resize(1560, 980);
    update_status_labels();
    update_empty_state();
    if (!settings_->reset_message().isEmpty()) show_error(settings_->reset_message());
}

MainWindow::~MainWindow() = default;

QString MainWindow::find_demo_model() {
    return QString::fromStdString(varrate::find_demo_model());
}

void MainWindow::build_views() {
    // Left dock: the run panel.
    panel_ = new RunPanel;
    panel_->setMinimumWidth(340);
    auto* run_dock = new QDockWidget("Run", this);
    run_dock->setObjectName("run_dock");
    run_dock->setWidget(panel_);
    run_dock->setFeatures(QDockWidget::DockWidgetMovable | QDockWidget::DockWidgetFloatable);
    addDockWidget(Qt::LeftDockWidgetArea, run_dock);
    connect(panel_, &RunPanel::run_requested, this, &MainWindow::run);
    connect(panel_, &RunPanel::cancel_requested, this, &MainWindow::cancel);

    // Bottom dock: answers side by side.
    answers_ = new AnswersTable;
    auto* answers_dock = new QDockWidget("Answers", this);
    answers_dock->setObjectName("answers_dock");
    answers_dock->setWidget(answers_);
    answers_dock->setFeatures(QDockWidget::DockWidgetMovable | QDockWidget::DockWidgetFloatable);
    addDockWidget(Qt::BottomDockWidgetArea, answers_dock);
    resizeDocks({answers_dock}, {190}, Qt::Vertical);

    // Central: error banner over a stack of (welcome prompt, tabs).
    auto* central = new QWidget;
    auto* cl = new QVBoxLayout(central);
    cl->setContentsMargins(4, 4, 4, 0);
    cl->setSpacing(4);
    banner_ = new QFrame;
    banner_->setObjectName("error_banner");
    banner_->setStyleSheet(
        "#error_banner { background: #5c1f2c; border: 1px solid #F0496E; border-radius: 4px; }"
        "#error_banner QLabel { color: #ffe4ea; }");
    auto* bl = new QHBoxLayout(banner_);
    bl->setContentsMargins(10, 6, 6, 6);
    banner_text_ = new QLabel;
    banner_text_->setObjectName("error_text");
    banner_text_->setWordWrap(true);
    banner_text_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    auto* close = new QToolButton;
    close->setText("✕");
    close->setAutoRaise(true);
    connect(close, &QToolButton::clicked, this, &MainWindow::clear_error);
    bl->addWidget(banner_text_, 1);
    bl->addWidget(close);
    banner_->hide();
    cl->addWidget(banner_);

    stack_ = new QStackedWidget;
    auto* welcome = new QWidget;
    auto* wl = new QVBoxLayout(welcome);
    wl->addStretch();
    welcome_ = new QLabel;
    welcome_->setObjectName("welcome");
    welcome_->setAlignment(Qt::AlignCenter);
    welcome_->setText(
        "<h2>Open a model</h2><p>File &gt; Open Model, or drop a Hugging Face model folder here.<br>"
        "A NIAH document is generated for it; then press Run to compare full, VarRate, flat and SnapKV.</p>");
    wl->addWidget(welcome_);
    auto* open_btn = new QPushButton("Open Model…");
    open_btn->setMaximumWidth(200);
    connect(open_btn, &QPushButton::clicked, this, [this] {
        const QString d = QFileDialog::getExistingDirectory(this, "Open model", settings_->last_dir());
        if (!d.isEmpty()) open_model(d);
    });
    wl->addWidget(open_btn, 0, Qt::AlignHCenter);
    wl->addStretch();
    stack_->addWidget(welcome);

    tabs_ = new QTabWidget;
    tabs_->setDocumentMode(true);
    // Analysis: view selectors over the document view, the position charts and the layer views.
    auto* analysis = new QWidget;
    auto* al = new QVBoxLayout(analysis);
    al->setContentsMargins(0, 4, 0, 0);
    auto* selectors = new QHBoxLayout;
    method_box_ = new QComboBox;
    method_box_->setObjectName("method_box");
    reference_box_ = new QComboBox;
    reference_box_->setObjectName("reference_box");
    metric_box_ = new QComboBox;
    metric_box_->setObjectName("metric_box");
    metric_box_->addItem("Salience", static_cast<int>(TokenMetric::Salience));
    metric_box_->addItem("Allocated rank", static_cast<int>(TokenMetric::Rank));
    metric_box_->addItem("Reconstruction error", static_cast<int>(TokenMetric::RelError));
    error_box_ = new QComboBox;
    error_box_->setObjectName("error_box");
    for (auto m :
         {LayerErrorMeasure::MeanKV, LayerErrorMeasure::SalienceWeighted, LayerErrorMeasure::AttentionOutput})
        error_box_->addItem(error_measure_name(m), static_cast<int>(m));
    error_box_->setToolTip(
        "Per-layer error in the summary: mean K/V reconstruction error, the same weighted by VarRate's "
        "salience, or "
        "||o - o^|| / ||o|| of the observation-window queries' attention output");
    layer_box_ = new QComboBox;
    layer_box_->setObjectName("layer_box");
    layer_box_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
    metric_box_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
    const auto add_sel = [&](const QString& label, QComboBox* box) {
        selectors->addWidget(new QLabel(label));
        selectors->addWidget(box);
        selectors->addSpacing(12);
    };
    add_sel("Method", method_box_);
    add_sel("vs", reference_box_);
    add_sel("Shade by", metric_box_);
    add_sel("Layer", layer_box_);
    add_sel("Layer error", error_box_);
    selectors->addStretch();
    al->addLayout(selectors);

    doc_view_ = new DocumentView(model_, axis_);
    doc_view_->setObjectName("document_view");
    charts_ = new PositionCharts(model_, axis_);
    charts_->setObjectName("position_charts");
    heatmap_ = new RankHeatmap(model_, axis_);
    heatmap_->setObjectName("rank_heatmap");
    layers_ = new LayerSummary(model_, axis_);
    layers_->setObjectName("layer_summary");
    auto* vsplit = new QSplitter(Qt::Vertical);
    vsplit->addWidget(doc_view_);
    vsplit->addWidget(charts_);
    auto* hsplit = new QSplitter(Qt::Horizontal);
    hsplit->addWidget(heatmap_);
    hsplit->addWidget(layers_);
    hsplit->setStretchFactor(0, 3);
    hsplit->setStretchFactor(1, 2);
    vsplit->addWidget(hsplit);
    vsplit->setStretchFactor(0, 3);
    vsplit->setStretchFactor(1, 4);
    vsplit->setStretchFactor(2, 2);
    al->addWidget(vsplit, 1);
    tabs_->addTab(analysis, "Analysis");

    source_ = new QPlainTextEdit;
    source_->setObjectName("document_text");
    source_->setPlaceholderText("The document: open a file, paste text or generate a NIAH document.");
    connect(source_, &QPlainTextEdit::textChanged, this, [this] { update_status_labels(); });
    tabs_->addTab(source_, "Document text");

    niah_ = new NiahTab;
    tabs_->addTab(niah_, "NIAH sweep");
    connect(niah_, &NiahTab::run_requested, this, &MainWindow::run_niah);
    connect(niah_, &NiahTab::cancel_requested, this, &MainWindow::cancel);
    connect(panel_, &RunPanel::settings_changed, niah_,
            [this] { niah_->show_run_settings(panel_->settings()); });
    niah_->show_run_settings(panel_->settings());
    connect(niah_, &NiahTab::load_requested, this, [this] {
        try {
            auto o = std::make_shared<NiahOutcome>();
            NiahSweepOptions opts = niah_->options(panel_->settings());
            o->summary = summarize_niah(opts);
            o->out_dir = QString::fromStdString(opts.out_dir.string());
            for (const NiahCell& c : o->summary.cells) o->stats.total += c.n;
            niah_->show_outcome(*o);
            niah_outcome_ = o;
        } catch (const std::exception& e) {
            show_error(QString::fromUtf8(e.what()));
        }
    });
    build_eval_tab();
    stack_->addWidget(tabs_);
    cl->addWidget(stack_, 1);
    setCentralWidget(central);

    // Every view exports the same way (context menu) and is the "current chart" once clicked.
    const std::vector<std::pair<QWidget*, QString>> views = {{doc_view_, "document"},
                                                             {charts_->salience(), "salience"},
                                                             {charts_->rank(), "rank"},
                                                             {charts_->error(), "error"},
                                                             {heatmap_, "rank-heatmap"},
                                                             {layers_, "layer-summary"},
                                                             {niah_->heatmaps(), "niah-heatmap"}};
    for (const auto& [w, name] : views) {
        install_export_menu(w, name);
        w->installEventFilter(this);
    }
    doc_view_->viewport()->installEventFilter(this);
    current_chart_ = charts_;

    connect(method_box_, &QComboBox::currentTextChanged, this, [this](const QString& m) {
        if (m.isEmpty()) return;
        doc_view_->set_method(m);
        charts_->set_method(m);
        heatmap_->set_method(m);
        layers_->set_method(m);
    });
    connect(reference_box_, &QComboBox::currentTextChanged, this, [this](const QString& m) {
        if (m.isEmpty()) return;
        charts_->set_reference_method(m);
        layers_->set_reference_method(m);
    });
    connect(metric_box_, &QComboBox::currentIndexChanged, this,
            [this] { doc_view_->set_metric(static_cast<TokenMetric>(metric_box_->currentData().toInt())); });
    connect(error_box_, &QComboBox::currentIndexChanged, this, [this] {
        layers_->set_error_measure(static_cast<LayerErrorMeasure>(error_box_->currentData().toInt()));
    });
    connect(layer_box_, &QComboBox::currentIndexChanged, this, [this] {
        const int layer = layer_box_->currentData().isValid() ? layer_box_->currentData().toInt() : -1;
        doc_view_->set_layer(layer);
        charts_->set_layer(layer);
        layers_->set_layer(layer);
    });
    const auto pick_layer = [this](int layer) {
        const int i = layer_box_->findData(layer);
        if (i >= 0) layer_box_->setCurrentIndex(i);
    };
    connect(layers_, &LayerSummary::layer_clicked, this, pick_layer);
    connect(heatmap_, &RankHeatmap::layer_clicked, this, pick_layer);

    model_label_ = new QLabel;
    model_label_->setObjectName("model_label");
    doc_label_ = new QLabel;
    doc_label_->setObjectName("document_label");
    doc_label_->setContentsMargins(10, 0, 10, 0);
    model_label_->setContentsMargins(10, 0, 6, 0);
    statusBar()->addPermanentWidget(doc_label_);
    statusBar()->addPermanentWidget(model_label_);
}

void MainWindow::build_menus() {
    QMenu* file = menuBar()->addMenu("&File");
    file->addAction("Open &Model…", QKeySequence("Ctrl+M"), this, [this] {
        const QString d = QFileDialog::getExistingDirectory(this, "Open model (Hugging Face folder)",
                                                            settings_->last_dir());
        if (d.isEmpty()) return;
        settings_->set_last_dir(QFileInfo(d).absolutePath());
        open_model(d);
    });
    recent_menu_ = file->addMenu("Recent &Models");
    connect(recent_menu_, &QMenu::aboutToShow, this, &MainWindow::rebuild_recent_menu);
    rebuild_recent_menu();
    file->addSeparator();
    file->addAction("Open &Document…", QKeySequence::Open, this, [this] {
        const QString f = QFileDialog::getOpenFileName(this, "Open document", settings_->last_dir(),
                                                       "Text (*.txt *.md *.markdown);;All files (*)");
        if (f.isEmpty()) return;
        settings_->set_last_dir(QFileInfo(f).absolutePath());
        open_document(f);
    });
    file->addAction("&Paste Text…", QKeySequence("Ctrl+Shift+V"), this, &MainWindow::dialog_paste_text);
    file->addAction("&Generate NIAH Document…", QKeySequence("Ctrl+G"), this,
                    &MainWindow::dialog_generate_document);
    file->addSeparator();
    file->addAction("Open &Session…", this, [this] {
        const QString f = QFileDialog::getOpenFileName(this, "Open session", settings_->last_dir(),
                                                       "VarRate session (*.varrate.json *.json)");
        if (!f.isEmpty()) open_session(f);
    });
    file->addAction("Save Session &As…", QKeySequence::Save, this, [this] {
        const QString f = ask_save_path("Save session", "session.varrate.json", "VarRate session (*.json)");
        if (!f.isEmpty()) save_session(f);
    });
    build_cache_actions(file);
    QMenu* exp = file->addMenu("&Export");
    exp->addAction("Results &JSON…", this, [this] {
        const QString f = ask_save_path("Export results", "results.json", "JSON (*.json)");
        if (!f.isEmpty()) export_results_json(f);
    });
    exp->addAction("Rank Log &CSV…", this, [this] {
        const QString f = ask_save_path("Export rank log", "rank_log.csv", "CSV (*.csv)");
        if (!f.isEmpty()) export_rank_log(f);
    });
    exp->addAction("&Answers CSV…", this, [this] {
        const QString f = ask_save_path("Export answers", "answers.csv", "CSV (*.csv)");
        if (!f.isEmpty()) export_answers_csv(f);
    });
    exp->addSeparator();
    exp->addAction("Current Chart (PNG/SVG/PDF)…", QKeySequence("Ctrl+E"), this, [this] {
        const QString f = ask_save_path("Export chart", "chart.png", "PNG (*.png);;SVG (*.svg);;PDF (*.pdf)");
        if (!f.isEmpty()) export_chart(f);
    });
    exp->addAction("&Copy Chart", QKeySequence("Ctrl+Shift+C"), this, &MainWindow::copy_chart);
    file->addSeparator();
    file->addAction("&Quit", QKeySequence::Quit, this, &QWidget::close);

    QMenu* runm = menuBar()->addMenu("&Run");
    run_action_ = runm->addAction("&Run Comparison", QKeySequence("Ctrl+R"), this, &MainWindow::run);
    cancel_action_ = runm->addAction("&Cancel", QKeySequence("Esc"), this, &MainWindow::cancel);
    runm->addAction("Run NIAH &Sweep", this, [this] {
        tabs_->setCurrentWidget(niah_);
        run_niah();
    });
    runm->addSeparator();
    runm->addAction("Calibrate on &Files…", this, &MainWindow::dialog_calibrate);

    QMenu* view = menuBar()->addMenu("&View");
    auto* group = new QActionGroup(this);
    dark_action_ = view->addAction("&Dark Theme", this, [this] { set_theme("dark"); });
    light_action_ = view->addAction("&Light Theme", this, [this] { set_theme("light"); });
    for (QAction* a : {dark_action_, light_action_}) {
        a->setCheckable(true);
        group->addAction(a);
    }
    view->addSeparator();
    for (QDockWidget* d : findChildren<QDockWidget*>()) view->addAction(d->toggleViewAction());

    QMenu* help = menuBar()->addMenu("&Help");
    help->addAction("About VarRate Studio", this, [this] {
        status("VarRate Studio: variable-rate KV-cache coding vs SnapKV and flat coding, on your model.");
    });
}

void MainWindow::rebuild_recent_menu() {
    recent_menu_->clear();
    const QStringList recent = settings_->recent_models();
    for (const QString& dir : recent) recent_menu_->addAction(dir, this, [this, dir] { open_model(dir); });
    recent_menu_->setEnabled(!recent.isEmpty());
}

void MainWindow::connect_worker() {
    connect(worker_, &RunWorker::started, this, [this] { job_failed_ = false; });
    connect(worker_, &RunWorker::progress, this, [this](const QString& stage, qint64 done, qint64 total) {
        if (!jobs_.empty() && jobs_.front() != JobKind::Niah && jobs_.front() != JobKind::AskCache)
            panel_->set_progress(stage, done, total);
    });
    connect(worker_, &RunWorker::model_loaded, this, &MainWindow::on_model_loaded);
    connect(worker_, &RunWorker::document_ready, this, [this](const GeneratedDocument& d) {
        set_document(d.context, "generated", d.needle);
        panel_->set_questions({d.question.toStdString()}, {d.expected.toStdString()},
                              {d.answer_prefix.toStdString()});
        status(QString("Generated a %1-token NIAH document (needle at %2 %)")
                   .arg(d.tokens)
                   .arg(d.depth_percent));
    });
    connect(worker_, &RunWorker::compare_done, this, [this](std::shared_ptr<const RunOutcome> o) {
        unpin_allocation();  // a pin belongs to the tokens of the run it was taken from
        apply_outcome(o);
        live_->start(std::move(o));
    });
    connect(worker_, &RunWorker::niah_progress, niah_, &NiahTab::set_progress);
    connect(worker_, &RunWorker::niah_done, this, [this](std::shared_ptr<const NiahOutcome> o) {
        niah_outcome_ = o;
        niah_->show_outcome(*o);
    });
    connect(worker_, &RunWorker::calibrated, this, [this](const CalibrationOutcome& o) {
        loaded_.basis_source = o.path;
        panel_->set_basis_status(o.path, false);
        update_status_labels();
        status(QString("Wrote %1: %2 layers, D %3, R %4, %5 residual tokens per layer")
                   .arg(o.path)
                   .arg(o.layers)
                   .arg(o.dim)
                   .arg(o.rank)
                   .arg(o.tokens));
    });
    connect(worker_, &RunWorker::failed, this, [this](const QString& m) {
        job_failed_ = true;
        if (!cache_job_failed(m)) show_error(m);
    });
    connect(worker_, &RunWorker::cancelled, this, [this] {
        job_failed_ = true;
        status("Cancelled.");
    });
    connect(worker_, &RunWorker::finished, this, &MainWindow::on_job_finished);
}

void MainWindow::on_job_finished() {
    if (jobs_.empty()) return;
    const JobKind kind = jobs_.front();
    jobs_.pop_front();
    const bool ok = !job_failed_;
    if (kind == JobKind::Load && !ok && loaded_.model_dir != model_dir_) {
        model_dir_ = loaded_.model_dir;  // runs keep using the model that is loaded
        run_when_ready_ = false;
    }
    if (kind == JobKind::Compare || kind == JobKind::Calibrate)
        panel_->set_running(job_queued(JobKind::Compare) || job_queued(JobKind::Calibrate) ||
                            job_queued(JobKind::SaveCache));
    finish_cache_job(kind, ok);
    if (kind == JobKind::Compare) {
        if (!ok) {
            panel_->set_progress(job_failed_ && error_text().isEmpty() ? "Cancelled" : "Stopped", 0, 0);
            live_->stop("The last run did not finish: Run again to explore its settings live.");
        }
        Q_EMIT run_finished(ok);
    }
    if (kind == JobKind::Calibrate) {
        if (!ok) panel_->set_progress(error_text().isEmpty() ? "Cancelled" : "Stopped", 0, 0);
        Q_EMIT calibration_finished(ok);
    }
    if (kind == JobKind::Explore && !ok && live_->active() && live_->outcome()) {
        // A live update that failed or was cancelled left the kept run as it was: so is the panel again.
        RunSettings s = panel_->settings();
        s.codec = live_->outcome()->request.settings;
        panel_->set_settings(s);
    }
    if (kind == JobKind::Niah) {
        niah_->set_running(job_queued(JobKind::Niah));
        Q_EMIT niah_finished(ok);
    }
    if ((kind == JobKind::Load || kind == JobKind::Generate) && ok && run_when_ready_ && jobs_.empty()) {
        run_when_ready_ = false;
        run();
    }
    if (kind == JobKind::Load || (kind == JobKind::Explore && jobs_.empty()))
        panel_->set_progress("Ready", 0, 0);
    update_empty_state();
    if (jobs_.empty()) Q_EMIT idle();
}

void MainWindow::on_model_loaded(const ModelInfo& info) {
    const bool new_model = QDir::cleanPath(info.model_dir) != QDir::cleanPath(loaded_.model_dir);
    loaded_ = info;
    settings_->add_recent_model(info.model_dir);
    if (new_model) {
        live_->stop("A new model: Run to explore its settings live.");
        unpin_allocation();
    }
    if (new_model && apply_defaults_on_load_) {
        panel_->apply_model_defaults(info.defaults, info.codec_defaults.has_value(), info.defaults_text);
        if (is_demo_model(info.model_dir)) {
            // The first-run regime (core/data_paths.h): where the methods part ways, so that a newcomer sees
            // what the allocation changes, and where it fails.
            RunSettings s = panel_->settings();
            s.codec.budget = DemoRegime{}.budget;
            s.mode = CompressionMode::QueryAgnostic;
            panel_->set_settings(s);
        }
        niah_->apply_model(info);
    }
    apply_defaults_on_load_ = true;
    panel_->set_basis_status(
        info.basis_source.isEmpty() ? "none shipped: runs self-calibrate" : info.basis_source, false);
    update_status_labels();
    update_empty_state();
    if (!info.reused) status(QString("Loaded %1 in %2 s").arg(info.name).arg(info.load_s, 0, 'f', 2));
    Q_EMIT model_ready();
}

void MainWindow::start(const StartupOptions& o) {
    if (o.use_defaults && o.model.isEmpty() && o.document.isEmpty() && restore_autosave()) return;
    QString model = o.model;
    if (model.isEmpty() && o.use_defaults) model = find_demo_model();
    if (model.isEmpty() && o.use_defaults) model = settings_->last_model();
    bool have_doc = false;
    if (!o.document.isEmpty()) have_doc = open_document(o.document);
    run_when_ready_ = o.run;
    if (!model.isEmpty()) {
        model_dir_ = QDir::cleanPath(model);
        jobs_.push_back(JobKind::Load);
        std::optional<NiahDocRequest> doc;
        if (!have_doc) doc = startup_document(model_dir_);
        worker_->load_model(model_dir_, panel_->settings(), doc);
        status("Loading " + model_dir_ + " …");
    } else {
        run_when_ready_ = false;
        status("Open a model to begin (File > Open Model).");
    }
    update_empty_state();
}

void MainWindow::open_model(const QString& dir) {
    clear_error();
    const QString clean = QDir::cleanPath(dir);
    model_dir_ = clean;
    apply_defaults_on_load_ = true;
    std::optional<NiahDocRequest> doc;
    // A generated document belongs to the previous model's tokenizer and positions: make a new one.
    if (document().trimmed().isEmpty() || document_source_ == "generated") doc = startup_document(clean);
    jobs_.push_back(JobKind::Load);
    worker_->load_model(clean, panel_->settings(), doc);
    status("Loading " + clean + " …");
}

bool MainWindow::open_document(const QString& path) {
    QString text;
    try {  // one check for the app and the CLI: empty, binary and non-UTF-8 files are refused by name
        text = QString::fromStdString(read_document_file(path.toStdString()));
    } catch (const Error& e) {
        show_error(QString::fromStdString(e.what()));
        return false;
    }
    set_document(text, QFileInfo(path).absoluteFilePath());
    settings_->set_last_document(QFileInfo(path).absoluteFilePath());
    status("Opened " + path);
    return true;
}

void MainWindow::set_document(const QString& text, const QString& source, const QString& needle) {
    const QSignalBlocker block(source_);
    source_->setPlainText(text);
    document_source_ = source;
    needle_ = needle;
    update_status_labels();
    update_empty_state();
    Q_EMIT document_changed();
}

QString MainWindow::document() const {
    return source_->toPlainText();
}

void MainWindow::generate_document(const NiahDocRequest& request) {
    if (model_dir_.isEmpty()) {
        show_error(
            "Generating a NIAH document needs a model (its tokenizer counts the length): open one first");
        return;
    }
    jobs_.push_back(JobKind::Generate);
    worker_->generate_document(model_dir_, panel_->settings(), request);
}

void MainWindow::run() {
    if (job_queued(JobKind::Compare)) {
        status("A comparison is already running.");
        return;
    }
    clear_error();
    if (model_dir_.isEmpty()) {
        show_error("No model: open one with File > Open Model (or drop a model folder on the window)");
        return;
    }
    if (document().trimmed().isEmpty()) {
        show_error("No document: open, paste or generate one (File menu)");
        return;
    }
    const RunSettings s = panel_->settings();
    if (s.methods.empty()) {
        show_error("No method selected: tick at least one in the Run panel");
        return;
    }
    panel_->set_running(true);
    jobs_.push_back(JobKind::Compare);
    worker_->run_compare(model_dir_, s, document(), needle_);
    QStringList names;
    for (const auto& m : s.methods) names << QString::fromStdString(m);
    status("Running " + names.join(", ") + " …");
}

void MainWindow::cancel() {
    if (jobs_.empty()) return;
    worker_->cancel();
    run_when_ready_ = false;
    status("Cancelling…");
}

void MainWindow::run_niah() {
    if (job_queued(JobKind::Niah)) return;
    clear_error();
    if (model_dir_.isEmpty()) {
        show_error("No model: open one with File > Open Model");
        return;
    }
    try {
        const RunSettings s = panel_->settings();
        const NiahSweepOptions opts = niah_->options(s);
        niah_->set_running(true);
        jobs_.push_back(JobKind::Niah);
        worker_->run_niah(model_dir_, s, opts);
    } catch (const std::exception& e) {
        show_error(QString::fromUtf8(e.what()));
    }
}

bool MainWindow::busy() const {
    return !jobs_.empty();
}

bool MainWindow::job_queued(JobKind kind) const {
    return std::find(jobs_.begin(), jobs_.end(), kind) != jobs_.end();
}

void MainWindow::apply_outcome(std::shared_ptr<const RunOutcome> o) {
    // A live step re-allocates the same tokens: the zoom, the selectors and the tab stay as they are.
    const bool live_step = o->step != "run" && !o->step.isEmpty() && outcome_ &&
                           o->token_texts.size() == outcome_->token_texts.size();
    const QStringList methods_before = model_->methods();
    outcome_ = std::move(o);
    model_->set_result(outcome_->result, outcome_->request, outcome_->token_texts);
    if (!live_step) model_->set_needle_span(outcome_->needle_span);
    if (!live_step) axis_->set_length(model_->n_tokens());
    answers_->set_stale(outcome_->answers_stale);
    answers_->set_result(outcome_->result, outcome_->request);
    if (live_step && model_->methods() == methods_before) {
        update_cache_label();
        return;
    }
    update_view_selectors();
    bool self_cal = false;
    for (const MethodRun& r : outcome_->result.runs) self_cal = self_cal || r.self_calibrated;
    const QString src = QString::fromStdString(outcome_->result.basis_source);
    panel_->set_basis_status(src.isEmpty() ? QString("not needed by these methods") : src, self_cal);
    tabs_->setCurrentIndex(0);
    update_status_labels();
    update_empty_state();
    QString done = QString("Compared %1 methods on %2 tokens in %3 s")
                       .arg(outcome_->result.runs.size())
                       .arg(model_->n_tokens())
                       .arg(outcome_->wall_s, 0, 'f', 2);
    for (const std::string& w : outcome_->result.warnings) done += " — warning: " + QString::fromStdString(w);
    if (outcome_->result.warnings.empty())
        status(done);
    else
        statusBar()->showMessage(done);  // a warning stays until the next message
}

void MainWindow::update_view_selectors() {
    const QStringList methods = model_->methods();
    const QString keep_m = method_box_->currentText(), keep_r = reference_box_->currentText();
    {
        const QSignalBlocker b1(method_box_), b2(reference_box_), b3(layer_box_);
        method_box_->clear();
        reference_box_->clear();
        method_box_->addItems(methods);
        reference_box_->addItems(methods);
        layer_box_->clear();
        layer_box_->addItem("Mean over layers", -1);
        for (int l = 0; l < model_->n_layer(); ++l) layer_box_->addItem(QString("Layer %1").arg(l), l);
    }
    const auto pick = [&](QComboBox* box, const QString& keep, const QString& preferred) {
        int i = box->findText(keep);
        if (i < 0) i = box->findText(preferred);
        box->setCurrentIndex(-1);
        box->setCurrentIndex(std::max(0, i));
    };
    pick(method_box_, keep_m, featured_method());
    pick(reference_box_, keep_r, compared_method());
    layer_box_->setCurrentIndex(-1);
    layer_box_->setCurrentIndex(0);
}

void MainWindow::update_status_labels() {
    if (loaded_.model_dir.isEmpty())
        model_label_->setText(model_dir_.isEmpty() ? "no model"
                                                   : "loading " + QFileInfo(model_dir_).fileName());
    else
        model_label_->setText(QString("%1 · D %2 · %3 layers · %4 %5")
                                  .arg(loaded_.name)
                                  .arg(loaded_.joint_dim)
                                  .arg(loaded_.n_layer)
                                  .arg(loaded_.device, loaded_.dtype));
    model_label_->setToolTip(loaded_.dtype_reason.isEmpty() ? QString() : "dtype " + loaded_.dtype_reason);
    QString doc =
        document_source_.isEmpty() ? QString("no document") : QFileInfo(document_source_).fileName();
    if (document_source_ == "generated") doc = "NIAH document";
    if (outcome_ && model_->n_tokens() > 0)
        doc += QString(" · %1 tokens").arg(model_->n_tokens());
    else if (source_)
        doc += QString(" · %1 chars").arg(source_->toPlainText().size());
    doc_label_->setText(doc);
    setWindowTitle(loaded_.name.isEmpty() ? "VarRate Studio" : "VarRate Studio — " + loaded_.name);
}

void MainWindow::update_empty_state() {
    const bool empty = model_dir_.isEmpty() && !outcome_;
    if (save_cache_action_) save_cache_action_->setEnabled(outcome_ != nullptr);
    stack_->setCurrentIndex(empty ? 0 : 1);
    if (!empty && !outcome_ && tabs_->currentIndex() == 0) tabs_->setCurrentIndex(1);  // text until a run
}

void MainWindow::show_error(const QString& message) {
    banner_text_->setText(message);
    banner_->show();
    statusBar()->showMessage("Error: " + message);
}

void MainWindow::clear_error() {
    banner_->hide();
    banner_text_->clear();
}

QString MainWindow::error_text() const {
    return banner_->isHidden() ? QString() : banner_text_->text();
}

void MainWindow::status(const QString& message) {
    statusBar()->showMessage(message, 15000);
}

void MainWindow::set_theme(const QString& theme) {
    theme_ = theme == "light" ? "light" : "dark";
    QApplication::setStyle(QStyleFactory::create("Fusion"));
    QApplication::setPalette(theme_ == "dark" ? dark_palette() : QApplication::style()->standardPalette());
    settings_->set_theme(theme_);
    if (dark_action_) dark_action_->setChecked(theme_ == "dark");
    if (light_action_) light_action_->setChecked(theme_ == "light");
}

void MainWindow::set_current_chart(QWidget* w) {
    current_chart_ = w;
}

bool MainWindow::eventFilter(QObject* watched, QEvent* e) {
    if (e->type() == QEvent::MouseButtonPress || e->type() == QEvent::ContextMenu) {
        QWidget* w = qobject_cast<QWidget*>(watched);
        if (w == doc_view_->viewport()) w = doc_view_;
        if (w) current_chart_ = w;
    }
    return QMainWindow::eventFilter(watched, e);
}

void MainWindow::closeEvent(QCloseEvent* e) {
    settings_->set_geometry(saveGeometry());
    settings_->set_window_state(saveState());
    settings_->sync();
    worker_->cancel();
    remove_autosave();  // closed normally: nothing to restore next time
    QMainWindow::closeEvent(e);
}

}  // namespace varrate::viz
