#pragma once
// Per-token plots on the shared position axis: salience, allocated rank (with decile means as in the paper's
// Figure 7, the floor r_min and the uniform rank B/|C|) and reconstruction error of a method against a
// reference (VarRate vs flat). Each plot decimates to its pixel width (min/max per column), so 32k-token
// documents repaint in milliseconds. Wheel zooms, drag pans, mouse move sets the cursor, double click resets
// (AxisInteraction).
#include <QColor>
#include <QString>
#include <QWidget>

#include <vector>

#include "viz/run_model.h"
#include "viz/view_style.h"

class QSplitter;

namespace varrate::viz {

enum class PositionChartKind { Salience, Rank, Error };

class PositionChart : public QWidget {
    Q_OBJECT
  public:
    PositionChart(RunModel* model, PositionAxis* axis, PositionChartKind kind, QWidget* parent = nullptr);

    void set_method(const QString& method);
    void set_reference_method(const QString& method);  // Error: the method compared against ("flat")
    void set_layer(int layer);                         // -1 = mean over layers
    void set_show_deciles(bool show);
    PositionChartKind kind() const { return kind_; }
    QString method() const { return method_; }
    int layer() const { return layer_; }

    // Plot area in widget coordinates, and the position under a widget x (fractional).
    QRectF plot_rect() const;
    double position_at(double x) const;
    // What the chart draws, for tests: series count and whether any of them has values.
    int series_count() const { return static_cast<int>(series_.size()); }
    bool has_data() const;

    QSize sizeHint() const override { return {600, 180}; }
    QSize minimumSizeHint() const override { return {200, 90}; }

  protected:
    void paintEvent(QPaintEvent* event) override;

  private:
    struct Series {
        QString name;
        StyleColour role;            // resolved against the palette at paint time (theme switches)
        std::vector<float> values;   // [L]; NaN = no value (e.g. exact tokens in the rank plot)
        std::vector<float> deciles;  // 10 means over position deciles (empty: none)
    };
    struct RefLine {
        QString name;
        double value;
        StyleColour role;
    };
    void reload();
    void add_pinned(TokenMetric metric, double* top);
    void draw_series(QPainter& p, const Series& s, const QRectF& area) const;
    void draw_axes(QPainter& p, const QRectF& area) const;
    double y_of(double value, const QRectF& area) const;

    RunModel* model_;
    PositionAxis* axis_;
    PositionChartKind kind_;
    QString method_ = featured_method();
    QString reference_ = compared_method();
    int layer_ = -1;
    bool show_deciles_ = true;

    std::vector<Series> series_;
    std::vector<RefLine> ref_lines_;
    std::vector<uint8_t> exact_;  // of method_, drawn as a strip under the plot
    double y_min_ = 0, y_max_ = 1;
    QString y_label_;
};

// The three position charts stacked in a splitter, sharing method and layer.
class PositionCharts : public QWidget {
    Q_OBJECT
  public:
    PositionCharts(RunModel* model, PositionAxis* axis, QWidget* parent = nullptr);
    void set_method(const QString& method);
    void set_reference_method(const QString& method);
    void set_layer(int layer);
    PositionChart* salience() const { return salience_; }
    PositionChart* rank() const { return rank_; }
    PositionChart* error() const { return error_; }

  private:
    PositionChart* salience_;
    PositionChart* rank_;
    PositionChart* error_;
};

}  // namespace varrate::viz
