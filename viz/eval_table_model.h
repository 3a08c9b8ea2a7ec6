#pragma once
// The Evaluation tab's table over an EvalSummary (core/eval.h): one row per cell (task x length x method x
// budget, the summary's order), then the pooled rows: every task at each length (when the sweep has several
// lengths), then every task and length. Columns: task, length, method, budget, n, mean score, difference to
// the reference with its paired 95 % bootstrap interval, wins/losses and the sign test's p.
#include <QAbstractTableModel>

#include <vector>

#include <nlohmann/json.hpp>  // core/eval.h declares json members with json_fwd.hpp only

#include "core/suites/eval.h"

namespace varrate::viz {

class EvalTableModel : public QAbstractTableModel {
    Q_OBJECT
  public:
    enum Column {
        Task,
        Length,
        Method,
        Budget,
        N,
        Mean,
        Difference,
        Interval,
        WinsLosses,
        SignP,
        Infeasible
    };
    static constexpr int kColumns = Infeasible + 1;
    // Qt::UserRole: the raw number of numeric columns (score, difference, p), or the task / method name.

    explicit EvalTableModel(QObject* parent = nullptr);

    void set_summary(const EvalSummary& summary);
    void clear();
    const EvalSummary& summary() const { return summary_; }
    // The row's cell (nullptr out of range); a pooled row's task is "" (and its length 0 when every length is
    // pooled).
    const EvalCell* cell(int row) const;
    bool pooled(int row) const;

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

  private:
    EvalSummary summary_;
    std::vector<EvalCell> rows_;
};

}  // namespace varrate::viz
