#pragma once
// Marks the score-vs-kappa charts share (the app's NIAH accuracy chart, the evaluation plots of the app and
// the CLI): interval whiskers and lines over a budget grid that break where a budget has no point. Qt Gui
// only.
#include <QPainterPath>

#include <cstddef>
#include <vector>

class QPainter;

namespace varrate::viz {

// A vertical whisker at x from y_low to y_high (pixels) with 3-pixel caps, in the painter's pen.
void paint_whisker(QPainter& p, double x, double y_low, double y_high);

// Builds a method's line over a budget grid: each point joins the previous one only when its budget is the
// next of the grid, so that a budget without a point breaks the line.
class BudgetLine {
  public:
    explicit BudgetLine(const std::vector<double>& grid) : grid_(grid), prev_(grid.size()) {}
    void add(double budget, double x, double y);
    const QPainterPath& path() const { return path_; }

  private:
    const std::vector<double>& grid_;
    size_t prev_;
    QPainterPath path_;
};

}  // namespace varrate::viz
