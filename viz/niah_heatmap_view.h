#pragma once
// Needle-in-a-haystack accuracy heatmaps, one per method side by side (gkamradt layout): rows = needle depth,
// columns = context length, colour on a fixed 0..1 scale red -> amber -> green (#F0496E #EBB839 #0CD79F);
// cells without records are hatched grey.
#include <QColor>
#include <QWidget>

#include "core/niah.h"

namespace varrate::viz {

// The heatmap colour of an accuracy in [0, 1] (clamped); invalid QColor for a negative (missing) value.
QColor niah_colour(double accuracy);

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
    struct Layout {
        double panel_w = 0, cell_w = 0, cell_h = 0, left = 0, top = 0, gap = 0;
    };
    Layout layout() const;
    NiahSummary summary_;
};

}  // namespace varrate::viz
