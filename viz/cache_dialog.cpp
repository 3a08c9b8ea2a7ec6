#include "viz/cache_dialog.h"

#include <QDialogButtonBox>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QTableWidget>
#include <QVBoxLayout>

#include "viz/cache_qa.h"

namespace varrate::viz {

CacheDialog::CacheDialog(CacheQa* qa, QWidget* parent) : QDialog(parent), qa_(qa) {
    setObjectName("cache_dialog");
    setWindowTitle("Compressed cache");
    setModal(false);
    resize(760, 560);
    auto* root = new QVBoxLayout(this);

    summary_ = new QLabel;
    summary_->setObjectName("cache_summary");
    summary_->setWordWrap(true);
    summary_->setTextFormat(Qt::RichText);
    summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    root->addWidget(summary_);

    auto* form = new QFormLayout;
    question_ = new QLineEdit;
    question_->setObjectName("cache_question");
    question_->setPlaceholderText("Asked after the compressed document");
    prefix_ = new QLineEdit;
    prefix_->setObjectName("cache_answer_prefix");
    prefix_->setPlaceholderText("optional: the start of the reply, given to the model");
    max_new_ = new QSpinBox;
    max_new_->setRange(1, 4096);
    max_new_->setValue(32);
    max_new_->setToolTip("tokens generated per answer");
    form->addRow("Question", question_);
    form->addRow("Reply starts", prefix_);
    form->addRow("Max new tokens", max_new_);
    root->addLayout(form);

    auto* buttons = new QHBoxLayout;
    ask_ = new QPushButton("Ask");
    ask_->setObjectName("cache_ask");
    ask_->setDefault(true);
    ask_->setToolTip("Decodes the answer after the compressed document: the document is not prefilled again");
    cancel_ = new QPushButton("Cancel");
    cancel_->setEnabled(false);
    status_ = new QLabel;
    status_->setObjectName("cache_status");
    status_->setWordWrap(true);
    buttons->addWidget(ask_);
    buttons->addWidget(cancel_);
    buttons->addWidget(status_, 1);
    root->addLayout(buttons);

    answers_ = new QTableWidget(0, 4);
    answers_->setObjectName("cache_answers");
    answers_->setHorizontalHeaderLabels({"Question", "Reply starts", "Answer", "ms"});
    answers_->setEditTriggers(QAbstractItemView::NoEditTriggers);
    answers_->setSelectionBehavior(QAbstractItemView::SelectRows);
    answers_->verticalHeader()->setVisible(false);
    // The answer gets the room; long questions are cut (their tooltips hold them whole).
    answers_->horizontalHeader()->setSectionResizeMode(QHeaderView::Interactive);
    answers_->horizontalHeader()->setSectionResizeMode(2, QHeaderView::Stretch);
    answers_->horizontalHeader()->setSectionResizeMode(3, QHeaderView::ResizeToContents);
    answers_->setColumnWidth(0, 220);
    answers_->setColumnWidth(1, 160);
    root->addWidget(answers_, 1);

    auto* close = new QDialogButtonBox(QDialogButtonBox::Close);
    connect(close, &QDialogButtonBox::rejected, this, &QDialog::reject);
    root->addWidget(close);

    connect(ask_, &QPushButton::clicked, this, &CacheDialog::ask);
    connect(question_, &QLineEdit::returnPressed, this, &CacheDialog::ask);
    connect(cancel_, &QPushButton::clicked, this, &CacheDialog::cancel_requested);
    connect(qa_, &CacheQa::cache_changed, this, &CacheDialog::show_cache);
    connect(qa_, &CacheQa::entries_changed, this, &CacheDialog::show_entries);
    connect(qa_, &CacheQa::state_changed, this, &CacheDialog::show_state);
    show_cache();
    show_entries();
    show_state();
}

void CacheDialog::set_question(const QString& question, const QString& answer_prefix, int max_new_tokens) {
    question_->setText(question);
    prefix_->setText(answer_prefix);
    max_new_->setValue(max_new_tokens);
}

QString CacheDialog::summary_text() const {
    return summary_->text();
}

void CacheDialog::ask() {
    if (!qa_->has_cache() || qa_->busy()) return;
    const QString q = question_->text().trimmed();
    if (q.isEmpty()) {
        qa_->set_status("Type a question first.", true);
        return;
    }
    Q_EMIT ask_requested(q, prefix_->text().trimmed(), max_new_->value());
}

void CacheDialog::show_cache() {
    const auto cache = qa_->cache();
    if (!cache) {
        setWindowTitle("Compressed cache");
        summary_->setText("No compressed cache is open.");
    } else {
        setWindowTitle("Compressed cache — " + QFileInfo(cache->path).fileName());
        summary_->setText(cache_summary_html(*cache));
    }
    show_state();
}

void CacheDialog::show_entries() {
    const auto& entries = qa_->entries();
    answers_->setRowCount(static_cast<int>(entries.size()));
    const auto item = [](const QString& text) {
        auto* it = new QTableWidgetItem(text);
        it->setToolTip(text);
        return it;
    };
    for (int r = 0; r < static_cast<int>(entries.size()); ++r) {
        const CacheQa::Entry& e = entries[static_cast<size_t>(r)];
        QString answer = e.answer.trimmed();
        answer.replace('\n', QString::fromUtf8(" ⏎ "));
        answers_->setItem(r, 0, item(e.question));
        answers_->setItem(r, 1, item(e.answer_prefix));
        answers_->setItem(r, 2, item(answer));
        auto* ms = item(QString::number(e.ms, 'f', 0));
        ms->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
        answers_->setItem(r, 3, ms);
    }
    if (!entries.empty()) answers_->scrollToBottom();
}

void CacheDialog::show_state() {
    const bool busy = qa_->busy();
    ask_->setEnabled(qa_->has_cache() && !busy);
    cancel_->setEnabled(busy);
    status_->setText(qa_->status());
    status_->setStyleSheet(qa_->status_is_error() ? "color: #F0496E;" : QString());
}

}  // namespace varrate::viz
