// NiahHeatmapView: a thin widget over NiahHeatmapPainter; the geometry is the painter's, so tooltips and
// tests ask it for cell rectangles.
#include "viz/niah_heatmap_view.h"

#include <QHelpEvent>
#include <QPainter>
#include <QToolTip>

#include <algorithm>

#include "viz/view_style.h"

namespace varrate::viz {

QString niah_cell_tooltip(const NiahSummary& s, int series, const NiahCell& c) {
    QString text = QStringLiteral("%1, length %2, depth %3%: %4 / %5 correct")
                       .arg(QString::fromStdString(s.series.at(static_cast<size_t>(series)).label()))
                       .arg(c.context_length)
                       .arg(c.depth_percent)
                       .arg(c.correct)
                       .arg(c.n);
    if (c.n > 0) {
        const Interval ci = c.interval();
        text += QStringLiteral(" (%1 %, 95 % interval %2-%3 %)")
                    .arg(100.0 * c.accuracy(), 0, 'f', 0)
                    .arg(100.0 * ci.low, 0, 'f', 0)
                    .arg(100.0 * ci.high, 0, 'f', 0);
    }
    if (c.infeasible > 0)
        text += QStringLiteral(" (%1 infeasible: the budget cannot be met at this length)").arg(c.infeasible);
    return text;
}

NiahHeatmapView::NiahHeatmapView(QWidget* parent) : QWidget(parent) {
    setAttribute(Qt::WA_OpaquePaintEvent);
    setMouseTracking(true);
}

void NiahHeatmapView::set_summary(const NiahSummary& summary) {
    const size_t expected = summary.series.size() * summary.depths.size() * summary.lengths.size();
    summary_ = summary;
    if (summary_.cells.size() != expected)
        summary_.cells.clear();  // malformed: show nothing rather than guess
    updateGeometry();
    update();
}

void NiahHeatmapView::clear() {
    summary_ = {};
    update();
}

NiahHeatmapStyle NiahHeatmapView::style(QSize size) const {
    const QPalette& pal = palette();
    NiahHeatmapStyle s;
    s.font = font();
    s.title_font = font();
    s.title_font.setBold(true);
    s.background = pal.color(QPalette::Base);
    s.ink = pal.color(QPalette::WindowText);
    s.cell_text = Qt::black;  // the three scale colours are all light enough for black text
    s.grid = pal.color(QPalette::Base);
    s.missing = mix(pal.color(QPalette::Base), pal.color(QPalette::WindowText), 0.15);
    s.missing_hatch = pal.color(QPalette::Mid);
    const QSize cell = NiahHeatmapPainter::fitting_cell(summary_, size);
    s.cell_w = cell.width();
    s.cell_h = cell.height();
    return s;
}

QSize NiahHeatmapView::sizeHint() const {
    if (!has_summary()) return {600, 240};
    NiahHeatmapStyle s = style({});
    s.cell_w = 0;  // the PNG's cell size
    s.cell_h = 30;
    return NiahHeatmapPainter(summary_, s).size();
}

QRectF NiahHeatmapView::cell_rect(int series, int depth, int length) const {
    if (!has_summary()) return {};
    return QRectF(NiahHeatmapPainter(summary_, style(size())).cell_rect(series, depth, length));
}

void NiahHeatmapView::paintEvent(QPaintEvent*) {
    QPainter p(this);
    const QPalette& pal = palette();
    p.fillRect(rect(), pal.color(QPalette::Base));
    if (!has_summary()) {
        p.setPen(pal.color(QPalette::WindowText));
        p.drawText(rect(), Qt::AlignCenter, QStringLiteral("no NIAH results yet"));
        return;
    }
    NiahHeatmapPainter(summary_, style(size())).paint(p);
}

bool NiahHeatmapView::event(QEvent* event) {
    if (event->type() == QEvent::ToolTip && has_summary()) {
        auto* help = static_cast<QHelpEvent*>(event);
        const NiahHeatmapPainter painter(summary_, style(size()));
        for (int m = 0; m < static_cast<int>(summary_.series.size()); ++m)
            for (int d = 0; d < static_cast<int>(summary_.depths.size()); ++d)
                for (int x = 0; x < static_cast<int>(summary_.lengths.size()); ++x)
                    if (painter.cell_rect(m, d, x).contains(help->pos())) {
                        const NiahCell& c = summary_.cell(static_cast<size_t>(m), static_cast<size_t>(d),
                                                          static_cast<size_t>(x));
                        QString text = niah_cell_tooltip(summary_, m, c);
                        QToolTip::showText(help->globalPos(), text, this);
                        return true;
                    }
        QToolTip::hideText();
        return true;
    }
    return QWidget::event(event);
}

}  // namespace varrate::viz
