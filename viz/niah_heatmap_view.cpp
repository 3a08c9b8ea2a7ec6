// NiahHeatmapView: panels of equal size, one per method, sharing the depth labels of the first panel and one
// colour bar, so methods compare cell by cell.
#include "viz/niah_heatmap_view.h"

#include <QHelpEvent>
#include <QLinearGradient>
#include <QPainter>
#include <QToolTip>

#include <algorithm>
#include <cmath>

#include "viz/view_style.h"

namespace varrate::viz {

namespace {

QString length_label(int64_t n) {
    if (n >= 1024 && n % 1024 == 0) return QStringLiteral("%1k").arg(n / 1024);
    if (n >= 1000 && n % 1000 == 0) return QStringLiteral("%1k").arg(n / 1000);
    return QString::number(n);
}

}  // namespace

QColor niah_colour(double accuracy) {
    if (!(accuracy >= 0)) return {};
    static const QColor red(0xF0, 0x49, 0x6E), amber(0xEB, 0xB8, 0x39), green(0x0C, 0xD7, 0x9F);
    const double t = std::clamp(accuracy, 0.0, 1.0);
    return t < 0.5 ? mix(red, amber, t / 0.5) : mix(amber, green, (t - 0.5) / 0.5);
}

NiahHeatmapView::NiahHeatmapView(QWidget* parent) : QWidget(parent) {
    setAttribute(Qt::WA_OpaquePaintEvent);
    setMouseTracking(true);
}

void NiahHeatmapView::set_summary(const NiahSummary& summary) {
    const size_t expected = summary.methods.size() * summary.depths.size() * summary.lengths.size();
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

QSize NiahHeatmapView::sizeHint() const {
    const int m = std::max<int>(1, static_cast<int>(summary_.methods.size()));
    const int cols = std::max<int>(1, static_cast<int>(summary_.lengths.size()));
    const int rows = std::max<int>(1, static_cast<int>(summary_.depths.size()));
    return {80 + m * (cols * 46 + 16) + 60, 70 + rows * 26};
}

NiahHeatmapView::Layout NiahHeatmapView::layout() const {
    Layout l;
    const QFontMetrics fm(font());
    const int m = std::max<int>(1, static_cast<int>(summary_.methods.size()));
    const int cols = std::max<int>(1, static_cast<int>(summary_.lengths.size()));
    const int rows = std::max<int>(1, static_cast<int>(summary_.depths.size()));
    l.left = fm.horizontalAdvance(QStringLiteral("100%")) + fm.height() + 12;  // depth labels + axis title
    l.top = 2 * fm.height() + 10;                                              // title + method names
    l.gap = 14;
    const double colour_bar = 14 + fm.horizontalAdvance(QStringLiteral("1.0")) + 14;
    l.panel_w = std::max(20.0, (width() - l.left - colour_bar - (m - 1) * l.gap) / m);
    l.cell_w = l.panel_w / cols;
    l.cell_h = std::max(4.0, (height() - l.top - 2.0 * fm.height() - 10) / rows);
    return l;
}

QRectF NiahHeatmapView::cell_rect(int method, int depth, int length) const {
    if (method < 0 || depth < 0 || length < 0 || method >= static_cast<int>(summary_.methods.size()) ||
        depth >= static_cast<int>(summary_.depths.size()) ||
        length >= static_cast<int>(summary_.lengths.size()))
        return {};
    const Layout l = layout();
    return QRectF(l.left + method * (l.panel_w + l.gap) + length * l.cell_w, l.top + depth * l.cell_h,
                  l.cell_w, l.cell_h);
}

void NiahHeatmapView::paintEvent(QPaintEvent*) {
    QPainter p(this);
    const QPalette& pal = palette();
    p.fillRect(rect(), pal.color(QPalette::Base));
    const QFontMetrics fm(font());
    const QColor text = pal.color(QPalette::WindowText);
    p.setPen(text);
    if (!has_summary()) {
        p.drawText(rect(), Qt::AlignCenter, QStringLiteral("no NIAH results yet"));
        return;
    }
    const Layout l = layout();
    QString title =
        QStringLiteral("Needle in a haystack \u2014 %1").arg(QString::fromStdString(summary_.model));
    if (!summary_.mode.empty()) title += QStringLiteral(", %1").arg(QString::fromStdString(summary_.mode));
    if (summary_.budget > 0) title += QStringLiteral(", budget %1").arg(summary_.budget);
    p.drawText(QPointF(l.left, fm.ascent() + 2), title);

    const int n_m = static_cast<int>(summary_.methods.size());
    const int n_d = static_cast<int>(summary_.depths.size());
    const int n_l = static_cast<int>(summary_.lengths.size());
    const QColor missing = mix(pal.color(QPalette::Base), pal.color(QPalette::WindowText), 0.15);
    const bool cell_text =
        l.cell_w >= fm.horizontalAdvance(QStringLiteral("0.00")) + 4 && l.cell_h >= fm.height();
    for (int m = 0; m < n_m; ++m) {
        const QRectF first = cell_rect(m, 0, 0);
        p.setPen(text);
        p.drawText(QRectF(first.left(), fm.height() + 6, l.panel_w, fm.height()), Qt::AlignHCenter,
                   QString::fromStdString(summary_.methods[static_cast<size_t>(m)]));
        for (int d = 0; d < n_d; ++d) {
            for (int x = 0; x < n_l; ++x) {
                const NiahCell& c =
                    summary_.cell(static_cast<size_t>(m), static_cast<size_t>(d), static_cast<size_t>(x));
                const QRectF r = cell_rect(m, d, x);
                const double acc = c.accuracy();
                if (acc < 0) {
                    p.fillRect(r, missing);
                    p.fillRect(r, QBrush(pal.color(QPalette::Mid), Qt::BDiagPattern));
                    if (cell_text && c.infeasible > 0) {
                        p.setPen(text);
                        p.drawText(r, Qt::AlignCenter, QStringLiteral("n/a"));  // budget infeasible here
                    }
                } else {
                    const QColor fill = niah_colour(acc);
                    p.fillRect(r, fill);
                    if (cell_text) {
                        p.setPen(Qt::black);  // the three scale colours are all light enough for black text
                        p.drawText(r, Qt::AlignCenter, QString::number(acc, 'f', 2));
                    }
                }
                p.setPen(QPen(pal.color(QPalette::Base), 1));
                p.drawRect(r);
            }
        }
        // Length labels under each panel.
        p.setPen(text);
        const double by = l.top + n_d * l.cell_h + 3;
        for (int x = 0; x < n_l; ++x) {
            const QRectF r = cell_rect(m, 0, x);
            p.drawText(QRectF(r.left(), by, r.width(), fm.height()), Qt::AlignHCenter,
                       length_label(summary_.lengths[static_cast<size_t>(x)]));
        }
        p.drawText(QRectF(first.left(), by + fm.height(), l.panel_w, fm.height()), Qt::AlignHCenter,
                   QStringLiteral("context length (tokens)"));
    }
    // Depth labels left of the first panel, and the axis title turned on its side.
    for (int d = 0; d < n_d; ++d) {
        const QRectF r = cell_rect(0, d, 0);
        p.drawText(QRectF(fm.height() + 2, r.top(), l.left - fm.height() - 6, r.height()),
                   Qt::AlignRight | Qt::AlignVCenter,
                   QStringLiteral("%1%").arg(summary_.depths[static_cast<size_t>(d)], 0, 'g', 3));
    }
    p.save();
    p.translate(fm.ascent(), l.top + n_d * l.cell_h / 2);
    p.rotate(-90);
    p.drawText(QRectF(-80, -fm.ascent(), 160, fm.height()), Qt::AlignHCenter, QStringLiteral("needle depth"));
    p.restore();

    // Colour bar 0..1, fixed scale.
    const QRectF bar(l.left + n_m * l.panel_w + (n_m - 1) * l.gap + 12, l.top, 12, n_d * l.cell_h);
    QLinearGradient g(bar.bottomLeft(), bar.topLeft());
    for (int s = 0; s <= 10; ++s) g.setColorAt(s / 10.0, niah_colour(s / 10.0));
    p.fillRect(bar, g);
    for (double v : {0.0, 0.5, 1.0}) {
        const double y = bar.bottom() - v * bar.height();
        p.drawText(QRectF(bar.right() + 3, y - fm.height() / 2.0, 40, fm.height()),
                   Qt::AlignLeft | Qt::AlignVCenter, QString::number(v, 'f', 1));
    }
}

bool NiahHeatmapView::event(QEvent* event) {
    if (event->type() == QEvent::ToolTip && has_summary()) {
        auto* help = static_cast<QHelpEvent*>(event);
        for (int m = 0; m < static_cast<int>(summary_.methods.size()); ++m)
            for (int d = 0; d < static_cast<int>(summary_.depths.size()); ++d)
                for (int x = 0; x < static_cast<int>(summary_.lengths.size()); ++x)
                    if (cell_rect(m, d, x).contains(help->pos())) {
                        const NiahCell& c = summary_.cell(static_cast<size_t>(m), static_cast<size_t>(d),
                                                          static_cast<size_t>(x));
                        QString text = QStringLiteral("%1, length %2, depth %3%: %4 / %5 correct")
                                           .arg(QString::fromStdString(c.method))
                                           .arg(c.context_length)
                                           .arg(c.depth_percent)
                                           .arg(c.correct)
                                           .arg(c.n);
                        if (c.infeasible > 0)
                            text +=
                                QStringLiteral(" (%1 infeasible: the budget cannot be met at this length)")
                                    .arg(c.infeasible);
                        QToolTip::showText(help->globalPos(), text, this);
                        return true;
                    }
        QToolTip::hideText();
        return true;
    }
    return QWidget::event(event);
}

}  // namespace varrate::viz
