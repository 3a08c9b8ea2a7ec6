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
    const int nq = std::max(1, n_questions_);
    return 1 + nq + (has_pinned_ ? nq : 0);
}

void AnswersTable::set_pinned(std::optional<CompareResult> pinned, const QString& label) {
    pinned_ = std::move(pinned);
    pinned_label_ = label;
}

namespace {

const MethodRun* find_run(const CompareResult& r, const std::string& method) {
    for (const MethodRun& m : r.runs)
        if (m.method == method) return &m;
    return nullptr;
}

}  // namespace

void AnswersTable::clear_result() {
    n_questions_ = 0;
    clear();
    setRowCount(0);
    setColumnCount(8);
    setHorizontalHeaderLabels({"Method", "Answer", "Correct", "Accounted", "Resident", "Prefill ms",
                               "Codec ms", "Self-calibrated"});
    horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    horizontalHeader()->setSectionResizeMode(1, QHeaderView::Stretch);
}

void AnswersTable::set_result(const CompareResult& result, const CompareRequest& request) {
    clear();
    n_questions_ = static_cast<int>(request.questions.size());
    has_pinned_ = pinned_.has_value();
    const int nq = std::max(1, n_questions_);
    QStringList headers{"Method"};
    for (int q = 0; q < nq; ++q) {
        QString h = n_questions_ > 1 ? QString("Answer %1").arg(q + 1) : QString("Answer");
        headers << h;
    }
    // Pinned: the frozen allocation's answers beside the live ones, its footprint beside the live one.
    if (has_pinned_)
        for (int q = 0; q < nq; ++q)
            headers << (n_questions_ > 1 ? QString("Pinned %1 (%2)").arg(q + 1).arg(pinned_label_)
                                         : QString("Pinned (%1)").arg(pinned_label_));
    headers << "Correct"
            << "Accounted"
            << "Resident";
    if (has_pinned_) headers << "Pinned accounted";
    headers << "Prefill ms"
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
        const auto answer_item = [&](const MethodRun& m, int q, bool stale) {
            const bool has = q < static_cast<int>(m.answers.size());
            QString text = has ? one_line(m.answers[q]) : QString(n_questions_ ? "–" : "(no question)");
            if (!m.infeasible.empty())
                text = QString("infeasible at κ %1").arg(m.budget);
            else if (!has && stale && n_questions_)
                text = "stale: decoded when the controls rest (Enter: now)";
            auto* a = make_item(text);
            if (has) a->setToolTip(QString::fromStdString(m.answers[q]));
            if (!m.infeasible.empty()) a->setToolTip(QString::fromStdString(m.infeasible));
            if (q < static_cast<int>(m.correct.size())) a->setBackground(m.correct[q] ? good : bad);
            if (!has && stale) a->setForeground(palette().color(QPalette::Disabled, QPalette::Text));
            return a;
        };
        for (int q = 0; q < nq; ++q) {
            if (q < static_cast<int>(run.correct.size())) n_correct += run.correct[q];
            setItem(r, 1 + q, answer_item(run, q, stale_));
        }
        const MethodRun* pinned = has_pinned_ ? find_run(*pinned_, run.method) : nullptr;
        for (int q = 0; q < nq && has_pinned_; ++q)
            setItem(r, 1 + nq + q, pinned ? answer_item(*pinned, q, false) : make_item("–"));
        const int c = correct_column();
        setItem(r, c,
                make_item(run.correct.empty() ? QString("–")
                                              : QString("%1/%2").arg(n_correct).arg(run.correct.size()),
                          Qt::AlignCenter));
        auto* fp = make_item(QString("%1 %").arg(100.0 * run.footprint_fraction, 0, 'f', 2), right);
        fp->setToolTip(QString("accounted: %1 of %2 bytes counted by the budget (%3 of them basis: %4)")
                           .arg(run.stored_bytes)
                           .arg(run.full_bytes)
                           .arg(run.basis_bytes)
                           .arg(QString::fromStdString(run.basis_accounting)));
        setItem(r, c + 1, fp);
        // Resident: what the cache the answers were decoded from holds, measured from its tensors.
        auto* resident =
            make_item(run.resident_bytes > 0 ? QString("%1 %").arg(100.0 * run.resident_fraction(), 0, 'f', 2)
                                             : QString("–"),
                      right);
        resident->setToolTip(
            run.resident_bytes > 0
                ? QString("resident: the decoded cache holds %1 of %2 bytes, measured from its "
                          "tensors (VarRate/flat: the compressed store, with each coded token's "
                          "rank and the exact rows' positions; a shared basis apart)")
                      .arg(run.resident_bytes)
                      .arg(run.full_bytes)
                : QString("resident: not measured (no cache materialised yet)"));
        setItem(r, c + 2, resident);
        int next = c + 3;
        if (has_pinned_)
            setItem(r, next++,
                    make_item(pinned && pinned->infeasible.empty()
                                  ? QString("%1 %").arg(100.0 * pinned->footprint_fraction, 0, 'f', 2)
                                  : QString("–"),
                              right));
        setItem(r, next, make_item(QString::number(run.prefill_ms, 'f', 1), right));
        setItem(r, next + 1, make_item(QString::number(run.compress_ms, 'f', 1), right));
        setItem(r, next + 2, make_item(run.self_calibrated ? "yes" : "no", Qt::AlignCenter));
    }
    horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
    for (int q = 0; q < nq * (has_pinned_ ? 2 : 1); ++q)
        horizontalHeader()->setSectionResizeMode(1 + q, QHeaderView::Stretch);
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
