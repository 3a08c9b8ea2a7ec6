// PositionChart: a QPainter plot of per-token series over the shared axis. Each paint walks only the visible
// tokens once, reducing them to min/max per pixel column (so a 32k-token series costs one pass, not 32k
// line segments), and switches to a polyline with markers when zoomed in below one token per pixel.
#include "viz/position_charts.h"

#include <QPainter>
#include <QPainterPath>
#include <QSplitter>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>
#include <limits>

#include "codec/registry.h"
#include "viz/axis_interaction.h"
#include "viz/view_style.h"

namespace varrate::viz {

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Means over the ten position deciles of [0, L) (NaN values skipped; NaN when a decile has none).
std::vector<float> decile_means(const std::vector<float>& v) {
    std::vector<float> out(10, kNaN);
    const size_t n = v.size();
    if (n < 10) return {};
    for (size_t d = 0; d < 10; ++d) {
        double sum = 0;
        size_t count = 0;
        for (size_t i = d * n / 10; i < (d + 1) * n / 10; ++i)
            if (std::isfinite(v[i])) sum += v[i], ++count;
        if (count) out[d] = static_cast<float>(sum / count);
    }
    return out;
}

QString layer_label(int layer) {
    return layer < 0 ? QStringLiteral("mean over layers") : QStringLiteral("layer %1").arg(layer);
}

}  // namespace

PositionChart::PositionChart(RunModel* model, PositionAxis* axis, PositionChartKind kind, QWidget* parent)
    : QWidget(parent), model_(model), axis_(axis), kind_(kind) {
    new AxisInteraction(this, axis_, [this] { return plot_rect(); });
    setAutoFillBackground(false);
    setAttribute(Qt::WA_OpaquePaintEvent);
    connect(model_, &RunModel::changed, this, &PositionChart::reload);
    connect(axis_, &PositionAxis::range_changed, this, qOverload<>(&QWidget::update));
    connect(axis_, &PositionAxis::cursor_changed, this, qOverload<>(&QWidget::update));
    reload();
}

void PositionChart::set_method(const QString& method) {
    if (method == method_) return;
    method_ = method;
    reload();
}

void PositionChart::set_reference_method(const QString& method) {
    if (method == reference_) return;
    reference_ = method;
    reload();
}

void PositionChart::set_layer(int layer) {
    if (layer == layer_) return;
    layer_ = layer;
    reload();
}

void PositionChart::set_show_deciles(bool show) {
    show_deciles_ = show;
    update();
}

bool PositionChart::has_data() const {
    for (const Series& s : series_)
        for (float v : s.values)
            if (std::isfinite(v)) return true;
    return false;
}

// The pinned allocation's series of this chart's method, drawn under the live one (exact tokens left out of
// the rank, as for the live series).
void PositionChart::add_pinned(TokenMetric metric, double* top) {
    if (!model_->has_pinned()) return;
    Series s{model_->pinned_label(), StyleColour::Pinned, model_->pinned_series(method_, metric, layer_), {}};
    if (s.values.empty()) return;
    if (metric == TokenMetric::Rank)
        for (size_t i = 0; i < s.values.size() && i < exact_.size(); ++i)
            if (exact_[i]) s.values[i] = kNaN;
    for (float v : s.values)
        if (std::isfinite(v)) *top = std::max<double>(*top, v);
    s.deciles = decile_means(s.values);
    series_.push_back(std::move(s));
}

