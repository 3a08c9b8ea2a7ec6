#pragma once
// The Evaluation tab's score-vs-kappa chart: EvalScorePainter (viz/eval_plot_paint.h, the painter of the
// CLI's plots/score_vs_kappa_L<length>.png) in the widget's palette and size, at one length of the summary.
#include <QStringList>
#include <QWidget>

#include <memory>

#include <nlohmann/json.hpp>  // core/eval.h declares json members with json_fwd.hpp only

#include "core/suites/eval.h"

namespace varrate::viz {

struct EvalPlotStyle;

class EvalScoreChart : public QWidget {
    Q_OBJECT
  public:
    explicit EvalScoreChart(QWidget* parent = nullptr);

    // length: one of the summary's lengths (else its first).
    void set_summary(std::shared_ptr<const EvalSummary> summary, int64_t length);
    void set_length(int64_t length);
    void clear();
    int64_t length() const { return length_; }
    std::shared_ptr<const EvalSummary> summary() const { return summary_; }

    // What the chart draws, for tests: the methods with a line or a reference line in any panel (the
    // summary's order), the panels (one per task, then every task pooled), a marker's centre.
    QStringList series() const;
    int panel_count() const;
    QPointF point_position(int panel, const QString& method, double budget) const;
    EvalPlotStyle style() const;

    QSize sizeHint() const override { return {720, 420}; }
    QSize minimumSizeHint() const override { return {280, 200}; }

  protected:
    void paintEvent(QPaintEvent* event) override;

  private:
    std::shared_ptr<const EvalSummary> summary_;
    int64_t length_ = 0;
};

}  // namespace varrate::viz
