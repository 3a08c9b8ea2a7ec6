#pragma once
// The needle-in-a-haystack heatmap painter (gkamradt's layout), shared by the desktop app's NIAH tab and the
// CLI's heatmap.png: one panel per method and budget (NiahSummary::series, up to three per row), rows =
// needle depth, columns = context length, accuracy on a fixed 0-1 scale from red through amber to green, the
// pooled accuracy with its Wilson 95 % interval in each panel's title, and one colour bar. Qt Gui only (no
// widgets), so the headless CLI can link it.
#include <QColor>
#include <QFont>
#include <QImage>
#include <QRect>
#include <QSize>
#include <QString>
#include <array>

#include "core/suites/niah.h"

class QPainter;

namespace varrate::viz {

// The colour of an accuracy in [0, 1] (clamped): #F0496E at 0, #EBB839 at 0.5, #0CD79F at 1. Invalid for a
// negative or NaN accuracy (a cell without records).
QColor niah_colour(double accuracy);
// The heatmaps' colour bar: niah_colour from 1 (top) to 0 (bottom) over x .. x + 16 and y .. y + height,
// labelled at its top, middle and bottom, titled above.
void paint_colour_bar(QPainter& p, int x, int y, int height, const std::array<QString, 3>& labels,
                      const QString& title, const QColor& ink, const QFont& font);

// How the heatmap looks; png() is the CLI's fixed white image, the app sets its palette and fonts.
struct NiahHeatmapStyle {
    QFont font, title_font;
    QColor background{0xFF, 0xFF, 0xFF}, ink{0x20, 0x20, 0x20};
    QColor cell_text{0x20, 0x20, 0x20};  // on the coloured cells (all three scale colours are light)
    QColor grid{0xFF, 0xFF, 0xFF};       // lines between cells
    QColor missing{0xD8, 0xD8, 0xD8};    // cells without records
    QColor missing_hatch;                // drawn over missing cells when valid
    int cell_w = 0;                      // 0: wide enough for the panels' titles, at least 64
    int cell_h = 30;

    static NiahHeatmapStyle png();  // DejaVu Sans 11 px, titles 13 px bold
};

class NiahHeatmapPainter {
  public:
    // The summary must hold series x depths x lengths cells (NiahSummary::cells).
    NiahHeatmapPainter(const NiahSummary& summary, const NiahHeatmapStyle& style);

    // The cell size that makes the whole heatmap fit `size` (at least 8 x 6 px per cell).
    static QSize fitting_cell(const NiahSummary& summary, QSize size);

    QSize size() const { return {width_, height_}; }
    // Cell (series, depth, length) in the painter's coordinates; empty when out of range.
    QRect cell_rect(int series, int depth, int length) const;
    // A panel's title: "varrate, budget 0.1  90% [60-98] of 10" (the pooled accuracy and its 95 % interval).
    static QString panel_title(const NiahSummary& summary, int series);
    void paint(QPainter& p) const;
    // paint() into a new image of size().
    QImage render() const;

  private:
    const NiahSummary& s_;
    NiahHeatmapStyle style_;
    QString heading_;
    int n_len_ = 0, n_depth_ = 0, n_panels_ = 0, per_row_ = 1, rows_ = 1;
    int cw_ = 0, ch_ = 0, panel_w_ = 0, panel_h_ = 0, width_ = 0, height_ = 0;
};

}  // namespace varrate::viz
