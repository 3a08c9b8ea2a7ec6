#pragma once
// Needle-in-a-haystack accuracy heatmaps of the NIAH tab: the same painter as the CLI's heatmap.png
// (viz/niah_heatmap_paint.h), one per method and budget, in the window's palette and font, with cells sized
// to fit the widget; cells without records are hatched grey and every cell has a tooltip with its counts and
// Wilson 95 % interval.
#include <QColor>
#include <QWidget>

#include "core/suites/niah.h"
#include "viz/niah_heatmap_paint.h"

namespace varrate::viz {

// A cell's tooltip: "varrate, budget 0.1, length 512, depth 50%: 9 / 10 correct (90 %, 95 % interval 60-98
// %)".
QString niah_cell_tooltip(const NiahSummary& summary, int series, const NiahCell& cell);

class NiahHeatmapView : public QWidget {
    Q_OBJECT
  public:
    explicit NiahHeatmapView(QWidget* parent = nullptr);

    void set_summary(const NiahSummary& summary);
    void clear();
    const NiahSummary& summary() const { return summary_; }
    bool has_summary() const { return !summary_.cells.empty(); }
    // The cell rectangle of (series, depth, length) in widget coordinates (empty when out of range).
    QRectF cell_rect(int series, int depth, int length) const;

    QSize sizeHint() const override;
    QSize minimumSizeHint() const override { return {300, 160}; }

  protected:
    void paintEvent(QPaintEvent* event) override;
    bool event(QEvent* event) override;  // cell tooltips

  private:
    // The painter's look in this widget's palette and font, cells fitted to `size`.
    NiahHeatmapStyle style(QSize size) const;
    NiahSummary summary_;
};

}  // namespace varrate::viz
