#include "viz/plot_marks.h"

#include <QPainter>

#include <algorithm>

#include "core/suites/niah_record.h"

namespace varrate::viz {

void paint_whisker(QPainter& p, double x, double y_low, double y_high) {
    p.drawLine(QPointF(x, y_low), QPointF(x, y_high));
    for (double y : {y_low, y_high}) p.drawLine(QPointF(x - 3, y), QPointF(x + 3, y));
}

void BudgetLine::add(double budget, double x, double y) {
    const size_t at = static_cast<size_t>(
        std::find_if(grid_.begin(), grid_.end(), [&](double b) { return same_budget(b, budget); }) -
        grid_.begin());
    if (prev_ + 1 == at)
        path_.lineTo(x, y);
    else
        path_.moveTo(x, y);
    prev_ = at;
}

}  // namespace varrate::viz
