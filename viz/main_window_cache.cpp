// MainWindow's compressed-cache files: File > Save Compressed Cache (one method's cache of the current run,
// written by core/cache_file on the worker) and File > Open Compressed Cache (read and checked against the
// model, then questions answered from it in a CacheDialog without prefilling the document).
#include <QAction>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QInputDialog>
#include <QMenu>
#include <QMessageBox>
#include <QStatusBar>

#include "codec/registry.h"
#include "viz/answers_table.h"
#include "viz/app_settings.h"
#include "viz/cache_dialog.h"
#include "viz/cache_qa.h"
#include "viz/main_window.h"
#include "viz/run_panel.h"

namespace varrate::viz {

void MainWindow::build_cache_actions(QMenu* file) {
    cache_qa_ = new CacheQa(this);
    file->addSeparator();
    save_cache_action_ = file->addAction("Save Compressed &Cache…", this, &MainWindow::dialog_save_cache);
    save_cache_action_->setObjectName("save_cache_action");
    save_cache_action_->setToolTip(
        "Writes one method's compressed KV cache of the current run's document (.vrkv), to answer questions "
        "from later without a prefill (as varrate compress)");
    save_cache_action_->setEnabled(false);
    QAction* open = file->addAction("Open Compressed Ca&che…", this, &MainWindow::dialog_open_cache);
    open->setObjectName("open_cache_action");

    connect(worker_, &RunWorker::cache_saved, this, [this](const CacheSaveOutcome& o) {
        QString text = cache_saved_text(o);
        for (const std::string& w : o.info.warnings) text += " — warning: " + QString::fromStdString(w);
        // Stays until the next message: the bytes are the point of saving.
        statusBar()->showMessage(text);
    });
    connect(worker_, &RunWorker::cache_opened, this, [this](std::shared_ptr<const OpenedCache> c) {
        const QString name = QFileInfo(c->path).fileName();
        const QString method = QString::fromStdString(c->context->info.method);
        cache_qa_->set_cache(std::move(c));
        cache_qa_->set_status("Opened: ask a question (the document is not prefilled again).");
        if (!cache_dialog_) {
            cache_dialog_ = new CacheDialog(cache_qa_, this);
            connect(cache_dialog_, &CacheDialog::ask_requested, this,
                    [this](const QString& q, const QString& prefix, int max_new) {
                        ask_compressed_cache(q, prefix, max_new);
                    });
            connect(cache_dialog_, &CacheDialog::cancel_requested, this, &MainWindow::cancel);
            // The Run panel's question is the likely first one (the document is often the one in the window).
            const RunSettings s = panel_->settings();
            if (!s.questions.empty())
                cache_dialog_->set_question(
                    QString::fromStdString(s.questions.front()),
                    s.answer_prefixes.empty() ? QString() : QString::fromStdString(s.answer_prefixes.front()),
                    static_cast<int>(s.max_new_tokens));
        }
        cache_dialog_->show();
        cache_dialog_->raise();
        status(QString("Opened %1: %2 cache, no prefill needed to answer from it").arg(name, method));
    });
    connect(worker_, &RunWorker::cache_answered, this, [this](std::shared_ptr<const CacheAnswers> a) {
        cache_qa_->add_answers(*a);
        cache_qa_->set_status(QString("Answered in %1 ms from the cache (%2 prefill passes)")
                                  .arg(a->ms, 0, 'f', 0)
                                  .arg(a->prefills));
    });
    connect(worker_, &RunWorker::progress, this, [this](const QString& stage, qint64 done, qint64 total) {
        if (jobs_.empty() || jobs_.front() != JobKind::AskCache) return;
        if (stage == "answer")
            cache_qa_->set_status(QString("Answering (question %1 of %2)…").arg(done + 1).arg(total));
    });
}

QStringList MainWindow::cache_methods() const {
    QStringList out;
    if (!outcome_) return out;
    for (const MethodRun& r : outcome_->result.runs) {
        const QString m = QString::fromStdString(r.method);
        if (r.infeasible.empty() && !out.contains(m)) out << m;
    }
    return out;
}

QString MainWindow::selected_answers_method() const {
    if (!answers_->selectionModel() || !answers_->selectionModel()->hasSelection()) return {};
    const QTableWidgetItem* it = answers_->item(answers_->currentRow(), 0);
    return it ? it->text() : QString();
}

void MainWindow::dialog_save_cache() {
    if (!outcome_) {
        show_error("Nothing to save yet: run a comparison first");
        return;
    }
    const QStringList methods = cache_methods();
    QString method = selected_answers_method();
    if (!methods.contains(method)) {
        // The compressing methods first: `full` is a cache too, but rarely the one wanted.
        QStringList choices, uncompressed;
        for (const QString& m : methods) (method_compresses(m.toStdString()) ? choices : uncompressed) << m;
        const qsizetype compressing = choices.size();
        choices << uncompressed;
        if (choices.isEmpty()) {
            show_error("No method of the current run has a cache to save (all were infeasible)");
            return;
        }
        method = choices.front();
        if (choices.size() > 2 || (choices.size() == 2 && compressing == 2)) {
            bool ok = false;
            method =
                QInputDialog::getItem(this, "Save compressed cache",
                                      "Which method's cache of the current run?", choices, 0, false, &ok);
            if (!ok) return;
        }
    }
    const QString f = ask_save_path("Save compressed cache", method + ".vrkv", "Compressed cache (*.vrkv)");
    if (!f.isEmpty()) save_compressed_cache(f, method);
}

void MainWindow::dialog_open_cache() {
    const QString f = QFileDialog::getOpenFileName(this, "Open compressed cache", settings_->last_dir(),
                                                   "Compressed cache (*.vrkv);;All files (*)");
    if (f.isEmpty()) return;
    settings_->set_last_dir(QFileInfo(f).absolutePath());
    open_compressed_cache(f);
}

bool MainWindow::save_compressed_cache(const QString& path, const QString& method) {
    clear_error();
    if (!outcome_) {
        show_error("Nothing to save yet: run a comparison first");
        return false;
    }
    if (!cache_methods().contains(method)) {
        show_error(QString("The current run has no %1 cache to save (not run, or infeasible at its settings)")
                       .arg(method));
        return false;
    }
    const QString run_model = outcome_->model_dir.isEmpty() ? model_dir_ : outcome_->model_dir;
    if (model_dir_.isEmpty() || QDir::cleanPath(run_model) != QDir::cleanPath(model_dir_)) {
        show_error(QString("The current run was made with %1, and the model now is %2: run again to save a "
                           "cache of it")
                       .arg(run_model, model_dir_.isEmpty() ? QString("none") : model_dir_));
        return false;
    }
    if (job_queued(JobKind::SaveCache)) {
        status("A cache is being saved: wait for it to finish.");
        return false;
    }
    // The settings the views show (the live ones, after any κ or coefficient-bits change), on the device,
    // dtype and basis of the run.
    RunSettings settings = outcome_->run;
    settings.codec = outcome_->request.settings;
    CacheSaveRequest request;
    request.path = path;
    request.method = method.toStdString();
    request.context = outcome_->request.context;
    request.chat = outcome_->request.chat;
    request.max_new_tokens = outcome_->request.max_new_tokens;
    panel_->set_running(true);
    jobs_.push_back(JobKind::SaveCache);
    worker_->save_cache(model_dir_, settings, request);
    QString note;
    if (outcome_->request.mode == CompressionMode::QueryAware)
        note =
            " (query-agnostic: a cache holds the document before any question, so its answers are the "
            "query-agnostic ones)";
    status(QString("Saving the %1 cache to %2 …%3").arg(method, path, note));
    return true;
}

bool MainWindow::open_compressed_cache(const QString& path) {
    if (model_dir_.isEmpty()) {
        show_cache_error(path +
                         ": a cache is checked against the model it was made with: open that model "
                         "first (File > Open Model)");
        return false;
    }
    jobs_.push_back(JobKind::OpenCache);
    worker_->open_cache(model_dir_, panel_->settings(), path);
    status("Opening " + path + " …");
    return true;
}

bool MainWindow::ask_compressed_cache(const QString& question, const QString& answer_prefix,
                                      int max_new_tokens) {
    const std::shared_ptr<const OpenedCache> cache = cache_qa_->cache();
    if (!cache) {
        cache_qa_->set_status("No compressed cache is open: File > Open Compressed Cache", true);
        return false;
    }
    if (cache_qa_->busy() || question.trimmed().isEmpty()) return false;
    cache_qa_->set_busy(true);
    cache_qa_->set_status("Answering…");
    jobs_.push_back(JobKind::AskCache);
    worker_->ask_cache(cache, {question.toStdString()}, {answer_prefix.toStdString()}, max_new_tokens);
    return true;
}

void MainWindow::show_cache_error(const QString& message) {
    cache_error_ = message;
    statusBar()->showMessage("Error: " + message, 15000);
    if (!cache_error_box_) {
        cache_error_box_ =
            new QMessageBox(QMessageBox::Warning, "Compressed cache", QString(), QMessageBox::Ok, this);
        cache_error_box_->setObjectName("cache_error_box");
    }
    cache_error_box_->setText(message);
    // Window-modal but not blocking (open, not exec): the worker's signals keep arriving, and tests go on.
    cache_error_box_->open();
}

bool MainWindow::cache_job_failed(const QString& message) {
    if (jobs_.empty()) return false;
    if (jobs_.front() == JobKind::OpenCache) {
        show_cache_error(message);
        return true;
    }
    if (jobs_.front() == JobKind::AskCache) {
        // The cache stays open: the message belongs beside the question that failed.
        cache_qa_->set_status(message, true);
        statusBar()->showMessage("Error: " + message, 15000);
        return true;
    }
    return false;
}

void MainWindow::finish_cache_job(JobKind kind, bool ok) {
    if (kind == JobKind::SaveCache) {
        panel_->set_running(job_queued(JobKind::Compare) || job_queued(JobKind::Calibrate) ||
                            job_queued(JobKind::SaveCache));
        panel_->set_progress(ok ? "Ready" : (error_text().isEmpty() ? "Cancelled" : "Stopped"), 0, 0);
        Q_EMIT cache_saved(ok);
    } else if (kind == JobKind::OpenCache) {
        panel_->set_progress("Ready", 0, 0);
        Q_EMIT cache_opened(ok);
    } else if (kind == JobKind::AskCache) {
        cache_qa_->set_busy(job_queued(JobKind::AskCache));
        if (!ok && !cache_qa_->status_is_error()) cache_qa_->set_status("Cancelled.");
        Q_EMIT cache_answered(ok);
    }
}

}  // namespace varrate::viz
