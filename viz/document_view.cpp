// DocumentView: tokens laid out as wrapped text once per width (widths cached per distinct token text), then
// only the visible lines are painted, so a 32k-token document scrolls and hovers without re-layout.
#include "viz/document_view.h"

#include <QEvent>
#include <QFontMetrics>
#include <QHash>
#include <QHelpEvent>
#include <QLinearGradient>
#include <QMouseEvent>
#include <QPainter>
#include <QScrollBar>
#include <QToolTip>

#include <algorithm>
#include <cmath>

#include "viz/view_style.h"

namespace varrate::viz {

namespace {

constexpr int kMargin = 6;  // left/right text margin (the range strip lives in the left one)

// What a token shows in the text: newlines break the line and are drawn as a faint ↵ when alone.
QString display_text(const QString& text) {
    QString out = text;
    out.remove(QLatin1Char('\n'));
    out.remove(QLatin1Char('\r'));
    out.replace(QLatin1Char('\t'), QStringLiteral("    "));
    return out;
}

}  // namespace

DocumentView::DocumentView(RunModel* model, PositionAxis* axis, QWidget* parent)
    : QAbstractScrollArea(parent), model_(model), axis_(axis) {
    viewport()->setMouseTracking(true);
    viewport()->setBackgroundRole(QPalette::Base);
    setMinimumSize(240, 120);
    connect(model_, &RunModel::changed, this, [this] {
        // The text is laid out again only when it changed: a live re-allocation of the same tokens reshades.
        if (model_->tokens_revision() != laid_out_revision_) layout_width_ = -1;
        reload();
    });
    connect(axis_, &PositionAxis::cursor_changed, this, [this](int position) {
        if (position >= 0 && position != hover_) scroll_to_token(position);
        viewport()->update();
    });
    connect(axis_, &PositionAxis::range_changed, this, [this](double begin, double end) {
        // Follow zoom/pan elsewhere: bring the start of the visible range into view.
        if (end - begin < axis_->length()) scroll_to_token(static_cast<int>(begin));
        viewport()->update();
    });
    reload();
}

void DocumentView::set_method(const QString& method) {
    if (method == method_) return;
    method_ = method;
    reload();
}

void DocumentView::set_metric(TokenMetric metric) {
    if (metric == metric_) return;
    metric_ = metric;
    reload();
}

void DocumentView::set_layer(int layer) {
    if (layer == layer_) return;
    layer_ = layer;
    reload();
}

void DocumentView::reload() {
    const QString m = method_.isEmpty() ? default_method(*model_) : method_;
    salience_ = model_->series(m, TokenMetric::Salience, layer_);
    rank_ = model_->series(m, TokenMetric::Rank, layer_);
    error_ = model_->series(m, TokenMetric::RelError, layer_);
    exact_ = model_->exact_mask(m, layer_);
    shade_.clear();
    shade_min_ = 0;
    shade_max_ = 1;
    shade_log_ = false;
    const size_t n = static_cast<size_t>(model_->n_tokens());
    auto linear = [&](const std::vector<float>& v, double max) {
        if (v.size() != n || !(max > 0)) return;
        shade_max_ = max;
        shade_.resize(n);
        for (size_t i = 0; i < n; ++i) shade_[i] = std::clamp(static_cast<float>(v[i] / max), 0.0f, 1.0f);
    };
    switch (metric_) {
        case TokenMetric::Salience: {
            // Attention salience is heavy-tailed (sink tokens): shade on a log scale between the 2nd
            // percentile and the maximum of the positive values.
            if (salience_.size() != n) break;
            std::vector<float> pos;
            for (float v : salience_)
                if (v > 0 && std::isfinite(v)) pos.push_back(v);
            if (pos.empty()) break;
            std::sort(pos.begin(), pos.end());
            const double lo = std::max<double>(pos[pos.size() / 50], pos.back() * 1e-6);
            const double hi = pos.back();
            shade_min_ = lo;
            shade_max_ = hi;
            shade_log_ = true;
            const double span = hi > lo ? std::log(hi / lo) : 1.0;
            shade_.resize(n);
            for (size_t i = 0; i < n; ++i) {
                const double v = salience_[i];
                shade_[i] = v > lo ? static_cast<float>(std::clamp(std::log(v / lo) / span, 0.0, 1.0)) : 0.0f;
            }
            break;
        }
        case TokenMetric::SalienceNorm:
            linear(model_->series(m, TokenMetric::SalienceNorm, layer_), 1.0);
            break;
        case TokenMetric::Rank:
            linear(rank_, model_->joint_dim());
            break;
        case TokenMetric::RelError: {
            float max = 0;
            for (float v : error_) max = std::max(max, v);
            linear(error_, std::min(1.0f, std::max(max, 1e-6f)));
            break;
        }
    }
    relayout();
    viewport()->update();
}

int DocumentView::colour_bar_height() const {
    return 2 * fontMetrics().height() + 10;
}

void DocumentView::relayout() {
    const int n = model_->n_tokens();
    const int width = std::max(40, viewport()->width() - 2 * kMargin);
    const QFontMetrics fm(font());
    line_height_ = fm.height() + 4;
    if (layout_width_ != width || static_cast<int>(boxes_.size()) != n) layout_tokens(width);
    // The scroll range depends on the viewport height too, so it is updated on every resize.
    const int total = lines_.empty() ? 0 : lines_.back().y + line_height_;
    const int page = std::max(1, viewport()->height() - colour_bar_height());
    verticalScrollBar()->setRange(0, std::max(0, total - page + kMargin));
    verticalScrollBar()->setPageStep(page);
    verticalScrollBar()->setSingleStep(line_height_);
}

void DocumentView::layout_tokens(int width) {
    laid_out_revision_ = model_->tokens_revision();
    const int n = model_->n_tokens();
    const QFontMetrics fm(font());
    layout_width_ = width;
    boxes_.assign(static_cast<size_t>(n), QRect());
    lines_.clear();
    QHash<QString, int> widths;  // documents repeat tokens: measure each distinct text once
    const int newline_w = fm.horizontalAdvance(QChar(0x21B5));
    int x = 0, y = 0;
    Line line;
    auto break_line = [&](int next) {
        line.last = next;
        lines_.push_back(line);
        y += line_height_;
        x = 0;
        line = Line{next, next, y};
    };
    for (int i = 0; i < n; ++i) {
        const QString& raw = model_->token_text(i);
        const QString text = display_text(raw);
        int w = newline_w;
        if (!text.isEmpty()) {
            auto it = widths.find(text);
            if (it == widths.end()) it = widths.insert(text, fm.horizontalAdvance(text));
            w = std::max(2, it.value());
        }
        if (x > 0 && x + w > width) break_line(i);
        boxes_[static_cast<size_t>(i)] = QRect(kMargin + x, y, w, line_height_);
        x += w;
        if (raw.contains(QLatin1Char('\n'))) {
            break_line(i + 1);
            if (raw.count(QLatin1Char('\n')) > 1) y += line_height_ / 2;  // paragraph gap
            line.y = y;
        }
    }
    line.last = n;
    if (line.last > line.first) lines_.push_back(line);
}

int DocumentView::line_of(int position) const {
    auto it = std::upper_bound(lines_.begin(), lines_.end(), position,
                               [](int p, const Line& l) { return p < l.first; });
    return it == lines_.begin() ? -1 : static_cast<int>(it - lines_.begin()) - 1;
}

void DocumentView::scroll_to_token(int position) {
    if (position < 0 || position >= static_cast<int>(boxes_.size())) return;
    const QRect r = boxes_[static_cast<size_t>(position)];
    const int top = verticalScrollBar()->value();
    const int page = viewport()->height() - colour_bar_height();
    if (r.top() >= top && r.bottom() <= top + page) return;
    verticalScrollBar()->setValue(std::max(0, r.top() - page / 3));
}

QRect DocumentView::token_rect(int position) const {
    if (position < 0 || position >= static_cast<int>(boxes_.size())) return {};
    return boxes_[static_cast<size_t>(position)].translated(
        0, colour_bar_height() - verticalScrollBar()->value());
}

int DocumentView::token_at(const QPoint& p) const {
    if (lines_.empty() || p.y() < colour_bar_height()) return -1;
    const int y = p.y() - colour_bar_height() + verticalScrollBar()->value();
    auto it = std::upper_bound(lines_.begin(), lines_.end(), y, [](int v, const Line& l) { return v < l.y; });
    if (it == lines_.begin()) return -1;
    const Line& line = *(it - 1);
    if (y >= line.y + line_height_) return -1;
    for (int i = line.first; i < line.last; ++i) {
        const QRect& r = boxes_[static_cast<size_t>(i)];
        if (p.x() >= r.left() && p.x() <= r.right()) return i;
    }
    return -1;
}

QString DocumentView::token_tooltip(int position) const {
    if (position < 0 || position >= model_->n_tokens()) return {};
    const size_t i = static_cast<size_t>(position);
    const QString m = method_.isEmpty() ? default_method(*model_) : method_;
    QStringList lines;
    lines << QStringLiteral("position %1").arg(position);
    lines << QStringLiteral("token \u201C%1\u201D")
                 .arg(visible_whitespace(model_->token_text(position)).toHtmlEscaped());
    lines << QStringLiteral("%1, %2").arg(
        m, layer_ < 0 ? QStringLiteral("mean over layers") : QStringLiteral("layer %1").arg(layer_));
    if (i < salience_.size()) lines << QStringLiteral("salience %1").arg(salience_[i], 0, 'g', 4);
    const bool exact = i < exact_.size() && exact_[i];
    if (i < rank_.size()) {
        const QString state = exact           ? QStringLiteral("exact")
                              : rank_[i] <= 0 ? QStringLiteral("evicted")
                                              : QStringLiteral("coded");
        lines << QStringLiteral("rank %1 / %2 (%3)")
                     .arg(rank_[i], 0, 'g', 4)
                     .arg(model_->joint_dim())
                     .arg(state);
    } else if (i < exact_.size()) {
        lines << (exact ? QStringLiteral("exact") : QStringLiteral("coded"));
    }
    if (i < error_.size()) lines << QStringLiteral("reconstruction error %1").arg(error_[i], 0, 'g', 4);
    if (auto needle = model_->needle_span(); needle && position >= needle->first && position < needle->second)
        lines << QStringLiteral("needle");
    return lines.join(QStringLiteral("<br>"));
}

void DocumentView::paintEvent(QPaintEvent*) {
    QPainter p(viewport());
    const QPalette& pal = palette();
    const QRect area = viewport()->rect();
    p.fillRect(area, pal.color(QPalette::Base));
    const int bar_h = colour_bar_height();
    const QColor accent = metric_colour(metric_);
    const QColor base = pal.color(QPalette::Base);
    const QColor text = pal.color(QPalette::Text);
    const QColor exact_colour = style_colour(StyleColour::Exact, pal);
    const QColor needle_colour = style_colour(StyleColour::Needle, pal);
    const QColor cursor_colour = pal.color(QPalette::Highlight);
    const int scroll = verticalScrollBar()->value();
    const bool zoomed = axis_->length() > 0 && axis_->width() < axis_->length();
    const auto needle = model_->needle_span();
    const int cursor = axis_->cursor();

    // Document: only the lines that intersect the viewport.
    p.save();
    p.setClipRect(QRect(0, bar_h, area.width(), area.height() - bar_h));
    p.translate(0, bar_h - scroll);
    const int y0 = scroll, y1 = scroll + area.height() - bar_h;
    auto first =
        std::upper_bound(lines_.begin(), lines_.end(), y0, [](int v, const Line& l) { return v < l.y; });
    if (first != lines_.begin()) --first;
    const QFontMetrics fm(font());
    const int ascent = fm.ascent() + 2;
    for (auto it = first; it != lines_.end() && it->y < y1; ++it) {
        if (zoomed && it->first < axis_->end() && it->last > axis_->begin())
            p.fillRect(QRect(0, it->y, 3, line_height_), cursor_colour);  // the linked range
        for (int i = it->first; i < it->last; ++i) {
            const size_t k = static_cast<size_t>(i);
            const QRect& r = boxes_[k];
            const float t = k < shade_.size() ? shade_[k] : 0.0f;
            const QColor fill = mix(base, accent, t);
            if (t > 0) p.fillRect(r, fill);
            const QString shown = display_text(model_->token_text(i));
            if (shown.isEmpty()) {
                p.setPen(mix(base, text, 0.35));
                p.drawText(r.left(), r.top() + ascent, QString(QChar(0x21B5)));
            } else {
                p.setPen(contrast_text(fill, text, t));
                p.drawText(r.left(), r.top() + ascent, shown);
            }
            if (k < exact_.size() && exact_[k])
                p.fillRect(QRect(r.left(), r.bottom() - 1, r.width(), 2), exact_colour);
        }
        if (needle && needle->first < it->last && needle->second > it->first) {
            const int a = std::max(needle->first, it->first), b = std::min(needle->second, it->last) - 1;
            const QRect box = boxes_[static_cast<size_t>(a)].united(boxes_[static_cast<size_t>(b)]);
            p.setPen(QPen(needle_colour, 2));
            p.setBrush(Qt::NoBrush);
            p.drawRect(box.adjusted(0, 0, -1, -1));
        }
    }
    if (cursor >= 0 && cursor < static_cast<int>(boxes_.size())) {
        p.setPen(QPen(cursor_colour, 2));
        p.setBrush(Qt::NoBrush);
        p.drawRect(boxes_[static_cast<size_t>(cursor)].adjusted(-1, -1, 0, 0));
    }
    p.restore();

    // Colour bar and legend (fixed at the top).
    p.fillRect(QRect(0, 0, area.width(), bar_h), pal.color(QPalette::Window));
    const QString m = method_.isEmpty() ? default_method(*model_) : method_;
    const QString where =
        layer_ < 0 ? QStringLiteral("mean over layers") : QStringLiteral("layer %1").arg(layer_);
    const int fh = fm.height();
    const QRect bar(kMargin, 4, std::min(260, area.width() / 3), fh - 2);
    p.setPen(pal.color(QPalette::WindowText));
    if (shade_.empty()) {
        p.drawText(QRect(kMargin, 2, area.width() - 2 * kMargin, fh), Qt::AlignLeft | Qt::AlignVCenter,
                   QStringLiteral("no %1 for %2")
                       .arg(metric_name(metric_), m.isEmpty() ? QStringLiteral("this run") : m));
    } else {
        QLinearGradient g(bar.topLeft(), bar.topRight());
        for (int s = 0; s <= 8; ++s) g.setColorAt(s / 8.0, mix(base, accent, s / 8.0));
        p.fillRect(bar, g);
        p.setPen(pal.color(QPalette::Mid));
        p.drawRect(bar.adjusted(0, 0, -1, -1));
        p.setPen(pal.color(QPalette::WindowText));
        auto label = [&](double frac) {
            const double v = shade_log_ ? shade_min_ * std::pow(shade_max_ / shade_min_, frac)
                                        : shade_min_ + frac * (shade_max_ - shade_min_);
            return QString::number(v, 'g', 3);
        };
        const int ly = bar.bottom() + 2;
        p.drawText(QRect(bar.left(), ly, bar.width(), fh), Qt::AlignLeft, label(0));
        p.drawText(QRect(bar.left(), ly, bar.width(), fh), Qt::AlignHCenter, label(0.5));
        p.drawText(QRect(bar.left(), ly, bar.width(), fh), Qt::AlignRight, label(1));
        const QString title =
            QStringLiteral("%1%2 \u2014 %3, %4")
                .arg(metric_name(metric_), shade_log_ ? QStringLiteral(" (log)") : QString(), m, where);
        p.drawText(QRect(bar.right() + 10, 2, area.width() - bar.right() - 10, fh),
                   Qt::AlignLeft | Qt::AlignVCenter, title);
    }
    // Legend: exact underline and needle box.
    int lx = bar.right() + 10;
    const int ly = bar.bottom() + 2;
    p.fillRect(QRect(lx, ly + fh - 4, 18, 2), exact_colour);
    p.drawText(QPoint(lx + 22, ly + fm.ascent()), QStringLiteral("exact (anchor/window)"));
    lx += 22 + fm.horizontalAdvance(QStringLiteral("exact (anchor/window)")) + 14;
    p.setPen(QPen(needle_colour, 2));
    p.drawRect(QRect(lx, ly + 1, 18, fh - 3));
    p.setPen(pal.color(QPalette::WindowText));
    p.drawText(QPoint(lx + 22, ly + fm.ascent()), QStringLiteral("needle"));
    p.setPen(pal.color(QPalette::Mid));
    p.drawLine(0, bar_h - 1, area.width(), bar_h - 1);
}

void DocumentView::resizeEvent(QResizeEvent* event) {
    QAbstractScrollArea::resizeEvent(event);
    relayout();
}

void DocumentView::mouseMoveEvent(QMouseEvent* event) {
    const int pos = token_at(event->position().toPoint());
    hover_ = pos;
    if (pos >= 0) axis_->set_cursor(pos);
    QAbstractScrollArea::mouseMoveEvent(event);
}

void DocumentView::leaveEvent(QEvent* event) {
    hover_ = -1;
    QAbstractScrollArea::leaveEvent(event);
}

bool DocumentView::viewportEvent(QEvent* event) {
    if (event->type() == QEvent::ToolTip) {
        auto* help = static_cast<QHelpEvent*>(event);
        const int pos = token_at(help->pos());
        if (pos >= 0)
            QToolTip::showText(help->globalPos(), token_tooltip(pos), viewport(), token_rect(pos));
        else
            QToolTip::hideText();
        return true;
    }
    return QAbstractScrollArea::viewportEvent(event);
}

void DocumentView::changeEvent(QEvent* event) {
    if (event->type() == QEvent::FontChange || event->type() == QEvent::PaletteChange ||
        event->type() == QEvent::StyleChange) {
        layout_width_ = -1;
        relayout();
        viewport()->update();
    }
    QAbstractScrollArea::changeEvent(event);
}

}  // namespace varrate::viz