void PositionChart::reload() {
    series_.clear();
    ref_lines_.clear();
    exact_ = model_->exact_mask(method_, layer_);
    auto finite_max = [](const std::vector<float>& v, const std::vector<uint8_t>* skip) {
        float m = 0;
        for (size_t i = 0; i < v.size(); ++i)
            if (std::isfinite(v[i]) && !(skip && i < skip->size() && (*skip)[i])) m = std::max(m, v[i]);
        return m;
    };
    double top = 0;
    switch (kind_) {
        case PositionChartKind::Salience: {
            Series s{
                method_, StyleColour::Method, model_->series(method_, TokenMetric::Salience, layer_), {}};
            // Coded tokens set the scale: exact ones (the attention sink at 0) would flatten everything else;
            // values above it are clipped to the top edge.
            top = finite_max(s.values, &exact_);
            if (!(top > 0)) top = finite_max(s.values, nullptr);
            std::vector<float> coded = s.values;
            for (size_t i = 0; i < coded.size() && i < exact_.size(); ++i)
                if (exact_[i]) coded[i] = kNaN;
            s.deciles = decile_means(coded);
            if (!s.values.empty()) series_.push_back(std::move(s));
            y_label_ = QStringLiteral("salience");
            break;
        }
        case PositionChartKind::Rank: {
            Series s{method_, StyleColour::Method, model_->series(method_, TokenMetric::Rank, layer_), {}};
            // Exact tokens hold D and are shown in the strip under the plot, not as rank D spikes.
            for (size_t i = 0; i < s.values.size() && i < exact_.size(); ++i)
                if (exact_[i]) s.values[i] = kNaN;
            top = finite_max(s.values, nullptr);
            s.deciles = decile_means(s.values);
            if (!s.values.empty()) {
                series_.push_back(std::move(s));
                add_pinned(TokenMetric::Rank, &top);
                const double floor = model_->rank_floor();
                const double uniform = model_->uniform_rank(method_, layer_);
                const MethodTraits* traits = find_method_traits(method_.toStdString());
                if (floor > 0 && traits && (traits->reads & kReadsRankFloor))
                    ref_lines_.push_back(
                        {QStringLiteral("floor r_min = %1").arg(floor), floor, StyleColour::Floor});
                if (uniform > 0)
                    ref_lines_.push_back({QStringLiteral("uniform B/|C| = %1").arg(uniform, 0, 'f', 1),
                                          uniform, StyleColour::Uniform});
                for (const RefLine& r : ref_lines_) top = std::max(top, r.value);
            }
            y_label_ = QStringLiteral("rank");
            break;
        }
        case PositionChartKind::Error: {
            for (const QString& m : {method_, reference_}) {
                if (m.isEmpty() || (m == reference_ && reference_ == method_)) continue;
                Series s{m,
                         m == method_ ? StyleColour::Method : StyleColour::Reference,
                         model_->series(m, TokenMetric::RelError, layer_),
                         {}};
                if (s.values.empty()) continue;
                top = std::max<double>(top, finite_max(s.values, nullptr));
                s.deciles = decile_means(s.values);
                series_.push_back(std::move(s));
            }
            add_pinned(TokenMetric::RelError, &top);
            y_label_ = QStringLiteral("reconstruction error");
            break;
        }
    }
    y_min_ = 0;
    y_max_ = top > 0 ? top * 1.08 : 1.0;
    update();
}

QRectF PositionChart::plot_rect() const {
    const QFontMetrics fm(font());
    const double left = fm.horizontalAdvance(QStringLiteral("0.0000")) + 14;
    const double top = fm.height() + 6;
    const double bottom = fm.height() + 12;  // exact strip + x tick labels
    return QRectF(left, top, std::max(10.0, width() - left - 10), std::max(10.0, height() - top - bottom));
}

double PositionChart::position_at(double x) const {
    const QRectF r = plot_rect();
    return axis_->begin() + (x - r.left()) / r.width() * axis_->width();
}

double PositionChart::y_of(double value, const QRectF& area) const {
    const double t = (value - y_min_) / (y_max_ - y_min_);
    return area.bottom() - std::clamp(t, 0.0, 1.0) * area.height();
}

