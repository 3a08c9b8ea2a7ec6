// AxisInteraction: one event filter instead of the same five mouse handlers in every position-axis view.
#include "viz/axis_interaction.h"

#include <QMouseEvent>
#include <QWheelEvent>
#include <QWidget>

#include <algorithm>
#include <cmath>

#include "viz/run_model.h"

namespace varrate::viz {

AxisInteraction::AxisInteraction(QWidget* view, PositionAxis* axis, std::function<QRectF()> plot_rect)
    : QObject(view), view_(view), axis_(axis), plot_rect_(std::move(plot_rect)) {
    view_->setMouseTracking(true);  // the cursor follows the mouse without a button held
    view_->installEventFilter(this);
}

double AxisInteraction::position_at(double x) const {
    const QRectF r = plot_rect_();
    return axis_->begin() + (x - r.left()) / r.width() * axis_->width();
}

bool AxisInteraction::eventFilter(QObject* watched, QEvent* event) {
    if (watched != view_) return false;
    switch (event->type()) {
        case QEvent::Wheel: {
            auto* e = static_cast<QWheelEvent*>(event);
            const double steps = e->angleDelta().y() / 120.0;
            // Not ours (horizontal wheel, no data): let it reach the view and its parents.
            if (steps == 0 || axis_->length() <= 0) return false;
            axis_->zoom(std::pow(0.8, steps), position_at(e->position().x()));
            e->accept();
            return true;
        }
        case QEvent::MouseButtonPress: {
            auto* e = static_cast<QMouseEvent*>(event);
            if (e->button() != Qt::LeftButton) return false;
            drag_from_ = e->position().x();
            drag_begin_ = axis_->begin();
            dragged_ = false;
            return true;
        }
        case QEvent::MouseMove: {
            auto* e = static_cast<QMouseEvent*>(event);
            const QPointF pt = e->position();
            const QRectF area = plot_rect_();
            if (drag_from_ >= 0 && (e->buttons() & Qt::LeftButton)) {
                if (std::abs(pt.x() - drag_from_) > kClickSlop) dragged_ = true;
                const double tokens = (drag_from_ - pt.x()) / area.width() * axis_->width();
                const double w = axis_->width();
                axis_->set_range(drag_begin_ + tokens, drag_begin_ + tokens + w);
            }
            Q_EMIT hovered(pt);
            if (pt.x() >= area.left() && pt.x() <= area.right() && axis_->length() > 0)
                axis_->set_cursor(
                    std::clamp(static_cast<int>(std::floor(position_at(pt.x()))), 0, axis_->length() - 1));
            return true;
        }
        case QEvent::MouseButtonRelease: {
            auto* e = static_cast<QMouseEvent*>(event);
            if (e->button() != Qt::LeftButton) return false;
            const bool click = drag_from_ >= 0 && !dragged_;
            drag_from_ = -1;
            if (click) Q_EMIT clicked(e->position());
            return true;
        }
        case QEvent::MouseButtonDblClick:
            axis_->reset();
            return true;
        case QEvent::Leave:
            drag_from_ = -1;
            Q_EMIT left();
            return false;  // the view may want it too
        default:
            return false;
    }
}

}  // namespace varrate::viz
