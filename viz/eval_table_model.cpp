#include "viz/eval_table_model.h"

#include <QBrush>
#include <QFont>

#include "codec/registry.h"
#include "core/suites/niah_record.h"
#include "viz/niah_heatmap_paint.h"

namespace varrate::viz {

EvalTableModel::EvalTableModel(QObject* parent) : QAbstractTableModel(parent) {}

void EvalTableModel::set_summary(const EvalSummary& summary) {
    beginResetModel();
    summary_ = summary;
    rows_ = summary.cells;
    if (summary.lengths.size() > 1)
        rows_.insert(rows_.end(), summary.by_length.begin(), summary.by_length.end());
    rows_.insert(rows_.end(), summary.overall.begin(), summary.overall.end());
    endResetModel();
}

void EvalTableModel::clear() {
    beginResetModel();
    summary_ = {};
    rows_.clear();
    endResetModel();
}

const EvalCell* EvalTableModel::cell(int row) const {
    return row >= 0 && row < static_cast<int>(rows_.size()) ? &rows_[static_cast<size_t>(row)] : nullptr;
}

bool EvalTableModel::pooled(int row) const {
    const EvalCell* c = cell(row);
    return c && c->task.empty();
}

int EvalTableModel::rowCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : static_cast<int>(rows_.size());
}

int EvalTableModel::columnCount(const QModelIndex& parent) const {
    return parent.isValid() ? 0 : kColumns;
}

QVariant EvalTableModel::headerData(int section, Qt::Orientation orientation, int role) const {
    if (orientation != Qt::Horizontal) return {};
    const QString ref = QString::fromStdString(summary_.reference.empty() ? "reference" : summary_.reference);
    if (role == Qt::DisplayRole) {
        switch (section) {
            case Task:
                return QStringLiteral("Task");
            case Length:
                return QStringLiteral("Length");
            case Method:
                return QStringLiteral("Method");
            case Budget:
                return QStringLiteral("κ");
            case N:
                return QStringLiteral("n");
            case Mean:
                return QStringLiteral("Mean");
            case Difference:
                return QStringLiteral("Δ vs %1").arg(ref);
            case Interval:
                return QStringLiteral("95 % interval");
            case WinsLosses:
                return QStringLiteral("+/−");
            case SignP:
                return QStringLiteral("sign p");
            case Infeasible:
                return QStringLiteral("infeasible");
        }
    }
    if (role == Qt::ToolTipRole) {
        switch (section) {
            case Mean:
                return QStringLiteral("mean score 0-100 over the cell's samples");
            case Difference:
                return QStringLiteral("mean difference to %1 over the samples both have (paired)").arg(ref);
            case Interval:
                return QStringLiteral(
                           "percentile bootstrap 95 % interval of the mean difference; bold where it "
                           "excludes 0 and the "
                           "sign test gives p < 0.05 (never below %1 pairs: n too small); not corrected for "
                           "multiple "
                           "comparisons")
                    .arg(kMinPairsForSignificance);
            case WinsLosses:
                return QStringLiteral("samples better / worse than %1").arg(ref);
            case SignP:
                return QStringLiteral("exact two-sided sign test over the wins and losses");
            case Infeasible:
                return QStringLiteral("records whose budget could not be met at this length");
            default:
                break;
        }
    }
    return {};
}

QVariant EvalTableModel::data(const QModelIndex& index, int role) const {
    const EvalCell* c = index.isValid() ? cell(index.row()) : nullptr;
    if (!c) return {};
    const PairedComparison& d = c->vs_reference;
    const bool paired = d.n > 0, has = c->n > 0;
    const int col = index.column();
    if (role == Qt::DisplayRole) {
        switch (col) {
            case Task:
                return c->task.empty() ? QStringLiteral("all tasks") : QString::fromStdString(c->task);
            case Length:
                return c->length > 0 ? QString::number(c->length) : QStringLiteral("all");
            case Method:
                return QString::fromStdString(c->method);
            case Budget:
                return method_takes_budget(c->method) ? QString::number(c->budget, 'g', 4)
                                                      : QStringLiteral("-");
            case N:
                return QString::number(c->n);
            case Mean:
                return has                 ? QString::number(c->mean, 'f', 1)
                       : c->infeasible > 0 ? QStringLiteral("n/a")  // the budget cannot be met here
                                           : QStringLiteral("-");
            case Difference:
                return paired ? QString::asprintf("%+.1f", d.mean_difference) : QString();
            case Interval:
                return paired ? QString::asprintf("[%+.1f, %+.1f]", d.interval.low, d.interval.high)
                              : QString();
            case WinsLosses:
                return paired ? QStringLiteral("%1/%2").arg(d.wins).arg(d.losses) : QString();
            case SignP:
                return paired ? QString::number(d.sign_test_p, 'g', 3) : QString();
            case Infeasible:
                return c->infeasible > 0 ? QString::number(c->infeasible) : QString();
        }
    }
    if (role == Qt::UserRole) {
        switch (col) {
            case Task:
                return QString::fromStdString(c->task);
            case Length:
                return QVariant::fromValue<qint64>(c->length);
            case Method:
                return QString::fromStdString(c->method);
            case Budget:
                return c->budget;
            case N:
                return QVariant::fromValue<qint64>(c->n);
            case Mean:
                return has ? QVariant(c->mean) : QVariant();
            case Difference:
                return paired ? QVariant(d.mean_difference) : QVariant();
            case Interval:
                return paired ? QVariant(QVariantList{d.interval.low, d.interval.high}) : QVariant();
            case WinsLosses:
                return paired ? QVariant(QVariantList{qint64(d.wins), qint64(d.losses)}) : QVariant();
            case SignP:
                return paired ? QVariant(d.sign_test_p) : QVariant();
            case Infeasible:
                return QVariant::fromValue<qint64>(c->infeasible);
        }
    }
    if (role == Qt::TextAlignmentRole && col >= Length && col != Method)
        return QVariant(Qt::AlignRight | Qt::AlignVCenter);
    if (role == Qt::FontRole && (col == Difference || col == Interval) && paired && d.significant()) {
        QFont f;
        f.setBold(true);
        return f;
    }
    if (role == Qt::FontRole && c->task.empty()) {
        QFont f;
        f.setItalic(true);
        return f;
    }
    // The mean on the heatmaps' colour scale (light colours: dark text on them).
    if (role == Qt::BackgroundRole && col == Mean && has) return QBrush(niah_colour(c->mean / 100.0));
    if (role == Qt::ForegroundRole && col == Mean && has) return QBrush(QColor(0x20, 0x20, 0x20));
    if (role == Qt::ToolTipRole) {
        const QString verdict = paired ? QStringLiteral("%1 pairs: %2\n")
                                             .arg(d.n)
                                             .arg(QString::fromUtf8(to_string(d.significance())))
                                       : QString();
        if (c->task.empty()) return verdict + QStringLiteral("every task pooled");
        return verdict + QStringLiteral("double-click: read this cell's samples");
    }
    return {};
}

}  // namespace varrate::viz