void PositionChart::draw_series(QPainter& p, const Series& s, const QRectF& area) const {
    const double b = axis_->begin(), e = axis_->end();
    const int n = static_cast<int>(s.values.size());
    if (n == 0 || !(e > b)) return;
    const double px_per_token = area.width() / (e - b);
    const QColor colour = style_colour(s.role, palette());
    // Width 1: Qt's raster engine then strokes with its fast cosmetic stroker, antialiased or not. A wider
    // pen goes through the general stroker: the zoomed-in error chart of a 32k-token run (two noisy series of
    // ~500 points) took 48 ms per repaint at width 1.2 and 0.7 ms at 1.
    p.setPen(QPen(colour, 1.0));
    if (px_per_token >= 1.0) {
        // Zoomed in: a polyline through token centres, broken at NaN, with markers when tokens are wide.
        const int first = std::max(0, static_cast<int>(std::floor(b)) - 1);
        const int last = std::min(n, static_cast<int>(std::ceil(e)) + 1);
        QPainterPath path;
        bool open = false;
        std::vector<QPointF> dots;
        for (int i = first; i < last; ++i) {
            const float v = s.values[static_cast<size_t>(i)];
            if (!std::isfinite(v)) {
                open = false;
                continue;
            }
            const QPointF pt(area.left() + (i + 0.5 - b) * px_per_token, y_of(v, area));
            if (open)
                path.lineTo(pt);
            else
                path.moveTo(pt);
            open = true;
            if (px_per_token >= 6) dots.push_back(pt);
        }
        p.setRenderHint(QPainter::Antialiasing,
                        true);  // only the polyline: column segments are pixel-aligned
        p.drawPath(path);
        p.setBrush(colour);
        const double r = std::min(3.0, px_per_token / 4);
        for (const QPointF& d : dots) p.drawEllipse(d, r, r);
        p.setBrush(Qt::NoBrush);
        p.setRenderHint(QPainter::Antialiasing, false);
        return;
    }
    // Zoomed out: one vertical min..max segment per pixel column, joined to the previous column's last value.
    const int columns = static_cast<int>(std::ceil(area.width()));
    std::vector<QLineF> segments;
    segments.reserve(static_cast<size_t>(columns));
    const double tokens_per_px = (e - b) / area.width();
    float last = kNaN;
    for (int c = 0; c < columns; ++c) {
        const int i0 = std::max(0, static_cast<int>(std::floor(b + c * tokens_per_px)));
        const int i1 = std::min(n, static_cast<int>(std::floor(b + (c + 1) * tokens_per_px)));
        float lo = std::numeric_limits<float>::infinity(), hi = -lo, end_value = kNaN;
        for (int i = i0; i < i1; ++i) {
            const float v = s.values[static_cast<size_t>(i)];
            if (!std::isfinite(v)) continue;
            lo = std::min(lo, v);
            hi = std::max(hi, v);
            end_value = v;
        }
        if (!std::isfinite(end_value)) {
            last = kNaN;
            continue;
        }
        if (std::isfinite(last)) lo = std::min(lo, last), hi = std::max(hi, last);
        const double x = area.left() + c + 0.5;
        double y0 = y_of(lo, area), y1 = y_of(hi, area);
        if (y0 - y1 < 1) y1 = y0 - 1;  // at least one pixel tall
        segments.emplace_back(x, y0, x, y1);
        last = end_value;
    }
    p.setPen(QPen(colour, 1.0));
    p.drawLines(segments.data(), static_cast<int>(segments.size()));
}

void PositionChart::draw_axes(QPainter& p, const QRectF& area) const {
    const QPalette& pal = palette();
    const QFontMetrics fm(font());
    const QColor grid = style_colour(StyleColour::Grid, pal);
    const QColor text = pal.color(QPalette::WindowText);
    for (double v :
         nice_ticks(y_min_, y_max_, std::max(2, static_cast<int>(area.height() / (fm.height() * 2))))) {
        const double y = y_of(v, area);
        p.setPen(grid);
        p.drawLine(QPointF(area.left(), y), QPointF(area.right(), y));
        p.setPen(text);
        p.drawText(QRectF(0, y - fm.height() / 2.0, area.left() - 4, fm.height()),
                   Qt::AlignRight | Qt::AlignVCenter, tick_label(v, false));
    }
    const double b = axis_->begin(), e = axis_->end();
    const int target =
        std::max(2, static_cast<int>(area.width() / (fm.horizontalAdvance(QStringLiteral("00000")) * 2)));
    for (double v : nice_ticks(b, e, target)) {
        const double x = area.left() + (v - b) / (e - b) * area.width();
        p.setPen(grid);
        p.drawLine(QPointF(x, area.top()), QPointF(x, area.bottom()));
        p.setPen(text);
        p.drawText(QRectF(x - 40, area.bottom() + 6, 80, fm.height()), Qt::AlignHCenter | Qt::AlignTop,
                   tick_label(v, true));
    }
    p.setPen(pal.color(QPalette::Mid));
    p.drawRect(area);
}

