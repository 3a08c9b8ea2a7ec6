#pragma once
// Per-layer summary of one method against a reference: an error measure (both methods: mean K/V
// reconstruction error, the salience-weighted one, or the attention-output error of the observation-window
// queries, core/capture.h), share of
// coded tokens at the rank floor, and the rank range (min..max with the mean marked), one row per layer.
// Clicking a row selects that layer (layer_clicked), e.g. for the document view and the charts.
#include <QString>
#include <QWidget>

#include "viz/run_model.h"
#include "viz/view_style.h"

namespace varrate::viz {

enum class LayerErrorMeasure { MeanKV, SalienceWeighted, AttentionOutput };
QString error_measure_name(LayerErrorMeasure m);  // column heading
// The measure of one layer; -1 when the run did not measure it (older session files).
double layer_error(const LayerDiagnostics& d, LayerErrorMeasure m);

class LayerSummary : public QWidget {
    Q_OBJECT
  public:
    LayerSummary(RunModel* model, PositionAxis* axis, QWidget* parent = nullptr);

    void set_method(const QString& method);
    void set_reference_method(const QString& method);  // drawn beside the method's error ("flat")
    void set_layer(int layer);                         // highlighted row (-1 = none)
    void set_error_measure(LayerErrorMeasure m);
    LayerErrorMeasure error_measure() const { return measure_; }
    int layer() const { return layer_; }
    int row_at(const QPoint& p) const;  // layer of a widget point, or -1

    QSize sizeHint() const override;
    QSize minimumSizeHint() const override { return {320, 120}; }

  Q_SIGNALS:
    void layer_clicked(int layer);

  protected:
    void paintEvent(QPaintEvent* event) override;
    void mousePressEvent(QMouseEvent* event) override;

  private:
    int row_height() const;
    int header_height() const;
    RunModel* model_;
    PositionAxis* axis_;
    QString method_ = featured_method();
    QString reference_ = compared_method();
    int layer_ = -1;
    LayerErrorMeasure measure_ = LayerErrorMeasure::MeanKV;
};

}  // namespace varrate::viz
