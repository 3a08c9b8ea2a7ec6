#pragma once
// Layer x position heatmap of the allocated ranks of one method (rows = layers, columns = token positions
// aggregated to pixel columns by their mean), with a colour bar from 0 (evicted) to D (exact). Linked to the
// shared position axis like the position charts (AxisInteraction); a click picks the layer under the mouse.
#include <QImage>
#include <QString>
#include <QWidget>

#include <vector>

#include "viz/axis_interaction.h"
#include "viz/run_model.h"
#include "viz/view_style.h"

namespace varrate::viz {

class RankHeatmap : public QWidget {
    Q_OBJECT
  public:
    RankHeatmap(RunModel* model, PositionAxis* axis, QWidget* parent = nullptr);

    void set_method(const QString& method);
    QString method() const { return method_; }
    // Heat cell area in widget coordinates; layer and position under a widget point (-1 outside).
    QRectF plot_rect() const;
    int layer_at(const QPointF& p) const;
    int position_at(const QPointF& p) const;
    // Rank of (layer, position), or -1 without data.
    int rank_at(int layer, int position) const;

    QSize sizeHint() const override { return {600, 220}; }
    QSize minimumSizeHint() const override { return {200, 100}; }

  Q_SIGNALS:
    void layer_clicked(int layer);

  protected:
    void paintEvent(QPaintEvent* event) override;

  private:
    void reload();
    const QImage& heat_image(int width);  // one pixel per column x layer for the visible range

    RunModel* model_;
    PositionAxis* axis_;
    AxisInteraction* interaction_;
    QString method_ = featured_method();
    int n_tokens_ = 0, dim_ = 1;
    RankGrid grid_;
    QImage image_;
    double image_begin_ = -1, image_end_ = -1;
    int hover_layer_ = -1;
};

}  // namespace varrate::viz