void PositionChart::paintEvent(QPaintEvent*) {
    QPainter p(this);
    const QPalette& pal = palette();
    p.fillRect(rect(), pal.color(QPalette::Base));
    const QRectF area = plot_rect();
    const QFontMetrics fm(font());
    const QColor text = pal.color(QPalette::WindowText);
    const double b = axis_->begin(), e = axis_->end();

    // Title and legend.
    QString title;
    switch (kind_) {
        case PositionChartKind::Salience:
            title = QStringLiteral("Salience by position \u2014 %1, %2").arg(method_, layer_label(layer_));
            break;
        case PositionChartKind::Rank:
            title =
                QStringLiteral("Allocated rank by position \u2014 %1, %2").arg(method_, layer_label(layer_));
            break;
        case PositionChartKind::Error:
            title = QStringLiteral("Reconstruction error by position \u2014 %1").arg(layer_label(layer_));
            break;
    }
    p.setPen(text);
    p.drawText(QPointF(area.left(), fm.ascent() + 2), title);
    double lx = area.left() + fm.horizontalAdvance(title) + 16;
    auto legend = [&](const QString& name, const QColor& c, Qt::PenStyle style) {
        p.setPen(QPen(c, 2, style));
        const double y = fm.height() / 2.0 + 2;
        p.drawLine(QPointF(lx, y), QPointF(lx + 16, y));
        p.setPen(text);
        p.drawText(QPointF(lx + 20, fm.ascent() + 2), name);
        lx += 20 + fm.horizontalAdvance(name) + 12;
    };
    for (const Series& s : series_) legend(s.name, style_colour(s.role, pal), Qt::SolidLine);
    if (show_deciles_ && !series_.empty()) legend(QStringLiteral("decile means"), text, Qt::SolidLine);
    for (const RefLine& r : ref_lines_) legend(r.name, style_colour(r.role, pal), Qt::DashLine);

    if (series_.empty() || !(e > b)) {
        p.setPen(pal.color(QPalette::Mid));
        p.drawRect(area);
        p.setPen(text);
        p.drawText(area, Qt::AlignCenter,
                   model_->has_result() ? QStringLiteral("no %1 for %2").arg(y_label_, method_)
                                        : QStringLiteral("no run yet"));
        return;
    }

    draw_axes(p, area);
    p.save();
    p.setClipRect(area.adjusted(0, -1, 0, 1));
    if (auto needle = model_->needle_span()) {
        QColor c = style_colour(StyleColour::Needle, pal);
        c.setAlpha(40);
        const double x0 = area.left() + (needle->first - b) / (e - b) * area.width();
        const double x1 = area.left() + (needle->second - b) / (e - b) * area.width();
        p.fillRect(QRectF(x0, area.top(), std::max(2.0, x1 - x0), area.height()), c);
    }
    for (const Series& s : series_) draw_series(p, s, area);
    if (show_deciles_) {
        const int n = model_->n_tokens();
        for (const Series& s : series_) {
            if (s.deciles.empty()) continue;
            QColor c = series_.size() == 1 ? text
                                           : (is_dark(pal) ? style_colour(s.role, pal).lighter(140)
                                                           : style_colour(s.role, pal).darker(150));
            p.setPen(QPen(c, 2.5));
            for (int d = 0; d < 10; ++d) {
                if (!std::isfinite(s.deciles[static_cast<size_t>(d)])) continue;
                const double x0 = area.left() + (d * n / 10.0 - b) / (e - b) * area.width();
                const double x1 = area.left() + ((d + 1) * n / 10.0 - b) / (e - b) * area.width();
                const double y = y_of(s.deciles[static_cast<size_t>(d)], area);
                p.drawLine(QPointF(x0, y), QPointF(x1, y));
            }
        }
    }
    for (const RefLine& r : ref_lines_) {
        p.setPen(QPen(style_colour(r.role, pal), 1.5, Qt::DashLine));
        const double y = y_of(r.value, area);
        p.drawLine(QPointF(area.left(), y), QPointF(area.right(), y));
    }
    p.restore();

    // Exact tokens: a strip under the plot, one mark per pixel column that holds any.
    if (!exact_.empty()) {
        const QColor c = style_colour(StyleColour::Exact, pal);
        const double px = area.width() / (e - b);
        const int first = std::max(0, static_cast<int>(std::floor(b)));
        const int last = std::min(static_cast<int>(exact_.size()), static_cast<int>(std::ceil(e)));
        double last_x = -1;
        for (int i = first; i < last; ++i) {
            if (!exact_[static_cast<size_t>(i)]) continue;
            const double x = std::floor(area.left() + (i - b) * px);
            if (x == last_x) continue;
            last_x = x;
            p.fillRect(QRectF(x, area.bottom() + 1, std::max(1.0, px), 4), c);
        }
    }

    // Cursor and its read-out.
    const int cursor = axis_->cursor();
    if (cursor >= 0 && cursor + 0.5 >= b && cursor + 0.5 <= e) {
        const double x = area.left() + (cursor + 0.5 - b) / (e - b) * area.width();
        p.setPen(QPen(pal.color(QPalette::Highlight), 1));
        p.drawLine(QPointF(x, area.top()), QPointF(x, area.bottom()));
        QStringList parts;
        parts << QStringLiteral("%1 \u201C%2\u201D")
                     .arg(cursor)
                     .arg(visible_whitespace(model_->token_text(cursor)).left(16));
        for (const Series& s : series_) {
            const float v =
                static_cast<size_t>(cursor) < s.values.size() ? s.values[static_cast<size_t>(cursor)] : kNaN;
            const bool exact =
                static_cast<size_t>(cursor) < exact_.size() && exact_[static_cast<size_t>(cursor)];
            parts << QStringLiteral("%1 %2").arg(
                s.name, std::isfinite(v) ? QString::number(v, 'g', 4)
                                         : (exact ? QStringLiteral("exact") : QStringLiteral("-")));
        }
        const QString label = parts.join(QStringLiteral("  "));
        const double w = fm.horizontalAdvance(label) + 10;
        QRectF box(area.right() - w - 2, area.top() + 2, w, fm.height() + 4);
        QColor bg = pal.color(QPalette::ToolTipBase);
        bg.setAlpha(225);
        p.fillRect(box, bg);
        p.setPen(pal.color(QPalette::ToolTipText));
        p.drawText(box, Qt::AlignCenter, label);
    }
}

PositionCharts::PositionCharts(RunModel* model, PositionAxis* axis, QWidget* parent)
    : QWidget(parent),
      salience_(new PositionChart(model, axis, PositionChartKind::Salience)),
      rank_(new PositionChart(model, axis, PositionChartKind::Rank)),
      error_(new PositionChart(model, axis, PositionChartKind::Error)) {
    auto* split = new QSplitter(Qt::Vertical);
    split->addWidget(salience_);
    split->addWidget(rank_);
    split->addWidget(error_);
    split->setChildrenCollapsible(false);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(split);
}

void PositionCharts::set_method(const QString& method) {
    salience_->set_method(method);
    rank_->set_method(method);
    error_->set_method(method);
}

void PositionCharts::set_reference_method(const QString& method) {
    error_->set_reference_method(method);
}

void PositionCharts::set_layer(int layer) {
    salience_->set_layer(layer);
    rank_->set_layer(layer);
    error_->set_layer(layer);
}

}  // namespace varrate::viz
