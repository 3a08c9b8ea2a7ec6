#pragma once
// Zoom, pan and the linked cursor on the shared token-position axis, for any view whose x axis is positions
// (the position charts, the rank heatmap): installed as an event filter on the view, it turns the wheel into
// a zoom around the position under the mouse, a left drag into a pan, a mouse move over the plot into the
// cursor, and a double click into "show everything". The view only says where its plot area is.
#include <QObject>
#include <QPointF>
#include <QRectF>

#include <functional>

class QWidget;

namespace varrate::viz {

class PositionAxis;

class AxisInteraction : public QObject {
    Q_OBJECT
  public:
    // plot_rect: the view's plot area in widget coordinates (asked at every event: it follows resizes).
    AxisInteraction(QWidget* view, PositionAxis* axis, std::function<QRectF()> plot_rect);

    // The (fractional) position under a widget x, on the axis's current range.
    double position_at(double x) const;
    // A left drag in progress.
    bool dragging() const { return drag_from_ >= 0; }

    // Pixels a press may move before it counts as a drag rather than a click.
    static constexpr double kClickSlop = 3;

  Q_SIGNALS:
    void clicked(QPointF pos);  // left button pressed and released without dragging
    void hovered(QPointF pos);  // every mouse move over the view (also outside the plot)
    void left();                // the mouse left the view

  protected:
    bool eventFilter(QObject* watched, QEvent* event) override;

  private:
    QWidget* view_;
    PositionAxis* axis_;
    std::function<QRectF()> plot_rect_;
    double drag_from_ = -1;  // widget x where a drag started
    double drag_begin_ = 0;  // axis begin at that moment
    bool dragged_ = false;
};

}  // namespace varrate::viz
