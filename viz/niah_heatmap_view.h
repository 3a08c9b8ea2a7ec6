#pragma once
// Needle-in-a-haystack accuracy heatmaps of the NIAH tab: the same painter as the CLI's heatmap.png
// (viz/niah_heatmap_paint.h), in the window's palette and font, with cells sized to fit the widget; cells
// without records are hatched grey and every cell has a tooltip.
#include <QColor>
#include <QWidget>

#include "core/niah.h"
#include "viz/niah_heatmap_paint.h"

namespace varrate::viz {

class NiahHeatmapView : public QWidget {
    Q_OBJECT
  public:
    explicit NiahHeatmapView(QWidget* parent = nullptr);

    void set_summary(const NiahSummary& summary);
    void clear();
    const NiahSummary& summary() const { return summary_; }
    bool has_summary() const { return !summary_.cells.empty(); }
    // The cell rectangle of (method, depth, length) in widget coordinates (empty when out of range).
    QRectF cell_rect(int method, int depth, int length) const;

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
