// LayerSummary: one painted row per layer with bars on shared scales, so layers compare at a glance and the
// widget exports as vector graphics like the charts.
#include "viz/layer_summary.h"

#include <QMouseEvent>
#include <QPainter>

#include <algorithm>

#include "viz/view_style.h"

namespace varrate::viz {

namespace {

const LayerDiagnostics* find_layer(const MethodRun* run, int layer) {
    if (!run) return nullptr;
    for (const LayerDiagnostics& d : run->layers)
        if (d.layer == layer) return &d;
    return nullptr;
}

}  // namespace

QString error_measure_name(LayerErrorMeasure m) {
    switch (m) {
        case LayerErrorMeasure::SalienceWeighted:
            return QStringLiteral("weighted error");
        case LayerErrorMeasure::AttentionOutput:
            return QStringLiteral("attn-output error");
        default:
            return QStringLiteral("mean error");
    }
}

double layer_error(const LayerDiagnostics& d, LayerErrorMeasure m) {
    switch (m) {
        case LayerErrorMeasure::SalienceWeighted:
            return d.weighted_rel_error;
        case LayerErrorMeasure::AttentionOutput:
            return d.attn_output_error;
        default:
            return d.mean_rel_error;
    }
}

LayerSummary::LayerSummary(RunModel* model, PositionAxis* axis, QWidget* parent)
    : QWidget(parent), model_(model), axis_(axis) {
    setAttribute(Qt::WA_OpaquePaintEvent);
    connect(model_, &RunModel::changed, this, [this] {
        updateGeometry();
        update();
    });
}

void LayerSummary::set_method(const QString& method) {
    method_ = method;
    update();
}

void LayerSummary::set_reference_method(const QString& method) {
    reference_ = method;
    update();
}

void LayerSummary::set_error_measure(LayerErrorMeasure m) {
    measure_ = m;
    update();
}

void LayerSummary::set_layer(int layer) {
    layer_ = layer;
    update();
}

int LayerSummary::row_height() const {
    return fontMetrics().height() + 6;
}
int LayerSummary::header_height() const {
    return 2 * fontMetrics().height() + 10;
}

QSize LayerSummary::sizeHint() const {
    return {520, header_height() + std::max(1, model_->n_layer()) * row_height() + 4};
}

int LayerSummary::row_at(const QPoint& p) const {
    const int row = (p.y() - header_height()) / row_height();
    if (p.y() < header_height() || row >= model_->n_layer()) return -1;
    return row;
}

void LayerSummary::paintEvent(QPaintEvent*) {
    QPainter p(this);
    const QPalette& pal = palette();
    p.fillRect(rect(), pal.color(QPalette::Base));
    const QFontMetrics fm(font());
    const QColor text = pal.color(QPalette::WindowText);
    const MethodRun* run = model_->run(method_);
    const MethodRun* ref = reference_ != method_ ? model_->run(reference_) : nullptr;
    const int n_layer = model_->n_layer();
    const int dim = std::max(1, model_->joint_dim());

    p.setPen(text);
    p.drawText(QPointF(6, fm.ascent() + 3),
               QStringLiteral("Per-layer summary \u2014 %1%2")
                   .arg(method_, ref ? QStringLiteral(" vs ") + reference_ : QString()));
    if (!run || n_layer == 0) {
        p.drawText(rect().adjusted(0, header_height(), 0, 0), Qt::AlignCenter,
                   model_->has_result() ? QStringLiteral("no layers for %1").arg(method_)
                                        : QStringLiteral("no run yet"));
        return;
    }

    // Columns: layer | mean error | floor share | rank range.
    const int label_w = fm.horizontalAdvance(QStringLiteral("layer 00")) + 8;
    const int col_w = std::max(60, (width() - label_w - 12) / 3);
    const int x_err = label_w, x_floor = label_w + col_w + 6, x_rank = label_w + 2 * (col_w + 6);
    const int bar_w = col_w - fm.horizontalAdvance(QStringLiteral("0.000/0.000")) - 8;
    const int hy = fm.height() + 6;
    // Headers elided to their column so that a narrow panel never clips them mid-letter.
    auto header = [&](int x, int w, const QString& s) {
        p.drawText(QRect(x, hy, w, fm.height()), Qt::AlignLeft, fm.elidedText(s, Qt::ElideRight, w));
    };
    header(0, label_w, QStringLiteral(" layer"));
    header(x_err, col_w, error_measure_name(measure_));
    header(x_floor, col_w, QStringLiteral("floor share"));
    header(x_rank, col_w, QStringLiteral("ranks (mean)"));

    double max_err = 1e-9;
    for (const MethodRun* r : {run, ref})
        if (r)
            for (const LayerDiagnostics& d : r->layers) max_err = std::max(max_err, layer_error(d, measure_));
    const QColor c_method = style_colour(StyleColour::Method, pal);
    const QColor c_ref = style_colour(StyleColour::Reference, pal);
    const QColor c_floor = style_colour(StyleColour::Floor, pal);
    const QColor track = style_colour(StyleColour::Grid, pal);
    const int rh = row_height();
    for (int l = 0; l < n_layer; ++l) {
        const int y = header_height() + l * rh;
        if (l == layer_)
            p.fillRect(QRect(0, y, width(), rh),
                       pal.color(QPalette::Highlight).lighter(is_dark(pal) ? 60 : 170));
        else if (l % 2)
            p.fillRect(QRect(0, y, width(), rh), pal.color(QPalette::AlternateBase));
        const LayerDiagnostics* d = find_layer(run, l);
        const LayerDiagnostics* dr = find_layer(ref, l);
        p.setPen(text);
        p.drawText(QRect(4, y, label_w - 4, rh), Qt::AlignLeft | Qt::AlignVCenter, QString::number(l));
        if (!d) continue;
        // Error: the method's bar over the reference's, on one scale ("n/a": not measured by this run).
        const int half = (rh - 4) / 2;
        const double e = layer_error(*d, measure_), er = dr ? layer_error(*dr, measure_) : -1;
        auto number = [](double v) { return v < 0 ? QStringLiteral("n/a") : QString::number(v, 'f', 3); };
        p.fillRect(QRect(x_err, y + 2, bar_w, rh - 4), track);
        p.fillRect(QRectF(x_err, y + 2, bar_w * std::max(0.0, e) / max_err, half), c_method);
        QString err = number(e);
        if (dr) {
            p.fillRect(QRectF(x_err, y + 2 + half, bar_w * std::max(0.0, er) / max_err, half), c_ref);
            err += QLatin1Char('/') + number(er);
        }
        p.setPen(text);
        p.drawText(QRect(x_err + bar_w + 4, y, col_w - bar_w - 4, rh), Qt::AlignLeft | Qt::AlignVCenter, err);
        // Floor share 0..1.
        p.fillRect(QRect(x_floor, y + 2, bar_w, rh - 4), track);
        p.fillRect(QRectF(x_floor, y + 2, bar_w * d->floor_share, rh - 4), c_floor);
        p.drawText(QRect(x_floor + bar_w + 4, y, col_w - bar_w - 4, rh), Qt::AlignLeft | Qt::AlignVCenter,
                   QStringLiteral("%1%").arg(100.0 * d->floor_share, 0, 'f', 0));
        // Rank range on 0..D with the mean marked.
        const double x0 = x_rank + bar_w * double(d->min_rank) / dim,
                     x1 = x_rank + bar_w * double(d->max_rank) / dim;
        p.fillRect(QRect(x_rank, y + rh / 2 - 1, bar_w, 2), track);
        p.fillRect(QRectF(x0, y + 3, std::max(2.0, x1 - x0), rh - 6), c_method);
        p.fillRect(QRectF(x_rank + bar_w * d->mean_rank / dim - 1, y + 1, 2, rh - 2), text);
        p.drawText(
            QRect(x_rank + bar_w + 4, y, col_w - bar_w - 4, rh), Qt::AlignLeft | Qt::AlignVCenter,
            QStringLiteral("%1\u2013%2 (%3)").arg(d->min_rank).arg(d->max_rank).arg(d->mean_rank, 0, 'f', 1));
    }
}

void LayerSummary::mousePressEvent(QMouseEvent* event) {
    const int row = row_at(event->position().toPoint());
    if (row < 0) return;
    set_layer(row);
    Q_EMIT layer_clicked(row);
}

}  // namespace varrate::viz
