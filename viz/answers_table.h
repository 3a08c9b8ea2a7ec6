#pragma once
// Answers side by side: one row per method with its answer to each question (green when it contains the
// expected answer, red when not), the share correct, the accounted footprint, prefill and codec time, and
// whether its basis was calibrated on the document itself.
#include <QTableWidget>

#include "core/compare.h"

namespace varrate::viz {

class AnswersTable : public QTableWidget {
    Q_OBJECT
  public:
    explicit AnswersTable(QWidget* parent = nullptr);
    void set_result(const CompareResult& result, const CompareRequest& request);
    void clear_result();
    // Column indices of the fixed columns (answers sit between "method" and "correct").
    int correct_column() const;
    int footprint_column() const { return correct_column() + 1; }
    // CSV of the visible table (header + one row per method).
    QString to_csv() const;

  private:
    int n_questions_ = 0;
};

}  // namespace varrate::viz
