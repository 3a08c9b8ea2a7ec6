// MainWindow's file side: exports (results JSON, rank log, answers, charts), session files and the autosave,
// the document dialogs and drag-and-drop. Every failure goes to the window's error banner.
#include <QDateTime>
#include <QDialog>
#include <QDialogButtonBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QMessageBox>
#include <QMimeData>
#include <QPlainTextEdit>
#include <QSpinBox>
#include <QTabWidget>
#include <QTimer>
#include <QVBoxLayout>

#include <nlohmann/json.hpp>

#include "viz/answers_table.h"
#include "viz/app_settings.h"
#include "viz/chart_export.h"
#include "viz/live_explorer.h"
#include "viz/main_window.h"
#include "viz/position_charts.h"
#include "viz/run_model.h"
#include "viz/run_panel.h"
#include "viz/session_file.h"

namespace varrate::viz {

namespace {

bool is_model_dir(const QString& path) {
    const QFileInfo fi(path);
    return fi.isDir() && QFileInfo::exists(QDir(path).filePath("config.json"));
}

}  // namespace

QString MainWindow::ask_save_path(const QString& title, const QString& name, const QString& filter) {
    const QString f = QFileDialog::getSaveFileName(this, title, settings_->last_dir() + "/" + name, filter);
    if (!f.isEmpty()) settings_->set_last_dir(QFileInfo(f).absolutePath());
    return f;
}

bool MainWindow::export_results_json(const QString& path) {
    if (!outcome_) {
        show_error("Nothing to export yet: run a comparison first");
        return false;
    }
    try {
        const nlohmann::json j = varrate::to_json(outcome_->result, outcome_->request);
        write_file_atomic_qt(path, QByteArray::fromStdString(j.dump(2) + "\n"));
        status("Wrote " + path);
        return true;
    } catch (const std::exception& e) {
        show_error(QString::fromUtf8(e.what()));
        return false;
    }
}

bool MainWindow::export_rank_log(const QString& path) {
    if (!outcome_) {
        show_error("Nothing to export yet: run a comparison first");
        return false;
    }
    if (!loaded_.tokenizer) {
        show_error("The rank log names tokens with the model's tokenizer: wait for the model to load");
        return false;
    }
    try {
        write_file_atomic_qt(path,
                             QByteArray::fromStdString(rank_log_csv(outcome_->result, *loaded_.tokenizer)));
        status("Wrote " + path);
        return true;
    } catch (const std::exception& e) {
        show_error(QString::fromUtf8(e.what()));
        return false;
    }
}

bool MainWindow::export_answers_csv(const QString& path) {
    try {
        write_file_atomic_qt(path, answers_->to_csv().toUtf8());
        status("Wrote " + path);
        return true;
    } catch (const std::exception& e) {
        show_error(QString::fromUtf8(e.what()));
        return false;
    }
}

bool MainWindow::export_chart(const QString& path) {
    try {
        export_widget(current_chart_ ? current_chart_ : charts_, path);
        status("Wrote " + path);
        return true;
    } catch (const std::exception& e) {
        show_error(QString::fromUtf8(e.what()));
        return false;
    }
}

bool MainWindow::copy_chart() {
    copy_widget_to_clipboard(current_chart_ ? current_chart_ : charts_);
    status("Chart copied to the clipboard");
    return true;
}

StudioSession MainWindow::current_session() const {
    StudioSession s;
    s.model_dir = model_dir_;
    s.document = document();
    s.document_source = document_source_;
    s.needle = needle_;
    s.settings = panel_->settings();
    s.outcome = outcome_;
    return s;
}

bool MainWindow::save_session(const QString& path) {
    try {
        varrate::viz::save_session(path, current_session());
        status("Saved session " + path);
        return true;
    } catch (const std::exception& e) {
        show_error(QString::fromUtf8(e.what()));
        return false;
    }
}

void MainWindow::build_autosave() {
    // Written a moment after a run finishes or the document changes (edits come in bursts), atomically.
    autosave_timer_ = new QTimer(this);
    autosave_timer_->setSingleShot(true);
    autosave_timer_->setInterval(1500);
    connect(autosave_timer_, &QTimer::timeout, this, &MainWindow::autosave);
    connect(this, &MainWindow::run_finished, autosave_timer_, qOverload<>(&QTimer::start));
    connect(this, &MainWindow::document_changed, autosave_timer_, qOverload<>(&QTimer::start));
}

void MainWindow::autosave() {
    autosave_timer_->stop();
    if (document().trimmed().isEmpty() && !outcome_) return;
    try {
        varrate::viz::save_session(settings_->autosave_file(), current_session());
    } catch (const std::exception& e) {  // a full disk must not interrupt the work: say it once per failure
        status(QString("Autosave failed: ") + QString::fromUtf8(e.what()));
    }
}

bool MainWindow::restore_autosave() {
    const QString file = settings_->autosave_file();
    if (!QFileInfo::exists(file)) return false;
    const QString when = QFileInfo(file).lastModified().toString("yyyy-MM-dd HH:mm");
    if (!open_session(file)) {  // unreadable: set aside so that the next start does not trip on it again
        QFile::rename(file, file + ".corrupt-" + QDateTime::currentDateTime().toString("yyyyMMdd-HHmmss"));
        return false;
    }
    status("Restored the session autosaved at " + when +
           ": VarRate Studio did not close normally last time.");
    return true;
}

void MainWindow::remove_autosave() {
    if (autosave_timer_) autosave_timer_->stop();
    QFile::remove(settings_->autosave_file());
}

bool MainWindow::open_session(const QString& path) {
    StudioSession s;
    try {
        s = varrate::viz::load_session(path);
    } catch (const std::exception& e) {
        show_error(QString::fromUtf8(e.what()));
        return false;
    }
    clear_error();
    set_document(s.document, s.document_source, s.needle);
    panel_->set_settings(s.settings);
    live_->stop("Opened from a session file: Run to explore its settings live.");
    unpin_allocation();
    if (s.outcome) {
        apply_outcome(s.outcome);
    } else {
        outcome_.reset();
        model_->clear();
        answers_->clear_result();
    }
    if (!s.model_dir.isEmpty() && QDir::cleanPath(s.model_dir) != QDir::cleanPath(loaded_.model_dir)) {
        model_dir_ = QDir::cleanPath(s.model_dir);
        apply_defaults_on_load_ = false;  // the session's settings stay
        jobs_.push_back(JobKind::Load);
        worker_->load_model(model_dir_, s.settings);
    }
    update_status_labels();
    update_empty_state();
    status("Opened session " + path);
    return true;
}

void MainWindow::dialog_generate_document() {
    QDialog d(this);
    d.setWindowTitle("Generate NIAH document");
    auto* f = new QFormLayout(&d);
    auto* length = new QSpinBox;
    length->setRange(16, 1 << 20);
    length->setValue(
        static_cast<int>(default_document_length(loaded_.max_positions > 0 ? loaded_.max_positions : 512)));
    auto* depth = new QDoubleSpinBox;
    depth->setRange(0, 100);
    depth->setValue(50);
    depth->setSuffix(" %");
    auto* distractors = new QSpinBox;
    distractors->setRange(0, 32);
    auto* seed = new QSpinBox;
    seed->setRange(0, 1 << 30);
    seed->setValue(42);
    auto* sample = new QSpinBox;
    sample->setRange(0, 100000);
    f->addRow("Length (tokens)", length);
    f->addRow("Needle depth", depth);
    f->addRow("Distractor needles", distractors);
    f->addRow("Seed", seed);
    f->addRow("Sample (key/value)", sample);
    auto* bb = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel);
    connect(bb, &QDialogButtonBox::accepted, &d, &QDialog::accept);
    connect(bb, &QDialogButtonBox::rejected, &d, &QDialog::reject);
    f->addRow(bb);
    if (d.exec() != QDialog::Accepted) return;
    NiahDocRequest r;
    r.length = length->value();
    r.depth_percent = depth->value();
    r.distractors = distractors->value();
    r.seed = static_cast<uint64_t>(seed->value());
    r.sample = sample->value();
    r.chat = panel_->settings().chat;
    generate_document(r);
}

