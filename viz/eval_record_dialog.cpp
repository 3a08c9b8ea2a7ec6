#include "viz/eval_record_dialog.h"

#include <QDialogButtonBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QVBoxLayout>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/file_io.h"
#include "codec/registry.h"
#include "core/suites/niah_record.h"

namespace varrate::viz {

namespace {

QPlainTextEdit* text_box(const char* name, int lines) {
    auto* t = new QPlainTextEdit;
    t->setObjectName(name);
    t->setReadOnly(true);
    t->setMinimumHeight(t->fontMetrics().lineSpacing() * lines + 12);
    return t;
}

QString series_text(const EvalCell& c) {
    return method_takes_budget(c.method)
               ? QString::fromStdString(fmt::format("{} at κ {:g}", c.method, c.budget))
               : QString::fromStdString(c.method);
}

}  // namespace

EvalRecordDialog::EvalRecordDialog(QWidget* parent) : QDialog(parent) {
    setWindowTitle("Evaluation sample");
    resize(640, 560);
    auto* root = new QVBoxLayout(this);
    title_ = new QLabel;
    title_->setObjectName("eval_record_title");
    title_->setWordWrap(true);
    root->addWidget(title_);
    auto* row = new QHBoxLayout;
    row->addWidget(new QLabel("Sample"));
    sample_ = new QSpinBox;
    sample_->setObjectName("eval_record_sample");
    row->addWidget(sample_);
    score_ = new QLabel;
    score_->setObjectName("eval_record_score");
    row->addSpacing(12);
    row->addWidget(score_, 1);
    root->addLayout(row);
    auto* form = new QFormLayout;
    question_ = text_box("eval_record_question", 3);
    references_ = text_box("eval_record_references", 2);
    prediction_ = text_box("eval_record_prediction", 3);
    form->addRow("Question", question_);
    form->addRow("References", references_);
    form->addRow("Prediction", prediction_);
    root->addLayout(form, 1);
    details_ = new QLabel;
    details_->setObjectName("eval_record_details");
    details_->setWordWrap(true);
    details_->setStyleSheet("color: palette(mid);");
    root->addWidget(details_);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close);
    open_ = buttons->addButton("Open in Analysis", QDialogButtonBox::ActionRole);
    open_->setObjectName("eval_record_open");
    open_->setEnabled(false);
    root->addWidget(buttons);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::close);
    connect(open_, &QPushButton::clicked, this, [this] {
        if (record_) Q_EMIT open_in_analysis(record_);
    });
    connect(sample_, &QSpinBox::valueChanged, this, [this](int s) { show_sample(s); });
}

void EvalRecordDialog::show_cell(const std::filesystem::path& out_dir, const EvalCell& cell,
                                 int64_t samples) {
    out_dir_ = out_dir;
    cell_ = cell;
    {
        const QSignalBlocker block(sample_);
        sample_->setRange(0, static_cast<int>(std::max<int64_t>(1, samples) - 1));
    }
    int64_t first = 0;
    for (int64_t s = 0; s < samples; ++s)
        if (std::filesystem::exists(
                eval_record_path(out_dir, cell.method, cell.budget, cell.task, cell.length, s))) {
            first = s;
            break;
        }
    {
        const QSignalBlocker block(sample_);
        sample_->setValue(static_cast<int>(first));
    }
    show_sample(first);
}

bool EvalRecordDialog::show_sample(int64_t sample) {
    const auto path =
        eval_record_path(out_dir_, cell_.method, cell_.budget, cell_.task, cell_.length, sample);
    title_->setText(QStringLiteral("<b>%1</b> · length %2 · %3")
                        .arg(QString::fromStdString(cell_.task))
                        .arg(cell_.length)
                        .arg(series_text(cell_)));
    setWindowTitle(QStringLiteral("%1 L%2 S%3 — %4")
                       .arg(QString::fromStdString(cell_.task))
                       .arg(cell_.length)
                       .arg(sample)
                       .arg(series_text(cell_)));
    record_.reset();
    try {
        if (!std::filesystem::exists(path)) throw Error(path.string() + ": no record (not run yet?)");
        record_ =
            std::make_shared<const EvalRecord>(eval_record_from_json(read_json_file(path), path.string()));
    } catch (const std::exception& e) {
        question_->clear();
        references_->clear();
        prediction_->clear();
        prediction_->setProperty("prediction", QString());
        score_->setText(QString::fromUtf8(e.what()));
        details_->clear();
        open_->setEnabled(false);
        return false;
    }
    const EvalRecord& r = *record_;
    question_->setPlainText(QString::fromStdString(r.question));
    QStringList refs;
    for (const std::string& a : r.answers) refs << QString::fromStdString(a);
    references_->setPlainText(refs.join('\n'));
    prediction_->setPlainText(QString::fromStdString(
        r.answer_prefix.empty() ? r.prediction : r.answer_prefix + " " + r.prediction));
    // The prediction box shows the answer prefix too; prediction_text() is the model's part alone.
    prediction_->setProperty("prediction", QString::fromStdString(r.prediction));
    score_->setText(
        r.score
            ? QStringLiteral("score %1 (%2)").arg(*r.score, 0, 'f', 1).arg(QString::fromStdString(r.metric))
            : QStringLiteral("infeasible: %1").arg(QString::fromStdString(r.infeasible)));
    details_->setText(QString::fromStdString(fmt::format(
        "{} · prompt {} tokens, context {} ({} compressed, footprint {:.3f}) · up to {} new tokens · prefill "
        "{:.0f} ms, "
        "compress {:.0f} ms{}",
        r.model, r.prompt_tokens, r.context_tokens, r.compressed_tokens, r.footprint_fraction,
        r.max_new_tokens, r.prefill_ms, r.compress_ms, r.sample_id.empty() ? "" : " · id " + r.sample_id)));
    open_->setEnabled(analysis_available_);
    open_->setToolTip(analysis_available_
                          ? QStringLiteral("regenerate this sample's context with the loaded model's "
                                           "tokenizer and show it in the Analysis tab")
                          : analysis_why_not_);
    return true;
}

void EvalRecordDialog::set_analysis_available(bool available, const QString& why_not) {
    analysis_available_ = available;
    analysis_why_not_ = why_not;
    open_->setEnabled(available && record_ != nullptr);
    open_->setToolTip(available ? QString() : why_not);
}

int64_t EvalRecordDialog::sample() const {
    return sample_->value();
}
QString EvalRecordDialog::prediction_text() const {
    return prediction_->property("prediction").toString();
}
QString EvalRecordDialog::question_text() const {
    return question_->toPlainText();
}
QString EvalRecordDialog::references_text() const {
    return references_->toPlainText();
}
QString EvalRecordDialog::score_text() const {
    return score_->text();
}

}  // namespace varrate::viz
