// RdChart: a QPainter line-and-marker plot of (footprint, distortion) per method. The axis ranges are
// recomputed whenever the data or the measure change rather than at paint time, so point_position() and
// the hit tests agree with the last paint without waiting for one; colours are resolved at paint time so
// that a theme switch only needs a repaint.
#include "viz/rd_chart.h"

#include <QFileDialog>
#include <QLineF>
#include <QMenu>
#include <QMessageBox>
#include <QMouseEvent>
#include <QPainter>
#include <QPainterPath>
#include <QSaveFile>
#include <QToolTip>

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/error.h"
#include "codec/registry.h"
#include "viz/axis_interaction.h"
#include "viz/chart_export.h"
#include "viz/view_style.h"

namespace varrate::viz {

namespace {

constexpr RdMeasure kMeasures[] = {RdMeasure::KvError, RdMeasure::WeightedError, RdMeasure::AttentionOutput};

bool is_full(const RdChartPoint& p) {
    return !method_compresses(p.method.toStdString());
}

// The point's value of `m`; -1 when not measured (negative or not finite).
double measure_value(const RdChartPoint& p, RdMeasure m) {
    const double v = m == RdMeasure::KvError         ? p.kv_error
                     : m == RdMeasure::WeightedError ? p.weighted_error
                                                     : p.attn_output_error;
    return std::isfinite(v) && v >= 0 ? v : -1;
}

bool drawable(const RdChartPoint& p, RdMeasure m) {
    return p.infeasible.isEmpty() && std::isfinite(p.footprint) && p.footprint >= 0 &&
           measure_value(p, m) >= 0;
}

QString csv_number(double v) {
    return std::isfinite(v) && v >= 0 ? QString::number(v, 'g', QLocale::FloatingPointShortest) : QString();
}

QString csv_field(QString s) {
    if (s.contains(',') || s.contains('"') || s.contains('\n')) s = '"' + s.replace("\"", "\"\"") + '"';
    return s;
}

// "0.10", "0.075": two decimals as budgets are usually written, more only when the value needs them.
QString kappa_text(double k) {
    for (int d = 2; d <= 4; ++d) {
        const double scale = std::pow(10.0, d);
        if (std::abs(std::round(k * scale) / scale - k) < 1e-9) return QString::number(k, 'f', d);
    }
    return QString::number(k, 'g', 4);
}

QString value_text(double v) {
    return v >= 0 ? QString::number(v, 'g', 4) : QStringLiteral("not measured");
}

// The smallest multiple of a round tick step that is >= v (1 when v is not positive).
double nice_ceil(double v) {
    if (!(v > 0) || !std::isfinite(v)) return 1;
    const std::vector<double> t = nice_ticks(0, v, 5);
    const double step = t.size() >= 2 ? t[1] - t[0] : v;
    return std::ceil(v / step - 1e-9) * step;
}

void draw_marker(QPainter& p, QPointF at, double r, bool square) {
    if (square)
        p.drawRect(QRectF(at.x() - r, at.y() - r, 2 * r, 2 * r));
    else
        p.drawEllipse(at, r, r);
}

}  // namespace

QString rd_measure_name(RdMeasure m) {
    switch (m) {
        case RdMeasure::KvError:
            return QStringLiteral("K/V error");
        case RdMeasure::WeightedError:
            return QStringLiteral("salience-weighted K/V error");
        case RdMeasure::AttentionOutput:
            return QStringLiteral("attention-output error");
    }
    return {};
}

QString rd_chart_csv(const std::vector<RdChartPoint>& points) {
    QString out =
        QStringLiteral("method,kappa,footprint,kv_error,weighted_error,attn_output_error,infeasible\n");
    for (const RdChartPoint& p : points)
        out +=
            QStringList{csv_field(p.method),    csv_number(p.kappa),          csv_number(p.footprint),
                        csv_number(p.kv_error), csv_number(p.weighted_error), csv_number(p.attn_output_error),
                        csv_field(p.infeasible)}
                .join(QLatin1Char(',')) +
            QLatin1Char('\n');
    return out;
}

RdChart::RdChart(QWidget* parent) : QWidget(parent) {
    setObjectName(QStringLiteral("rd_chart"));
    setMouseTracking(true);  // tooltips and the cursor follow the mouse without a button held
    setAttribute(Qt::WA_OpaquePaintEvent);
    install_export_menu(this, QStringLiteral("rate-distortion"), [this](QMenu& menu) {
        menu.addAction(QStringLiteral("Export data (CSV)..."), this, [this] {
            const QString path = QFileDialog::getSaveFileName(this, QStringLiteral("Export data (CSV)"),
                                                              QStringLiteral("rate-distortion.csv"),
                                                              QStringLiteral("CSV (*.csv)"));
            if (path.isEmpty()) return;
            try {
                export_csv(path);
            } catch (const std::exception& e) {
                QMessageBox::warning(this, QStringLiteral("Export failed"), QString::fromStdString(e.what()));
            }
        });
    });
}

void RdChart::set_points(std::vector<RdChartPoint> points) {
    points_ = std::move(points);
    rescale();
}

void RdChart::set_current_kappa(double kappa) {
    current_kappa_ = kappa;
    update();
}

void RdChart::set_current_points(std::vector<RdChartPoint> points) {
    current_ = std::move(points);
    rescale();
}

void RdChart::set_pinned_points(std::vector<RdChartPoint> points) {
    pinned_ = std::move(points);
    rescale();
}

void RdChart::set_measure(RdMeasure m) {
    measure_ = m;
    rescale();
}

void RdChart::rescale() {
    methods_.clear();
    double fp = 0, err = 0;
    for (const auto* set : {&points_, &current_, &pinned_})
        for (const RdChartPoint& p : *set) {
            if (!methods_.contains(p.method)) methods_ << p.method;
            if (!drawable(p, measure_)) continue;
            fp = std::max(fp, p.footprint);
            err = std::max(err, measure_value(p, measure_));
        }
    // Footprints are fractions of the full cache: the axis stops at 1 unless a point lies beyond it.
    x_max_ = std::max(fp, std::min(1.0, nice_ceil(fp)));
    if (!(x_max_ > 0)) x_max_ = 1;
    y_max_ = nice_ceil(err * 1.04);  // headroom so that the worst point is not drawn on the frame
    update();
}

QRectF RdChart::plot_rect() const {
    const QFontMetrics fm(font());
    // Rotated y label, tick labels; title; x tick labels and the x label; half a tick label on the right.
    const double left = fm.height() + 8 + fm.horizontalAdvance(QStringLiteral("0.0000")) + 6;
    const double top = fm.height() + 10;
    const double bottom = 2 * fm.height() + 14;
    const double right = fm.horizontalAdvance(QStringLiteral("0.00")) / 2.0 + 8;
    return QRectF(left, top, std::max(10.0, width() - left - right), std::max(10.0, height() - top - bottom));
}

QPointF RdChart::point_position(const RdChartPoint& p) const {
    if (!drawable(p, measure_)) {
        const double nan = std::numeric_limits<double>::quiet_NaN();
        return {nan, nan};
    }
    const QRectF a = plot_rect();
    return {a.left() + p.footprint / x_max_ * a.width(),
            a.bottom() - measure_value(p, measure_) / y_max_ * a.height()};
}

std::optional<RdChart::Hit> RdChart::hit(QPointF pos, double max_px) const {
    std::optional<Hit> best;
    double best_d = max_px + 1e-9;
    // A grid point under the current point that marks it must stay clickable: grid points win ties.
    auto consider = [&](const std::vector<RdChartPoint>& v, Layer layer, double bias) {
        for (size_t i = 0; i < v.size(); ++i) {
            if (!drawable(v[i], measure_)) continue;
            const double d = QLineF(pos, point_position(v[i])).length() - bias;
            if (d < best_d) best_d = d, best = Hit{layer, i};
        }
    };
    consider(points_, Layer::Grid, 0.5);
    consider(current_, Layer::Current, 0);
    consider(pinned_, Layer::Pinned, 0);
    return best;
}

const RdChartPoint& RdChart::point_of(const Hit& h) const {
    const auto& v = h.layer == Layer::Grid ? points_ : h.layer == Layer::Current ? current_ : pinned_;
    return v[h.index];
}

std::optional<RdChartPoint> RdChart::point_at(QPointF pos, double max_px) const {
    const auto h = hit(pos, max_px);
    if (!h) return std::nullopt;
    return point_of(*h);
}

bool RdChart::clickable(const Hit& h) const {
    const RdChartPoint& p = point_of(h);
    return h.layer == Layer::Grid && !is_full(p) && p.infeasible.isEmpty();
}

QString RdChart::tooltip(const Hit& h) const {
    const RdChartPoint& p = point_of(h);
    QString head = QStringLiteral("%1, kappa %2").arg(p.method, kappa_text(p.kappa));
    if (h.layer == Layer::Current) head += QStringLiteral(" (current allocation)");
    if (h.layer == Layer::Pinned) head += QStringLiteral(" (pinned)");
    QStringList lines{head, QStringLiteral("footprint %1").arg(value_text(p.footprint))};
    for (RdMeasure m : kMeasures)
        lines << QStringLiteral("%1: %2").arg(rd_measure_name(m), value_text(measure_value(p, m)));
    // Infeasible budgets are drawn nowhere: the method's points say which ones and why.
    for (const RdChartPoint& q : points_)
        if (q.method == p.method && !q.infeasible.isEmpty())
            lines << QStringLiteral("kappa %1 infeasible: %2").arg(kappa_text(q.kappa), q.infeasible);
    if (clickable(h)) lines << QStringLiteral("click to set kappa %1").arg(kappa_text(p.kappa));
    return lines.join(QLatin1Char('\n'));
}

std::vector<const RdChartPoint*> RdChart::emphasised() const {
    std::vector<const RdChartPoint*> out;
    for (const RdChartPoint& c : current_)
        if (drawable(c, measure_)) out.push_back(&c);
    if (!(current_kappa_ > 0)) return out;
    for (const QString& m : methods_) {
        if (!method_compresses(m.toStdString()) ||
            std::any_of(out.begin(), out.end(), [&](const RdChartPoint* c) { return c->method == m; }))
            continue;
        const RdChartPoint* best = nullptr;
        for (const RdChartPoint& p : points_)
            if (p.method == m && drawable(p, measure_) &&
                (!best || std::abs(p.kappa - current_kappa_) < std::abs(best->kappa - current_kappa_)))
                best = &p;
        if (best) out.push_back(best);
    }
    return out;
}

// The colours every view gives methods (viz/view_style.h).
QColor RdChart::colour_of(const QString& method) const {
    return method_colour(method, palette());
}

void RdChart::draw_axes(QPainter& p, const QRectF& area) const {
    const QPalette& pal = palette();
    const QFontMetrics fm(font());
    const QColor grid = style_colour(StyleColour::Grid, pal);
    const QColor text = pal.color(QPalette::WindowText);
    for (double v : nice_ticks(0, y_max_, std::max(2, static_cast<int>(area.height() / (fm.height() * 2))))) {
        const double y = area.bottom() - v / y_max_ * area.height();
        p.setPen(grid);
        p.drawLine(QPointF(area.left(), y), QPointF(area.right(), y));
        p.setPen(text);
        p.drawText(QRectF(0, y - fm.height() / 2.0, area.left() - 4, fm.height()),
                   Qt::AlignRight | Qt::AlignVCenter, tick_label(v, false));
    }
    const int target =
        std::max(2, static_cast<int>(area.width() / (fm.horizontalAdvance(QStringLiteral("0.000")) * 2)));
    for (double v : nice_ticks(0, x_max_, target)) {
        const double x = area.left() + v / x_max_ * area.width();
        p.setPen(grid);
        p.drawLine(QPointF(x, area.top()), QPointF(x, area.bottom()));
        p.setPen(text);
        p.drawText(QRectF(x - 40, area.bottom() + 4, 80, fm.height()), Qt::AlignHCenter | Qt::AlignTop,
                   tick_label(v, false));
    }
    p.drawText(QRectF(area.left(), area.bottom() + fm.height() + 8, area.width(), fm.height()),
               Qt::AlignHCenter | Qt::AlignTop, QStringLiteral("footprint (fraction of the full cache)"));
    p.save();
    p.translate(2, area.center().y());
    p.rotate(-90);
    p.drawText(QRectF(-area.height() / 2, 0, area.height(), fm.height()), Qt::AlignCenter,
               rd_measure_name(measure_));
    p.restore();
    p.setPen(pal.color(QPalette::Mid));
    p.drawRect(area);
}

// In the corner of the plot that covers the fewest points: top-right, which rate-distortion curves leave
// empty (high footprint, high error), unless a small widget or unusual data fill it.
QRectF RdChart::draw_legend(QPainter& p, const QRectF& area, bool current) const {
    const QPalette& pal = palette();
    const QFontMetrics fm(font());
    const QColor text = pal.color(QPalette::WindowText);
    struct Entry {
        QString label;
        QColor colour;
        int kind;  // 0 curve, 1 single point (full), 2 current, 3 pinned
    };
    std::vector<Entry> entries;
    for (const QString& m : methods_) {
        const auto n = std::count_if(points_.begin(), points_.end(), [&](const RdChartPoint& q) {
            return q.method == m && !q.infeasible.isEmpty();
        });
        entries.push_back({n ? QStringLiteral("%1 (%2 infeasible)").arg(m).arg(n) : m, colour_of(m),
                           !method_compresses(m.toStdString()) ? 1 : 0});
    }
    if (current) entries.push_back({QStringLiteral("current"), text, 2});
    if (!pinned_.empty()) entries.push_back({QStringLiteral("pinned"), text, 3});
    double w = 0;
    for (const Entry& e : entries) w = std::max<double>(w, fm.horizontalAdvance(e.label));
    const double row = fm.height() + 2;
    const QSizeF size(w + 34, row * entries.size() + 6);
    std::vector<QPointF> drawn;
    for (const auto* set : {&points_, &current_, &pinned_})
        for (const RdChartPoint& q : *set)
            if (drawable(q, measure_)) drawn.push_back(point_position(q));
    QRectF box;
    long fewest = -1;
    for (const QPointF corner :
         {QPointF(area.right() - size.width() - 6, area.top() + 6),
          QPointF(area.left() + 6, area.bottom() - size.height() - 6),
          QPointF(area.left() + 6, area.top() + 6),
          QPointF(area.right() - size.width() - 6, area.bottom() - size.height() - 6)}) {
        const QRectF r(corner, size);
        const long n = std::count_if(drawn.begin(), drawn.end(),
                                     [&](const QPointF& d) { return r.adjusted(-8, -8, 8, 8).contains(d); });
        if (fewest < 0 || n < fewest) fewest = n, box = r;
    }
    QColor bg = pal.color(QPalette::Base);
    bg.setAlpha(220);
    p.setPen(pal.color(QPalette::Mid));
    p.setBrush(bg);
    p.drawRect(box);
    for (size_t i = 0; i < entries.size(); ++i) {
        const Entry& e = entries[i];
        const double y = box.top() + 3 + row * i + row / 2;
        const QPointF mark(box.left() + 14, y);
        p.setPen(QPen(e.colour, 1.5));
        if (e.kind == 0) p.drawLine(QPointF(box.left() + 5, y), QPointF(box.left() + 23, y));
        p.setBrush(e.kind == 3 ? QBrush(Qt::NoBrush) : QBrush(e.colour));
        draw_marker(p, mark, e.kind >= 2 ? 4.5 : 3, e.kind == 1);
        p.setPen(text);
        p.drawText(QRectF(box.left() + 28, y - row / 2, w + 4, row), Qt::AlignLeft | Qt::AlignVCenter,
                   e.label);
    }
    p.setBrush(Qt::NoBrush);
    return box;
}

void RdChart::paintEvent(QPaintEvent*) {
    QPainter p(this);
    const QPalette& pal = palette();
    p.fillRect(rect(), pal.color(QPalette::Base));
    const QRectF area = plot_rect();
    const QFontMetrics fm(font());
    const QColor text = pal.color(QPalette::WindowText);
    p.setPen(text);
    p.drawText(QPointF(area.left(), fm.ascent() + 3),
               fm.elidedText(QStringLiteral("Rate-distortion \u2014 %1").arg(rd_measure_name(measure_)),
                             Qt::ElideRight, static_cast<int>(width() - area.left() - 4)));

    bool any = false, any_feasible = false;
    for (const auto* set : {&points_, &current_, &pinned_})
        for (const RdChartPoint& q : *set) {
            any = any || drawable(q, measure_);
            any_feasible = any_feasible || q.infeasible.isEmpty();
        }
    if (!any) {
        p.setPen(pal.color(QPalette::Mid));
        p.drawRect(area);
        p.setPen(text);
        QString why = QStringLiteral("no rate-distortion points yet");
        if (any_feasible)
            why = QStringLiteral("%1 not measured for these points").arg(rd_measure_name(measure_));
        else if (!points_.empty())
            why = QStringLiteral("no budget of the grid is feasible");
        p.drawText(area, Qt::AlignCenter | Qt::TextWordWrap, why);
        return;
    }

    draw_axes(p, area);
    p.setRenderHint(QPainter::Antialiasing, true);
    // Curves through each method's grid points in footprint order, then their markers.
    for (const QString& m : methods_) {
        std::vector<const RdChartPoint*> pts;
        for (const RdChartPoint& q : points_)
            if (q.method == m && drawable(q, measure_)) pts.push_back(&q);
        std::stable_sort(pts.begin(), pts.end(), [](const RdChartPoint* a, const RdChartPoint* b) {
            return a->footprint < b->footprint;
        });
        const QColor c = colour_of(m);
        QPainterPath path;
        for (size_t i = 0; i < pts.size(); ++i) {
            if (i == 0)
                path.moveTo(point_position(*pts[i]));
            else
                path.lineTo(point_position(*pts[i]));
        }
        p.setPen(QPen(c, 1.5));
        p.setBrush(Qt::NoBrush);
        p.drawPath(path);
        p.setBrush(c);
        for (const RdChartPoint* q : pts) draw_marker(p, point_position(*q), 3, is_full(*q));
    }
    // The pinned allocation: hollow, larger than grid markers so that a grid point inside stays visible.
    p.setBrush(Qt::NoBrush);
    for (const RdChartPoint& q : pinned_) {
        if (!drawable(q, measure_)) continue;
        p.setPen(QPen(colour_of(q.method), 1.5));
        draw_marker(p, point_position(q), 6.5, is_full(q));
    }
    // The current points: filled, ringed in the base colour so that they stand out on their own curve, and
    // labelled with their kappa where the label runs into neither the legend nor another label.
    const std::vector<const RdChartPoint*> current = emphasised();
    for (const RdChartPoint* q : current) {
        const QPointF at = point_position(*q);
        p.setPen(QPen(pal.color(QPalette::Base), 2));
        p.setBrush(colour_of(q->method));
        draw_marker(p, at, 5.5, is_full(*q));
        p.setPen(QPen(colour_of(q->method), 1));
        p.setBrush(Qt::NoBrush);
        draw_marker(p, at, 7, is_full(*q));
    }
    std::vector<QRectF> labels{draw_legend(p, area, !current.empty())};
    for (const RdChartPoint* q : current) {
        const QPointF at = point_position(*q);
        if (is_full(*q)) continue;
        const QString label = QStringLiteral("kappa %1").arg(kappa_text(q->kappa));
        const double lw = fm.horizontalAdvance(label) + 4;
        QRectF r(at.x() + 9, at.y() - fm.height() - 4, lw, fm.height());
        if (r.right() > area.right()) r.moveRight(at.x() - 9);
        if (r.top() < area.top()) r.moveTop(at.y() + 4);
        if (std::any_of(labels.begin(), labels.end(), [&](const QRectF& o) { return o.intersects(r); }))
            continue;
        labels.push_back(r);
        p.setPen(text);
        p.drawText(r, Qt::AlignCenter, label);
    }
}

void RdChart::mousePressEvent(QMouseEvent* event) {
    if (event->button() != Qt::LeftButton) return QWidget::mousePressEvent(event);
    press_ = event->position();
    event->accept();
}

void RdChart::mouseMoveEvent(QMouseEvent* event) {
    const auto h = hit(event->position(), 8);
    // The pointing hand promises a click: only where one sets kappa; every drawn point has a tooltip.
    if (h && clickable(*h))
        setCursor(Qt::PointingHandCursor);
    else
        unsetCursor();
    if (h)
        QToolTip::showText(event->globalPosition().toPoint(), tooltip(*h), this);
    else
        QToolTip::hideText();
}

void RdChart::mouseReleaseEvent(QMouseEvent* event) {
    if (event->button() != Qt::LeftButton || !press_) return QWidget::mouseReleaseEvent(event);
    const bool click = QLineF(*press_, event->position()).length() <= AxisInteraction::kClickSlop;
    press_.reset();
    event->accept();
    if (!click) return;
    const auto h = hit(event->position(), 8);
    if (h && clickable(*h)) Q_EMIT kappa_selected(point_of(*h).kappa);
}

void RdChart::leaveEvent(QEvent* event) {
    press_.reset();
    unsetCursor();
    QToolTip::hideText();
    QWidget::leaveEvent(event);
}

void RdChart::export_csv(const QString& path) const {
    const QByteArray bytes = rd_chart_csv(points_).toUtf8();
    QSaveFile file(path);
    auto fail = [&] {
        throw Error(QStringLiteral("export to %1: %2").arg(path, file.errorString()).toStdString());
    };
    if (!file.open(QIODevice::WriteOnly)) fail();
    if (file.write(bytes) != bytes.size() || !file.commit()) fail();
}

}  // namespace varrate::viz