void MainWindow::dialog_paste_text() {
    QDialog d(this);
    d.setWindowTitle("Paste text");
    d.resize(700, 500);
    auto* l = new QVBoxLayout(&d);
    auto* edit = new QPlainTextEdit;
    edit->setPlaceholderText("Paste the document here");
    l->addWidget(edit);
    auto* bb = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel);
    connect(bb, &QDialogButtonBox::accepted, &d, &QDialog::accept);
    connect(bb, &QDialogButtonBox::rejected, &d, &QDialog::reject);
    l->addWidget(bb);
    if (d.exec() != QDialog::Accepted || edit->toPlainText().trimmed().isEmpty()) return;
    set_document(edit->toPlainText(), "pasted");
    tabs_->setCurrentWidget(source_);
}

void MainWindow::calibrate_on_files(const QStringList& files) {
    clear_error();
    if (model_dir_.isEmpty()) {
        show_error("Calibrating a basis needs a model: open one first (File > Open Model)");
        return;
    }
    if (files.isEmpty()) {
        show_error("Calibrate: choose at least one text file");
        return;
    }
    if (job_queued(JobKind::Calibrate) || job_queued(JobKind::Compare)) {
        status("Wait for the running comparison or calibration to finish.");
        return;
    }
    panel_->set_running(true);
    jobs_.push_back(JobKind::Calibrate);
    CalibrationRequest request;
    request.files = files;
    worker_->calibrate(model_dir_, panel_->settings(), request);
    status(QString("Calibrating a basis on %1 file(s) …").arg(files.size()));
}

void MainWindow::dialog_calibrate() {
    if (model_dir_.isEmpty()) {
        show_error("Calibrating a basis needs a model: open one first (File > Open Model)");
        return;
    }
    const QStringList files =
        QFileDialog::getOpenFileNames(this, "Calibrate the codec basis on text files", settings_->last_dir(),
                                      "Text (*.txt *.md *.markdown);;All files (*)");
    if (files.isEmpty()) return;
    settings_->set_last_dir(QFileInfo(files.front()).absolutePath());
    const QString out = QDir(model_dir_).filePath(QString::fromUtf8(kBasisFile));
    if (QFileInfo::exists(out) &&
        QMessageBox::question(this, "Replace the basis?",
                              out + " exists. Replace it with a basis calibrated on the chosen files?",
                              QMessageBox::Yes | QMessageBox::Cancel,
                              QMessageBox::Cancel) != QMessageBox::Yes)
        return;
    calibrate_on_files(files);
}

void MainWindow::dragEnterEvent(QDragEnterEvent* e) {
    if (e->mimeData()->hasUrls()) e->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* e) {
    for (const QUrl& url : e->mimeData()->urls()) {
        const QString path = url.toLocalFile();
        if (path.isEmpty()) continue;
        if (QFileInfo(path).isDir()) {
            if (is_model_dir(path))
                open_model(path);
            else
                show_error(path + ": not a model folder (no config.json)");
        } else if (path.endsWith(".json", Qt::CaseInsensitive)) {
            open_session(path);
        } else {
            open_document(path);
        }
        e->acceptProposedAction();
        return;
    }
}

}  // namespace varrate::viz
