// RankHeatmap: ranks of all layers read once per run from RunModel::rank_grid; each paint of a new range or
// width averages the visible tokens into one image column per pixel (layers x pixels), then scales it.
#include "viz/rank_heatmap.h"

#include <QLinearGradient>
#include <QPainter>

#include <algorithm>
#include <cmath>

#include "viz/view_style.h"

namespace varrate::viz {

RankHeatmap::RankHeatmap(RunModel* model, PositionAxis* axis, QWidget* parent)
    : QWidget(parent),
      model_(model),
      axis_(axis),
      interaction_(new AxisInteraction(this, axis, [this] { return plot_rect(); })) {
    setAttribute(Qt::WA_OpaquePaintEvent);
    connect(interaction_, &AxisInteraction::clicked, this, [this](QPointF pt) {
        const int layer = layer_at(pt);
        if (layer >= 0) Q_EMIT layer_clicked(layer);
    });
    connect(interaction_, &AxisInteraction::hovered, this, [this](QPointF pt) {
        const int layer = layer_at(pt);
        if (layer == hover_layer_) return;
        hover_layer_ = layer;
        update();
    });
    connect(interaction_, &AxisInteraction::left, this, [this] {
        hover_layer_ = -1;
        update();
    });
    connect(model_, &RunModel::changed, this, &RankHeatmap::reload);
    connect(axis_, &PositionAxis::range_changed, this, qOverload<>(&QWidget::update));
    connect(axis_, &PositionAxis::cursor_changed, this, qOverload<>(&QWidget::update));
    reload();
}

void RankHeatmap::set_method(const QString& method) {
    if (method == method_) return;
    method_ = method;
    reload();
}

void RankHeatmap::reload() {
    n_tokens_ = model_->n_tokens();
    dim_ = std::max(1, model_->joint_dim());
    image_begin_ = image_end_ = -1;
    grid_ = model_->rank_grid(method_);
    update();
}

QRectF RankHeatmap::plot_rect() const {
    const QFontMetrics fm(font());
    const double left = fm.horizontalAdvance(QStringLiteral("L00")) + 12;
    const double right = 18 + fm.horizontalAdvance(QStringLiteral("0000")) + 10;  // colour bar + labels
    const double top = fm.height() + 6;
    const double bottom = fm.height() + 8;
    return QRectF(left, top, std::max(10.0, width() - left - right), std::max(10.0, height() - top - bottom));
}

int RankHeatmap::layer_at(const QPointF& p) const {
    const QRectF r = plot_rect();
    if (grid_.n_layer == 0 || !r.contains(p)) return -1;
    return std::clamp(static_cast<int>((p.y() - r.top()) / r.height() * grid_.n_layer), 0, grid_.n_layer - 1);
}

int RankHeatmap::position_at(const QPointF& p) const {
    const QRectF r = plot_rect();
    if (n_tokens_ == 0 || p.x() < r.left() || p.x() > r.right()) return -1;
    const double pos = axis_->begin() + (p.x() - r.left()) / r.width() * axis_->width();
    return std::clamp(static_cast<int>(std::floor(pos)), 0, n_tokens_ - 1);
}

int RankHeatmap::rank_at(int layer, int position) const {
    if (layer < 0 || layer >= grid_.n_layer || position < 0 || position >= grid_.n_tokens) return -1;
    return grid_.at(layer, position);
}

const QImage& RankHeatmap::heat_image(int width) {
    const double b = axis_->begin(), e = axis_->end();
    if (image_.width() == width && image_.height() == grid_.n_layer && image_begin_ == b && image_end_ == e)
        return image_;
    image_ = QImage(width, std::max(1, grid_.n_layer), QImage::Format_RGB32);
    image_begin_ = b;
    image_end_ = e;
    // Colour lookup per rank 0..D, so the inner loop is a table read.
    std::vector<QRgb> lut(static_cast<size_t>(dim_) + 1);
    for (int r = 0; r <= dim_; ++r) lut[static_cast<size_t>(r)] = sequential_colour(double(r) / dim_).rgb();
    const double tokens_per_px = (e - b) / width;
    for (int l = 0; l < grid_.n_layer; ++l) {
        auto* row = reinterpret_cast<QRgb*>(image_.scanLine(l));
        const int32_t* ranks = grid_.ranks.data() + static_cast<size_t>(l) * static_cast<size_t>(n_tokens_);
        for (int c = 0; c < width; ++c) {
            int i0 = static_cast<int>(std::floor(b + c * tokens_per_px));
            int i1 = static_cast<int>(std::floor(b + (c + 1) * tokens_per_px));
            if (i1 <= i0) i1 = i0 + 1;  // zoomed in: the token under the column
            i0 = std::clamp(i0, 0, n_tokens_ - 1);
            i1 = std::clamp(i1, i0 + 1, n_tokens_);
            int64_t sum = 0;
            for (int i = i0; i < i1; ++i) sum += ranks[i];
            const int mean = static_cast<int>(std::lround(double(sum) / (i1 - i0)));
            row[c] = lut[static_cast<size_t>(std::clamp(mean, 0, dim_))];
        }
    }
    return image_;
}

void RankHeatmap::paintEvent(QPaintEvent*) {
    QPainter p(this);
    const QPalette& pal = palette();
    p.fillRect(rect(), pal.color(QPalette::Base));
    const QRectF area = plot_rect();
    const QFontMetrics fm(font());
    const QColor text = pal.color(QPalette::WindowText);
    p.setPen(text);
    p.drawText(QPointF(area.left(), fm.ascent() + 2),
               QStringLiteral("Allocated rank \u2014 %1 (layer \u00D7 position)").arg(method_));
    if (grid_.n_layer == 0 || n_tokens_ == 0) {
        p.setPen(pal.color(QPalette::Mid));
        p.drawRect(area);
        p.setPen(text);
        p.drawText(area, Qt::AlignCenter,
                   model_->has_result() ? QStringLiteral("no ranks for %1").arg(method_)
                                        : QStringLiteral("no run yet"));
        return;
    }
    const int columns = std::max(1, static_cast<int>(std::round(area.width())));
    p.drawImage(area, heat_image(columns));
    const double b = axis_->begin(), e = axis_->end();

    // Layer labels (as many as fit), position ticks.
    const double row_h = area.height() / grid_.n_layer;
    const int every = std::max(1, static_cast<int>(std::ceil(fm.height() / row_h)));
    for (int l = 0; l < grid_.n_layer; l += every)
        p.drawText(QRectF(0, area.top() + l * row_h, area.left() - 4, std::max<double>(row_h, fm.height())),
                   Qt::AlignRight | Qt::AlignTop, QString::number(l));
    const int target =
        std::max(2, static_cast<int>(area.width() / (fm.horizontalAdvance(QStringLiteral("00000")) * 2)));
    for (double v : nice_ticks(b, e, target)) {
        const double x = area.left() + (v - b) / (e - b) * area.width();
        p.drawLine(QPointF(x, area.bottom()), QPointF(x, area.bottom() + 3));
        p.drawText(QRectF(x - 40, area.bottom() + 3, 80, fm.height()), Qt::AlignHCenter, tick_label(v, true));
    }
    // Needle span as brackets above the map.
    if (auto needle = model_->needle_span()) {
        const double x0 = area.left() + (needle->first - b) / (e - b) * area.width();
        const double x1 = area.left() + (needle->second - b) / (e - b) * area.width();
        if (x1 >= area.left() && x0 <= area.right())
            p.fillRect(QRectF(std::max(x0, area.left()), area.top() - 4, std::max(2.0, x1 - x0), 3),
                       style_colour(StyleColour::Needle, pal));
    }

    // Colour bar 0 .. D.
    const QRectF bar(area.right() + 8, area.top(), 10, area.height());
    QLinearGradient g(bar.bottomLeft(), bar.topLeft());
    for (int s = 0; s <= 8; ++s) g.setColorAt(s / 8.0, sequential_colour(s / 8.0));
    p.fillRect(bar, g);
    p.setPen(text);
    for (double v : {0.0, dim_ / 2.0, double(dim_)}) {
        const double y = bar.bottom() - v / dim_ * bar.height();
        p.drawText(QRectF(bar.right() + 3, y - fm.height() / 2.0, 60, fm.height()),
                   Qt::AlignLeft | Qt::AlignVCenter, QString::number(v, 'g', 4));
    }

    // Cursor column and its read-out.
    const int cursor = axis_->cursor();
    if (cursor >= 0 && cursor + 0.5 >= b && cursor + 0.5 <= e) {
        const double x = area.left() + (cursor + 0.5 - b) / (e - b) * area.width();
        p.setPen(QPen(pal.color(QPalette::Highlight), 1));
        p.drawLine(QPointF(x, area.top()), QPointF(x, area.bottom()));
        QString label = QStringLiteral("position %1").arg(cursor);
        if (hover_layer_ >= 0)
            label +=
                QStringLiteral(", layer %1: rank %2").arg(hover_layer_).arg(rank_at(hover_layer_, cursor));
        const double w = fm.horizontalAdvance(label) + 10;
        QRectF box(area.right() - w, 1, w, fm.height() + 2);
        p.fillRect(box, pal.color(QPalette::Base));
        p.setPen(text);
        p.drawText(box, Qt::AlignCenter, label);
    }
}

}  // namespace varrate::viz
