// The main window's Evaluation tab (viz/eval_tab.h): told which model is loaded, and one of its RULER samples
// regenerated with that model's tokenizer (off the UI thread) into the document, the run panel's question and
// the Analysis tab, ready to run.
#include <QFutureWatcher>
#include <QTabWidget>
#include <QtConcurrent/QtConcurrentRun>

#include <nlohmann/json.hpp>

#include "core/suites/eval.h"
#include "core/suites/ruler_tasks.h"
#include "viz/eval_tab.h"
#include "viz/main_window.h"
#include "viz/run_panel.h"

namespace varrate::viz {

namespace {

struct Regenerated {
    std::optional<RulerSample> sample;
    QString error;
};

}  // namespace

void MainWindow::build_eval_tab() {
    eval_ = new EvalTab;
    eval_->setObjectName("eval_tab");
    tabs_->addTab(eval_, "Evaluation");
    connect(eval_, &EvalTab::open_sample_requested, this, &MainWindow::open_eval_sample);
    connect(this, &MainWindow::model_ready, eval_, [this] { eval_->set_model(loaded_.name); });
}

void MainWindow::open_eval_sample(std::shared_ptr<const EvalRecord> record) {
    if (!record) return;
    const nlohmann::json& id = record->sweep;
    if (id.value("suite", "ruler") != "ruler") {
        show_error("A LongBench record does not hold its context: it cannot be opened in the Analysis tab");
        return;
    }
    if (!loaded_.tokenizer || loaded_.name.toStdString() != record->model) {
        show_error(
            QStringLiteral("Open the sweep's model (%1) first: its tokenizer fits the sample's context")
                .arg(QString::fromStdString(record->model)));
        return;
    }
    RulerOptions options;
    options.seed = id.value("seed", uint64_t{42});
    options.chat = id.value("chat", false);
    if (id.value("haystack", "procedural") != "procedural") {
        show_error("The sweep used an essay haystack, which its records do not hold");
        return;
    }
    auto* watcher = new QFutureWatcher<Regenerated>(this);
    connect(watcher, &QFutureWatcher<Regenerated>::finished, this, [this, watcher, record] {
        watcher->deleteLater();
        const Regenerated r = watcher->result();
        if (!r.sample) {
            show_error(QStringLiteral("Cannot regenerate the sample: %1").arg(r.error));
            return;
        }
        const RulerSample& s = *r.sample;
        if (s.question != record->question) {
            show_error("The regenerated sample differs from the record (another tokenizer or word lists?)");
            return;
        }
        std::string expected;
        for (const std::string& a : s.outputs) expected += (expected.empty() ? "" : ", ") + a;
        set_document(QString::fromStdString(s.context),
                     QStringLiteral("eval %1 L%2 S%3")
                         .arg(QString::fromStdString(s.task))
                         .arg(record->length)
                         .arg(record->sample),
                     s.needles.empty() ? QString() : QString::fromStdString(s.needles.front()));
        panel_->set_questions({s.question}, {expected}, {s.answer_prefix});
        tabs_->setCurrentIndex(0);
        status(QStringLiteral("%1 sample %2 at %3 tokens in the document: Run compares the methods on it")
                   .arg(QString::fromStdString(s.task))
                   .arg(record->sample)
                   .arg(record->length));
    });
    const std::shared_ptr<const Tokenizer> tokenizer = loaded_.tokenizer;
    const std::string task = record->task;
    const int64_t length = record->length, index = record->sample;
    watcher->setFuture(QtConcurrent::run([tokenizer, options, task, length, index] {
        Regenerated out;
        try {
            RulerGenerator gen(*tokenizer, options);
            out.sample = gen.generate(task, length, index);
        } catch (const std::exception& e) {
            out.error = QString::fromUtf8(e.what());
        }
        return out;
    }));
}

}  // namespace varrate::viz
