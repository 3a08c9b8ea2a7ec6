// NiahAccuracyChart: the points are the summary's pooled series (NiahSummary::overall), regrouped by method;
// geometry is computed from the widget size on every call so that paint, tooltips and tests agree.
#include "viz/niah_accuracy_chart.h"

#include <QHelpEvent>
#include <QPainter>
#include <QPainterPath>
#include <QToolTip>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "base/file_io.h"
#include "codec/registry.h"
#include "viz/plot_marks.h"
#include "viz/view_style.h"

namespace varrate::viz {

namespace {

constexpr double kMarker = 3.5;  // marker radius, px
constexpr double kDodge = 5;     // px between the whiskers of two methods at one budget
constexpr double kHit = 8;       // hover distance, px

bool well_formed(const NiahSummary& s) {
    return !s.series.empty() && s.cells.size() == s.series.size() * s.depths.size() * s.lengths.size();
}

bool same_budget(double a, double b) {
    return std::abs(a - b) <= 1e-9 * std::max(1.0, std::abs(b));
}

double accuracy_of(int64_t correct, int64_t n) {
    return static_cast<double>(correct) / static_cast<double>(n);
}

}  // namespace

QString niah_accuracy_csv(const NiahSummary& s) {
    std::string out = "method,budget,correct,n,accuracy,ci_low,ci_high\n";
    if (!well_formed(s)) return QString::fromStdString(out);
    for (size_t i = 0; i < s.series.size(); ++i) {
        const NiahCell all = s.overall(i);
        out += fmt::format("{},{:g},{},{},", all.method, all.budget, all.correct, all.n);
        if (all.n > 0) {
            const Interval ci = all.interval();
            out += fmt::format("{:.6g},{:.6g},{:.6g}\n", all.accuracy(), ci.low, ci.high);
        } else {
            out += ",,\n";
        }
    }
    return QString::fromStdString(out);
}

NiahAccuracyChart::NiahAccuracyChart(QWidget* parent) : QWidget(parent) {
    setAttribute(Qt::WA_OpaquePaintEvent);
}

void NiahAccuracyChart::set_summary(const NiahSummary& summary) {
    summary_ = summary;
    if (!well_formed(summary_)) summary_ = {};  // malformed: show nothing rather than guess
    rebuild();
    update();
}

void NiahAccuracyChart::clear() {
    summary_ = {};
    rebuild();
    update();
}

void NiahAccuracyChart::export_csv(const QString& path) const {
    write_file_atomic(path.toStdString(), niah_accuracy_csv(summary_).toStdString());
}

void NiahAccuracyChart::rebuild() {
    lines_.clear();
    reference_.reset();
    budgets_.clear();
    for (size_t i = 0; i < summary_.series.size(); ++i) {
        const NiahCell all = summary_.overall(i);
        const Point p{all.budget, all.n, all.correct, all.infeasible};
        if (!method_takes_budget(all.method)) {
            if (all.n > 0) reference_ = p;
            continue;
        }
        budgets_.push_back(all.budget);
        if (all.n == 0) continue;  // no records at this budget (yet): no point
        auto it =
            std::find_if(lines_.begin(), lines_.end(), [&](const Line& l) { return l.method == all.method; });
        if (it == lines_.end()) it = lines_.insert(lines_.end(), Line{all.method, {}});
        it->points.push_back(p);
    }
    for (Line& l : lines_)
        std::sort(l.points.begin(), l.points.end(),
                  [](const Point& a, const Point& b) { return a.budget < b.budget; });
    std::sort(budgets_.begin(), budgets_.end());
    budgets_.erase(std::unique(budgets_.begin(), budgets_.end(), same_budget), budgets_.end());
    // Log spacing: sweeps space budgets by factors, and linear spacing would crowd the small ones.
    log_lo_ = std::log(budgets_.empty() ? 0.1 : budgets_.front());
    log_hi_ = std::log(budgets_.empty() ? 1.0 : budgets_.back());
    if (log_hi_ - log_lo_ < 1e-9) log_lo_ -= std::log(2.0), log_hi_ += std::log(2.0);  // one budget: centred
    const double pad = 0.08 * (log_hi_ - log_lo_);
    log_lo_ -= pad;
    log_hi_ += pad;
}

QRectF NiahAccuracyChart::plot_rect() const {
    const QFontMetrics fm(font());
    const double left = fm.height() + fm.horizontalAdvance(QStringLiteral("0.75")) + 14;
    const double top = 2 * fm.height() + 12;  // title and legend rows
    const double bottom = 2 * fm.height() + 12;
    return QRectF(left, top, std::max(10.0, width() - left - 14), std::max(10.0, height() - top - bottom));
}

double NiahAccuracyChart::x_of(double budget, const QRectF& area) const {
    return area.left() + (std::log(budget) - log_lo_) / (log_hi_ - log_lo_) * area.width();
}

double NiahAccuracyChart::y_of(double accuracy, const QRectF& area) const {
    return area.bottom() - std::clamp(accuracy, 0.0, 1.0) * area.height();
}

double NiahAccuracyChart::dodge(size_t i) const {
    return (static_cast<double>(i) - (static_cast<double>(lines_.size()) - 1) / 2) * kDodge;
}

double NiahAccuracyChart::value_at(const QString& method, double kappa) const {
    const std::string m = method.toStdString();
    if (!method_takes_budget(m)) return reference_ ? accuracy_of(reference_->correct, reference_->n) : -1;
    for (const Line& l : lines_)
        if (l.method == m)
            for (const Point& p : l.points)
                if (same_budget(p.budget, kappa)) return accuracy_of(p.correct, p.n);
    return -1;
}

QPointF NiahAccuracyChart::point_position(const QString& method, double kappa) const {
    const QRectF area = plot_rect();
    const std::string m = method.toStdString();
    if (!method_takes_budget(m))
        return reference_
                   ? QPointF(area.center().x(), y_of(accuracy_of(reference_->correct, reference_->n), area))
                   : QPointF();
    for (size_t i = 0; i < lines_.size(); ++i)
        if (lines_[i].method == m)
            for (const Point& p : lines_[i].points)
                if (same_budget(p.budget, kappa))
                    return {x_of(p.budget, area) + dodge(i), y_of(accuracy_of(p.correct, p.n), area)};
    return {};
}

QString NiahAccuracyChart::point_text(const std::string& method, const Point& p) const {
    const Interval ci = wilson_interval(p.correct, p.n);
    QString text = method_takes_budget(method)
                       ? QStringLiteral("%1, κ %2").arg(QString::fromStdString(method)).arg(p.budget)
                       : QStringLiteral("%1 (reference, no compression)").arg(QString::fromStdString(method));
    text += QStringLiteral(": %1 % (95 % interval %2-%3 %), %4 of n = %5 correct")
                .arg(100.0 * accuracy_of(p.correct, p.n), 0, 'f', 1)
                .arg(100.0 * ci.low, 0, 'f', 1)
                .arg(100.0 * ci.high, 0, 'f', 1)
                .arg(p.correct)
                .arg(p.n);
    if (p.infeasible > 0)
        text +=
            QStringLiteral(" (%1 infeasible: the budget cannot be met at some lengths)").arg(p.infeasible);
    return text;
}

QString NiahAccuracyChart::tooltip_at(const QPointF& pos) const {
    const QRectF area = plot_rect();
    double best = kHit;
    QString text;
    for (size_t i = 0; i < lines_.size(); ++i)
        for (const Point& p : lines_[i].points) {
            const double x = x_of(p.budget, area) + dodge(i);
            const Interval ci = wilson_interval(p.correct, p.n);
            // The marker, or anywhere on its whisker.
            const double dy = std::max({0.0, y_of(ci.high, area) - pos.y(), pos.y() - y_of(ci.low, area)});
            const double d = std::hypot(pos.x() - x, dy);
            if (d < best) best = d, text = point_text(lines_[i].method, p);
        }
    if (text.isEmpty() && reference_ && area.adjusted(0, -kHit, 0, kHit).contains(pos) &&
        std::abs(pos.y() - y_of(accuracy_of(reference_->correct, reference_->n), area)) < kHit / 2)
        text = point_text(reference_method_name(), *reference_);
    return text;
}

bool NiahAccuracyChart::event(QEvent* event) {
    if (event->type() == QEvent::ToolTip) {
        auto* help = static_cast<QHelpEvent*>(event);
        const QString text = tooltip_at(help->pos());
        if (text.isEmpty())
            QToolTip::hideText();
        else
            QToolTip::showText(help->globalPos(), text, this);
        return true;
    }
    return QWidget::event(event);
}

void NiahAccuracyChart::paintEvent(QPaintEvent*) {
    QPainter p(this);
    const QPalette& pal = palette();
    const QFontMetrics fm(font());
    const QColor text = pal.color(QPalette::WindowText), base = pal.color(QPalette::Base);
    const QColor grid = style_colour(StyleColour::Grid, pal);
    p.fillRect(rect(), base);
    const QRectF area = plot_rect();
    p.setPen(text);
    p.drawText(QPointF(area.left(), fm.ascent() + 2),
               QStringLiteral("NIAH accuracy vs budget κ \u2014 every cell pooled, 95 % Wilson intervals"));
    if (lines_.empty() && !reference_) {
        p.setPen(pal.color(QPalette::Mid));
        p.drawRect(area);
        p.setPen(text);
        p.drawText(area, Qt::AlignCenter, QStringLiteral("no NIAH results yet"));
        return;
    }

    // Legend: one entry per method line, then the reference.
    double lx = area.left();
    const double ly = fm.height() + 6 + fm.height() / 2.0;
    auto legend = [&](const QString& name, const QColor& c, Qt::PenStyle style, bool marker) {
        p.setRenderHint(QPainter::Antialiasing, true);
        p.setPen(QPen(c, 2, style));
        p.drawLine(QPointF(lx, ly), QPointF(lx + 18, ly));
        if (marker) {
            p.setBrush(c);
            p.drawEllipse(QPointF(lx + 9, ly), kMarker, kMarker);
            p.setBrush(Qt::NoBrush);
        }
        p.setRenderHint(QPainter::Antialiasing, false);
        p.setPen(text);
        p.drawText(QPointF(lx + 22, ly - fm.height() / 2.0 + fm.ascent()), name);
        lx += 22 + fm.horizontalAdvance(name) + 14;
    };
    for (const Line& l : lines_) {
        const QString name = QString::fromStdString(l.method);
        legend(name, method_colour(name, pal), Qt::SolidLine, true);
    }
    if (reference_)
        legend(QStringLiteral("full (reference)"),
               method_colour(QString::fromStdString(reference_method_name()), pal), Qt::DashLine, false);

    // Axes: y 0..1, x ticks at the sweep's budgets (labels that would overlap are left out).
    for (double v : nice_ticks(0, 1, std::max(2, static_cast<int>(area.height() / (fm.height() * 2))))) {
        const double y = y_of(v, area);
        p.setPen(grid);
        p.drawLine(QPointF(area.left(), y), QPointF(area.right(), y));
        p.setPen(text);
        p.drawText(QRectF(fm.height(), y - fm.height() / 2.0, area.left() - fm.height() - 4, fm.height()),
                   Qt::AlignRight | Qt::AlignVCenter, tick_label(v, false));
    }
    double label_end = -1e9;
    for (double b : budgets_) {
        const double x = x_of(b, area);
        p.setPen(grid);
        p.drawLine(QPointF(x, area.top()), QPointF(x, area.bottom()));
        const QString label = QString::number(b, 'g', 4);
        const double w = fm.horizontalAdvance(label);
        if (x - w / 2 < label_end + 6) continue;
        label_end = x + w / 2;
        p.setPen(text);
        p.drawText(QRectF(x - w / 2 - 2, area.bottom() + 4, w + 4, fm.height()), Qt::AlignCenter, label);
    }
    p.drawText(QRectF(area.left(), area.bottom() + fm.height() + 6, area.width(), fm.height()),
               Qt::AlignCenter, QStringLiteral("budget κ (log scale)"));
    p.save();
    p.translate(fm.height() / 2.0 + 2, area.center().y());
    p.rotate(-90);
    p.drawText(QRectF(-area.height() / 2, -fm.height() / 2.0, area.height(), fm.height()), Qt::AlignCenter,
               QStringLiteral("accuracy"));
    p.restore();
    p.setPen(pal.color(QPalette::Mid));
    p.drawRect(area);

    p.save();
    p.setClipRect(area.adjusted(-kMarker - 1, -kMarker - 1, kMarker + 1, kMarker + 1));
    p.setRenderHint(QPainter::Antialiasing, true);
    if (reference_) {
        const QColor c = method_colour(QString::fromStdString(reference_method_name()), pal);
        const Interval ci = wilson_interval(reference_->correct, reference_->n);
        QColor band = c;
        band.setAlpha(40);
        p.fillRect(
            QRectF(QPointF(area.left(), y_of(ci.high, area)), QPointF(area.right(), y_of(ci.low, area))),
            band);
        p.setPen(QPen(c, 1.5, Qt::DashLine));
        const double y = y_of(accuracy_of(reference_->correct, reference_->n), area);
        p.drawLine(QPointF(area.left(), y), QPointF(area.right(), y));
    }
    // Whiskers and lines first, markers last, so that no line runs over a marker's centre.
    for (size_t i = 0; i < lines_.size(); ++i) {
        const QColor c = method_colour(QString::fromStdString(lines_[i].method), pal);
        BudgetLine line(budgets_);
        for (const Point& pt : lines_[i].points) {
            const double x = x_of(pt.budget, area) + dodge(i), y = y_of(accuracy_of(pt.correct, pt.n), area);
            const Interval ci = wilson_interval(pt.correct, pt.n);
            p.setPen(QPen(c, 1));
            paint_whisker(p, x, y_of(ci.low, area), y_of(ci.high, area));
            line.add(pt.budget, x, y);
        }
        p.setPen(QPen(c, 1.5));
        p.drawPath(line.path());
    }
    for (size_t i = 0; i < lines_.size(); ++i) {
        const QColor c = method_colour(QString::fromStdString(lines_[i].method), pal);
        p.setPen(QPen(base, 1));
        p.setBrush(c);
        for (const Point& pt : lines_[i].points)
            p.drawEllipse(
                QPointF(x_of(pt.budget, area) + dodge(i), y_of(accuracy_of(pt.correct, pt.n), area)), kMarker,
                kMarker);
        p.setBrush(Qt::NoBrush);
    }
    p.restore();
}

}  // namespace varrate::viz
