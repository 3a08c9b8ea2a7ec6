#pragma once
// Rate-distortion chart: per compression method, the accounted footprint (x, fraction of the full cache)
// against a distortion measure (y) over a grid of budgets kappa. The live allocation's points are
// emphasised and labelled with their kappa, a frozen ("pinned") allocation is drawn hollow, and a click on
// a grid point asks for that kappa. The chart has its own point type, so that the window can fill it from
// `varrate rd` results and from a live comparison alike without the view depending on core/.
#include <QPointF>
#include <QRectF>
#include <QString>
#include <QStringList>
#include <QWidget>

#include <optional>
#include <vector>

namespace varrate::viz {

enum class RdMeasure { KvError, WeightedError, AttentionOutput };
// "K/V error", "salience-weighted K/V error", "attention-output error" (the y axis label).
QString rd_measure_name(RdMeasure m);

struct RdChartPoint {
    QString method;        // "varrate", "flat", "snapkv", "full", ...
    double kappa = 0;      // budget of the point (full: 1)
    double footprint = 0;  // accounted stored / full bytes
    double kv_error = -1, weighted_error = -1, attn_output_error = -1;  // -1 = not measured
    QString infeasible;  // non-empty: this kappa cannot be met (drawn nowhere; listed in the tooltip and CSV)
};

// method,kappa,footprint,kv_error,weighted_error,attn_output_error,infeasible: a header and one row per
// point in the given order; numbers in their shortest round-trip form, an empty field where a value is not
// measured (negative or not finite), text fields quoted when they hold a comma, quote or newline.
QString rd_chart_csv(const std::vector<RdChartPoint>& points);

class RdChart : public QWidget {
    Q_OBJECT
  public:
    explicit RdChart(QWidget* parent = nullptr);

    // The grid of every method (replaces all of it; the current kappa, current and pinned points stay).
    void set_points(std::vector<RdChartPoint> points);
    // Marked on every method's curve: the method's current point when one was set, else its grid point
    // nearest in kappa. <= 0: none.
    void set_current_kappa(double kappa);
    // The live allocation's points (one per method), emphasised; they may lie between grid points.
    void set_current_points(std::vector<RdChartPoint> points);
    // A frozen allocation, drawn as hollow markers (may be empty).
    void set_pinned_points(std::vector<RdChartPoint> points);
    void set_measure(RdMeasure m);
    RdMeasure measure() const { return measure_; }
    double current_kappa() const { return current_kappa_; }
    const std::vector<RdChartPoint>& points() const { return points_; }

    // Plot area in widget coordinates.
    QRectF plot_rect() const;
    // Where a point is drawn under the current measure; NaN coordinates when it is not drawn (infeasible,
    // or its measure not measured).
    QPointF point_position(const RdChartPoint& p) const;
    // The drawn point (grid, current or pinned) nearest `pos` within max_px; a grid point wins a tie.
    std::optional<RdChartPoint> point_at(QPointF pos, double max_px = 8) const;
    // Writes rd_chart_csv of the grid atomically (QSaveFile); throws varrate::Error naming the path.
    void export_csv(const QString& path) const;

    QSize sizeHint() const override { return {560, 380}; }
    QSize minimumSizeHint() const override { return {260, 180}; }

  Q_SIGNALS:
    // A click (left press and release without a drag) on a grid point, not on `full` or an infeasible one.
    void kappa_selected(double kappa);

  protected:
    void paintEvent(QPaintEvent* event) override;
    void mousePressEvent(QMouseEvent* event) override;
    void mouseMoveEvent(QMouseEvent* event) override;
    void mouseReleaseEvent(QMouseEvent* event) override;
    void leaveEvent(QEvent* event) override;

  private:
    enum class Layer { Grid, Current, Pinned };
    struct Hit {
        Layer layer;
        size_t index;
    };
    void rescale();
    std::optional<Hit> hit(QPointF pos, double max_px) const;
    const RdChartPoint& point_of(const Hit& h) const;
    bool clickable(const Hit& h) const;
    QString tooltip(const Hit& h) const;
    std::vector<const RdChartPoint*> emphasised() const;
    QColor colour_of(const QString& method) const;
    void draw_axes(QPainter& p, const QRectF& area) const;
    QRectF draw_legend(QPainter& p, const QRectF& area, bool current) const;  // returns its box

    std::vector<RdChartPoint> points_, current_, pinned_;
    double current_kappa_ = -1;
    RdMeasure measure_ = RdMeasure::KvError;
    QStringList methods_;  // legend order: first seen in the grid, then in the current and pinned points
    double x_max_ = 1, y_max_ = 1;
    std::optional<QPointF> press_;  // where a left press started (a click when released near it)
};

}  // namespace varrate::viz
