#pragma once
// NIAH accuracy against the budget kappa, the NIAH tab's companion to its heatmaps: the heatmaps show where a
// method fails (length x depth), this chart how its pooled accuracy (every cell of the sweep) moves with the
// budget. One line per compressing method with its Wilson 95 % interval as whiskers, `full` as a horizontal
// reference with its interval as a band, x on a log scale through the sweep's budgets (they are usually
// spaced by factors: 0.05, 0.1, 0.2), y = accuracy 0..1. Custom-painted like the other charts, so exports
// keep vector lines; hover shows a point's counts.
#include <QString>
#include <QWidget>

#include <optional>
#include <string>
#include <vector>

#include "core/suites/niah.h"

namespace varrate::viz {

// The chart's data, one row per series of the summary (methods x budgets, `full` once at budget 1):
// method,budget,correct,n,accuracy,ci_low,ci_high; accuracy and interval empty where a series has no records.
QString niah_accuracy_csv(const NiahSummary& summary);

class NiahAccuracyChart : public QWidget {
    Q_OBJECT
  public:
    explicit NiahAccuracyChart(QWidget* parent = nullptr);

    void set_summary(const NiahSummary& summary);
    void clear();
    const NiahSummary& summary() const { return summary_; }
    // niah_accuracy_csv of the summary, written atomically. Throws Error naming the path.
    void export_csv(const QString& path) const;

    // What the chart draws, for tests: lines of compressing methods that have at least one point, whether
    // `full` has its reference line, and the accuracy drawn for (method, kappa) (-1 when nothing is drawn
    // there; `full` answers at any kappa).
    int series_count() const { return static_cast<int>(lines_.size()); }
    bool has_reference() const { return reference_.has_value(); }
    double value_at(const QString& method, double kappa) const;
    // The plot area, a point's centre in widget coordinates (null when not drawn), and the hover text there.
    QRectF plot_rect() const;
    QPointF point_position(const QString& method, double kappa) const;
    QString tooltip_at(const QPointF& pos) const;

    QSize sizeHint() const override { return {600, 260}; }
    QSize minimumSizeHint() const override { return {260, 160}; }

  protected:
    void paintEvent(QPaintEvent* event) override;
    bool event(QEvent* event) override;  // point tooltips

  private:
    struct Point {
        double budget = 1;
        int64_t n = 0, correct = 0, infeasible = 0;
    };
    struct Line {
        std::string method;
        std::vector<Point> points;  // ascending budget; only budgets with records
    };
    void rebuild();
    double x_of(double budget, const QRectF& area) const;
    double y_of(double accuracy, const QRectF& area) const;
    // The whisker offset of line `i`, so that intervals at the same budget do not hide each other.
    double dodge(size_t i) const;
    QString point_text(const std::string& method, const Point& p) const;

    NiahSummary summary_;
    std::vector<Line> lines_;
    std::optional<Point> reference_;
    std::vector<double> budgets_;  // every budget of the sweep, ascending: the x ticks
    double log_lo_ = 0, log_hi_ = 1;
};

}  // namespace varrate::viz
