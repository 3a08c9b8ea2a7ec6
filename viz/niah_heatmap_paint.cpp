// NiahHeatmapPainter: the geometry is computed once (panel grid, colour bar, heading width) so that the
// widget can ask for cell rectangles (tooltips, tests) and paint with the same numbers the PNG uses.
#include "viz/niah_heatmap_paint.h"

#include <QFontMetrics>
#include <QPainter>

#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>

namespace varrate::viz {

namespace {

// Around one panel's grid, and around the panels.
constexpr int kLeft = 62, kTop = 30, kBottom = 48, kGap = 24;
constexpr int kHeader = 40, kBarW = 90, kMargin = 12, kMaxPerRow = 3;

QString qs(const std::string& s) {
    return QString::fromStdString(s);
}

int per_row_of(size_t n_panels) {
    return std::max(1, std::min(static_cast<int>(n_panels), kMaxPerRow));
}

std::string budgets_text(const std::vector<double>& budgets) {
    std::string out;
    for (double b : budgets) out += (out.empty() ? "" : ", ") + fmt::format("{:g}", b);
    return out;
}

}  // namespace

QColor niah_colour(double accuracy) {
    if (!(accuracy >= 0)) return {};
    static const unsigned stops[3] = {0xF0496E, 0xEBB839, 0x0CD79F};
    const double a = std::min(accuracy, 1.0);
    const int lo = a < 0.5 ? 0 : 1;
    const double t = (a - 0.5 * lo) / 0.5;
    int rgb[3];
    for (int k = 0, shift = 16; shift >= 0; ++k, shift -= 8) {
        const double c0 = (stops[lo] >> shift) & 0xFF, c1 = (stops[lo + 1] >> shift) & 0xFF;
        rgb[k] = std::min(255, static_cast<int>(std::lround(c0 + (c1 - c0) * t)));
    }
    return QColor(rgb[0], rgb[1], rgb[2]);
}

NiahHeatmapStyle NiahHeatmapStyle::png() {
    NiahHeatmapStyle s;
    s.font = QFont("DejaVu Sans");
    s.font.setPixelSize(11);
    s.title_font = s.font;
    s.title_font.setPixelSize(13);
    s.title_font.setBold(true);
    return s;
}

QSize NiahHeatmapPainter::fitting_cell(const NiahSummary& s, QSize size) {
    const int n_len = std::max<int>(1, static_cast<int>(s.lengths.size()));
    const int n_depth = std::max<int>(1, static_cast<int>(s.depths.size()));
    const int per_row = per_row_of(s.series.size());
    const int rows = (std::max<int>(1, static_cast<int>(s.series.size())) + per_row - 1) / per_row;
    const int cw = (size.width() - 2 * kMargin - kBarW - per_row * (kLeft + kGap)) / (per_row * n_len);
    const int ch = (size.height() - kHeader - kMargin - rows * (kTop + kBottom)) / (rows * n_depth);
    return {std::max(8, cw), std::max(6, ch)};
}

NiahHeatmapPainter::NiahHeatmapPainter(const NiahSummary& s, const NiahHeatmapStyle& style)
    : s_(s), style_(style) {
    n_len_ = static_cast<int>(s.lengths.size());
    n_depth_ = static_cast<int>(s.depths.size());
    n_panels_ = static_cast<int>(s.series.size());
    per_row_ = per_row_of(s.series.size());
    rows_ = (std::max(1, n_panels_) + per_row_ - 1) / per_row_;
    int title_w = 180;
    if (s.cells.size() == s.series.size() * s.depths.size() * s.lengths.size())
        for (int m = 0; m < n_panels_; ++m)
            title_w =
                std::max(title_w, QFontMetrics(style_.title_font).horizontalAdvance(panel_title(s, m)) + 8);
    cw_ = style_.cell_w > 0 ? style_.cell_w : std::max(64, (title_w + n_len_ - 1) / std::max(1, n_len_));
    ch_ = style_.cell_h;
    panel_w_ = kLeft + cw_ * n_len_ + kGap;
    panel_h_ = kTop + ch_ * n_depth_ + kBottom;
    heading_ = qs(fmt::format(
        "Needle in a haystack - {}, {}, needles {}, budget{} {}, {} sample{} per cell; overall "
        "accuracy [95% interval]",
        s.model.empty() ? "model" : s.model, s.mode, s.needles.empty() ? "?" : s.needles,
        s.budgets.size() == 1 ? "" : "s", budgets_text(s.budgets), s.samples, s.samples == 1 ? "" : "s"));
    width_ = std::max(kMargin + per_row_ * panel_w_ + kBarW + kMargin,
                      2 * kMargin + QFontMetrics(style_.title_font).horizontalAdvance(heading_) + 8);
    height_ = kHeader + rows_ * panel_h_ + kMargin;
}

QString NiahHeatmapPainter::panel_title(const NiahSummary& s, int m) {
    const NiahSeries& ser = s.series.at(static_cast<size_t>(m));
    const NiahCell all = s.overall(static_cast<size_t>(m));
    if (all.n == 0) return qs(fmt::format("{}  (no records)", ser.label()));
    const Interval ci = all.interval();
    return qs(fmt::format("{}  {:.0f}% [{:.0f}-{:.0f}] of {}", ser.label(), 100.0 * all.accuracy(),
                          100.0 * ci.low, 100.0 * ci.high, all.n));
}

QRect NiahHeatmapPainter::cell_rect(int m, int d, int l) const {
    if (m < 0 || d < 0 || l < 0 || m >= n_panels_ || d >= n_depth_ || l >= n_len_) return {};
    const int x0 = kMargin + (m % per_row_) * panel_w_, y0 = kHeader + (m / per_row_) * panel_h_;
    return QRect(x0 + kLeft + l * cw_, y0 + kTop + d * ch_, cw_, ch_);
}

void NiahHeatmapPainter::paint(QPainter& p) const {
    const NiahHeatmapStyle& st = style_;
    p.fillRect(QRect(0, 0, width_, height_), st.background);
    p.setRenderHint(QPainter::Antialiasing, true);
    p.setRenderHint(QPainter::TextAntialiasing, true);
    p.setPen(st.ink);
    p.setFont(st.title_font);
    p.drawText(QRect(kMargin, 0, width_ - 2 * kMargin, kHeader), Qt::AlignLeft | Qt::AlignVCenter, heading_);
    if (s_.cells.size() != static_cast<size_t>(n_panels_) * n_depth_ * n_len_) return;  // malformed

    for (int m = 0; m < n_panels_; ++m) {
        const int x0 = kMargin + (m % per_row_) * panel_w_, y0 = kHeader + (m / per_row_) * panel_h_;
        const int gx = x0 + kLeft, gy = y0 + kTop;
        for (int d = 0; d < n_depth_; ++d)
            for (int l = 0; l < n_len_; ++l) {
                const NiahCell& c = s_.cell(m, d, l);
                const QRect cell = cell_rect(m, d, l);
                if (c.n > 0) {
                    p.fillRect(cell, niah_colour(c.accuracy()));
                } else {
                    p.fillRect(cell, st.missing);
                    if (st.missing_hatch.isValid())
                        p.fillRect(cell, QBrush(st.missing_hatch, Qt::BDiagPattern));
                }
                p.setPen(st.grid);
                p.drawRect(cell.adjusted(0, 0, -1, -1));
                p.setPen(c.n > 0 ? st.cell_text : st.ink);
                p.setFont(st.font);
                p.drawText(cell, Qt::AlignCenter,
                           c.n > 0            ? qs(fmt::format("{:.0f}%", 100.0 * c.accuracy()))
                           : c.infeasible > 0 ? QString("n/a")  // the budget is infeasible at this length
                                              : QString("-"));
            }
        // Title, depth ticks (rows), length ticks (columns) and axis names.
        p.setPen(st.ink);
        p.setFont(st.title_font);
        // Fitted cells (the app's) can be narrower than the title: elide rather than run into the next panel.
        p.drawText(QRect(gx, y0, cw_ * n_len_, kTop), Qt::AlignLeft | Qt::AlignVCenter,
                   QFontMetrics(st.title_font).elidedText(panel_title(s_, m), Qt::ElideRight, cw_ * n_len_));
        p.setFont(st.font);
        for (int d = 0; d < n_depth_; ++d)
            p.drawText(QRect(x0 + 16, gy + d * ch_, kLeft - 22, ch_), Qt::AlignRight | Qt::AlignVCenter,
                       qs(fmt::format("{:g}%", s_.depths[d])));
        for (int l = 0; l < n_len_; ++l)
            p.drawText(QRect(gx + l * cw_, gy + n_depth_ * ch_ + 2, cw_, 18), Qt::AlignHCenter | Qt::AlignTop,
                       qs(std::to_string(s_.lengths[l])));
        p.drawText(QRect(gx, gy + n_depth_ * ch_ + 22, cw_ * n_len_, 18), Qt::AlignHCenter | Qt::AlignTop,
                   "context length (tokens)");
        p.save();
        p.translate(x0 + 8, gy + n_depth_ * ch_ / 2);
        p.rotate(-90);
        p.drawText(QRect(-60, -8, 120, 16), Qt::AlignCenter, "depth %");
        p.restore();
    }

    // Colour bar: the fixed 0-1 scale.
    paint_colour_bar(p, kMargin + per_row_ * panel_w_ + 10, kHeader + kTop, std::max(60, ch_ * n_depth_),
                     {"1.0", "0.5", "0.0"}, "accuracy", st.ink, st.font);
}

void paint_colour_bar(QPainter& p, int x, int y, int height, const std::array<QString, 3>& labels,
                      const QString& title, const QColor& ink, const QFont& font) {
    for (int i = 0; i < height; ++i) {
        p.setPen(niah_colour(1.0 - static_cast<double>(i) / (height - 1)));
        p.drawLine(x, y + i, x + 16, y + i);
    }
    p.setPen(ink);
    p.setFont(font);
    for (int k = 0; k < 3; ++k)
        p.drawText(QRect(x + 20, y + k * height / 2 - 8, 50, 16), Qt::AlignLeft | Qt::AlignVCenter,
                   labels[static_cast<size_t>(k)]);
    p.drawText(QRect(x - 4, y - 26, 80, 16), Qt::AlignLeft | Qt::AlignVCenter, title);
}

QImage NiahHeatmapPainter::render() const {
    QImage img(width_, height_, QImage::Format_RGB32);
    img.fill(style_.background);
    QPainter p(&img);
    paint(p);
    p.end();
    return img;
}

}  // namespace varrate::viz
