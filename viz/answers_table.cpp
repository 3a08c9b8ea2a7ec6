#include "viz/answers_table.h"

#include <QHeaderView>

namespace varrate::viz {

namespace {

QTableWidgetItem* make_item(const QString& text, Qt::Alignment align = Qt::AlignLeft | Qt::AlignVCenter) {
    auto* it = new QTableWidgetItem(text);
    it->setFlags(Qt::ItemIsSelectable | Qt::ItemIsEnabled);
    it->setTextAlignment(align);
    return it;
}

QString one_line(const std::string& s) {
    QString q = QString::fromStdString(s).trimmed();
    q.replace('\n', QString::fromUtf8(" ⏎ "));
    return q;
}

QString csv_field(QString s) {
    if (s.contains(',') || s.contains('"') || s.contains('\n')) s = '"' + s.replace("\"", "\"\"") + '"';
    return s;
}

}  // namespace

AnswersTable::AnswersTable(QWidget* parent) : QTableWidget(parent) {
    setObjectName("answers_table");
    setAlternatingRowColors(true);
    setSelectionBehavior(QAbstractItemView::SelectRows);
    setEditTriggers(QAbstractItemView::NoEditTriggers);
    verticalHeader()->setVisible(false);
    setWordWrap(false);
    clear_result();
}

int AnswersTable::correct_column() const {
    return 1 + std::max(1, n_questions_);
}

void AnswersTable::clear_result() {
    n_questions_ = 0;
    clear();
    setRowCount(0);
    setColumnCount(7);
    setHorizontalHeaderLabels(
        {"Method", "Answer", "Correct", "Accounted", "Prefill ms", "Codec ms", "Self-calibrated"});
    horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    horizontalHeader()->setSectionResizeMode(1, QHeaderView::Stretch);
}

void AnswersTable::set_result(const CompareResult& result, const CompareRequest& request) {
    clear();
    n_questions_ = static_cast<int>(request.questions.size());
    const int nq = std::max(1, n_questions_);
    QStringList headers{"Method"};
    for (int q = 0; q < nq; ++q) {
        QString h = n_questions_ > 1 ? QString("Answer %1").arg(q + 1) : QString("Answer");
        headers << h;
    }
    headers << "Correct"
            << "Accounted"
            << "Prefill ms"
            << "Codec ms"
            << "Self-calibrated";
    setColumnCount(headers.size());
    setHorizontalHeaderLabels(headers);
    for (int q = 0; q < n_questions_; ++q) {
        QString tip = QString::fromStdString(request.questions[q]);
        if (q < static_cast<int>(request.answers.size()) && !request.answers[q].empty())
            tip += "\nexpected: " + QString::fromStdString(request.answers[q]);
        horizontalHeaderItem(1 + q)->setToolTip(tip);
    }
    setRowCount(static_cast<int>(result.runs.size()));
    const QColor good(12, 215, 159, 55), bad(240, 73, 110, 45);
    const auto right = Qt::AlignRight | Qt::AlignVCenter;
    for (int r = 0; r < static_cast<int>(result.runs.size()); ++r) {
        const MethodRun& run = result.runs[r];
        auto* name = make_item(QString::fromStdString(run.method));
        QFont f = name->font();
        f.setBold(true);
        name->setFont(f);
        setItem(r, 0, name);
        int n_correct = 0;
        for (int q = 0; q < nq; ++q) {
            const bool has = q < static_cast<int>(run.answers.size());
            auto* a =
                make_item(has ? one_line(run.answers[q]) : QString(n_questions_ ? "–" : "(no question)"));
            if (has) a->setToolTip(QString::fromStdString(run.answers[q]));
            if (q < static_cast<int>(run.correct.size())) {
                a->setBackground(run.correct[q] ? good : bad);
                n_correct += run.correct[q];
            }
            setItem(r, 1 + q, a);
        }
        const int c = correct_column();
        setItem(r, c,
                make_item(run.correct.empty() ? QString("–")
                                              : QString("%1/%2").arg(n_correct).arg(run.correct.size()),
                          Qt::AlignCenter));
        auto* fp = make_item(QString("%1 %").arg(100.0 * run.footprint_fraction, 0, 'f', 2), right);
        fp->setToolTip(QString("accounted: %1 of %2 bytes would be stored (%3 of them basis: %4); the cache "
                               "itself still holds L x D")
                           .arg(run.stored_bytes)
                           .arg(run.full_bytes)
                           .arg(run.basis_bytes)
                           .arg(QString::fromStdString(run.basis_accounting)));
        setItem(r, c + 1, fp);
        setItem(r, c + 2, make_item(QString::number(run.prefill_ms, 'f', 1), right));
        setItem(r, c + 3, make_item(QString::number(run.compress_ms, 'f', 1), right));
        setItem(r, c + 4, make_item(run.self_calibrated ? "yes" : "no", Qt::AlignCenter));
    }
    horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    for (int q = 0; q < nq; ++q) horizontalHeader()->setSectionResizeMode(1 + q, QHeaderView::Stretch);
}

QString AnswersTable::to_csv() const {
    QString out;
    QStringList h;
    for (int c = 0; c < columnCount(); ++c) h << csv_field(horizontalHeaderItem(c)->text());
    out += h.join(',') + '\n';
    for (int r = 0; r < rowCount(); ++r) {
        QStringList row;
        for (int c = 0; c < columnCount(); ++c) row << csv_field(item(r, c) ? item(r, c)->text() : QString());
        out += row.join(',') + '\n';
    }
    return out;
}

}  // namespace varrate::viz
