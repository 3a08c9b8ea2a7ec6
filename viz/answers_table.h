#pragma once
// Answers side by side: one row per method with its answer to each question (green when it contains the
// expected answer, red when not), the share correct, the accounted footprint, prefill and codec time, and
// whether its basis was calibrated on the document itself.
#include <QTableWidget>

#include <optional>

#include "core/compare.h"

namespace varrate::viz {

class AnswersTable : public QTableWidget {
    Q_OBJECT
  public:
    explicit AnswersTable(QWidget* parent = nullptr);
    // Applied by the next set_result: a pinned result's answers and footprints in columns beside the live
    // ones (label e.g. "κ 0.20"), and stale answers (settings changed since decoding) said to be so.
    void set_pinned(std::optional<CompareResult> pinned, const QString& label = {});
    void set_stale(bool stale) { stale_ = stale; }
    bool has_pinned() const { return has_pinned_; }
    void set_result(const CompareResult& result, const CompareRequest& request);
    void clear_result();
    // Column indices of the fixed columns (answers, then pinned answers, sit between "method" and "correct").
    int correct_column() const;
    int footprint_column() const { return correct_column() + 1; }
    // CSV of the visible table (header + one row per method).
    QString to_csv() const;

  private:
    int n_questions_ = 0;
    std::optional<CompareResult> pinned_;
    QString pinned_label_;
    bool has_pinned_ = false, stale_ = false;
};

}  // namespace varrate::viz
