// EvalScorePainter and EvalHeatmapPainter: geometry computed once in the constructors, so that the app's
// widget and the tests ask for the same rectangles the PNGs are painted with.
#include "viz/eval_plot_paint.h"

#include <QFontMetrics>
#include <QPainter>
#include <QPainterPath>

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "codec/registry.h"
#include "core/suites/niah_record.h"
#include "viz/niah_heatmap_paint.h"
#include "viz/palette.h"
#include "viz/plot_marks.h"

namespace varrate::viz {

namespace {

constexpr int kMargin = 12, kHeader = 44, kLegend = 24, kMaxPerRow = 3;
constexpr int kPanelW = 340, kPanelH = 260, kMinPanelW = 260, kMinPanelH = 150;
// Inside a score panel: title row, axis labels.
constexpr int kPanelTop = 24, kPanelLeft = 44, kPanelBottom = 36, kPanelRight = 12;
constexpr double kMarker = 3.5, kDodge = 5;

QString qs(const std::string& s) {
    return QString::fromStdString(s);
}

std::vector<double> sorted_budgets(const std::vector<double>& in) {
    std::vector<double> b = in;
    std::sort(b.begin(), b.end());
    b.erase(std::unique(b.begin(), b.end(), same_budget), b.end());
    return b;
}

// The cells of one task at one length (task "": the pooled ones).
std::vector<const EvalCell*> cells_of(const EvalSummary& s, const std::string& task, int64_t length) {
    std::vector<const EvalCell*> out;
    for (const EvalCell& c : task.empty() ? s.by_length : s.cells)
        if (c.length == length && (task.empty() || c.task == task)) out.push_back(&c);
    return out;
}

QString task_label(const std::string& task) {
    return task.empty() ? QStringLiteral("all tasks") : qs(task);
}

}  // namespace

QColor eval_method_colour(const std::string& method) {
    QPalette light;  // the app's colours on a light background (the exported plots' white)
    light.setColor(QPalette::Window, Qt::white);
    return method_colour(qs(method), light);
}

EvalPlotStyle EvalPlotStyle::png() {
    EvalPlotStyle s;
    s.font = QFont("DejaVu Sans");
    s.font.setPixelSize(11);
    s.title_font = s.font;
    s.title_font.setPixelSize(13);
    s.title_font.setBold(true);
    return s;
}

QColor EvalPlotStyle::colour_of(const std::string& method) const {
    return method_colour ? method_colour(method) : eval_method_colour(method);
}

QString EvalScorePanel::title() const {
    QString t = task_label(task);
    if (reference)
        t += QStringLiteral("  (%1 %2)").arg(qs(reference->method)).arg(reference->mean, 0, 'f', 1);
    return t;
}

std::vector<EvalScorePanel> eval_score_panels(const EvalSummary& s, int64_t length) {
    std::vector<std::string> tasks = s.tasks;
    tasks.push_back("");
    std::vector<EvalScorePanel> out;
    for (const std::string& task : tasks) {
        EvalScorePanel panel;
        panel.task = task;
        panel.length = length;
        bool reference_seen = false;
        for (const EvalCell* c : cells_of(s, task, length)) {
            // The reference series is the first one of the reference method (summarize_eval's).
            if (!reference_seen && c->method == s.reference) {
                reference_seen = true;
                if (c->n > 0) panel.reference = *c;
                continue;
            }
            if (c->n == 0) continue;
            if (!method_takes_budget(c->method)) {
                panel.levels.push_back(*c);
                continue;
            }
            auto it = std::find_if(panel.lines.begin(), panel.lines.end(),
                                   [&](const EvalScoreLine& l) { return l.method == c->method; });
            if (it == panel.lines.end())
                it = panel.lines.insert(panel.lines.end(), EvalScoreLine{c->method, {}});
            it->points.push_back(*c);
        }
        for (EvalScoreLine& l : panel.lines)
            std::sort(l.points.begin(), l.points.end(),
                      [](const EvalCell& a, const EvalCell& b) { return a.budget < b.budget; });
        out.push_back(std::move(panel));
    }
    return out;
}

// ---- score against kappa ----

EvalScorePainter::EvalScorePainter(const EvalSummary& s, int64_t length, const EvalPlotStyle& style,
                                   QSize size)
    : s_(s), length_(length), style_(style) {
    panels_ = eval_score_panels(s, length);
    budgets_ = sorted_budgets(s.budgets);
    log_lo_ = std::log(budgets_.empty() ? 0.1 : budgets_.front());
    log_hi_ = std::log(budgets_.empty() ? 1.0 : budgets_.back());
    if (log_hi_ - log_lo_ < 1e-9) log_lo_ -= std::log(2.0), log_hi_ += std::log(2.0);  // one budget: centred
    const double pad = 0.08 * (log_hi_ - log_lo_);
    log_lo_ -= pad;
    log_hi_ += pad;

    heading_ =
        qs(fmt::format("Mean score vs budget \u03BA at {} tokens - {}, {}, {} sample{} per task", length,
                       s.model.empty() ? "model" : s.model, s.mode, s.samples, s.samples == 1 ? "" : "s"));
    caption_ = qs(fmt::format(
        "whiskers: {0}'s mean + the paired 95 % bootstrap interval of the difference to {0}; filled: it "
        "excludes 0",
        s.reference));
    const int n = std::max<int>(1, static_cast<int>(panels_.size()));
    if (size.isEmpty()) {
        per_row_ = std::min(n, kMaxPerRow);
        rows_ = (n + per_row_ - 1) / per_row_;
        panel_w_ = kPanelW;
        panel_h_ = kPanelH;
        width_ = 2 * kMargin + per_row_ * panel_w_;
        width_ = std::max(width_, 2 * kMargin + QFontMetrics(style_.font).horizontalAdvance(caption_) + 8);
        height_ = kHeader + kLegend + rows_ * panel_h_ + kMargin;
    } else {
        width_ = size.width();
        height_ = size.height();
        per_row_ = std::clamp((width_ - 2 * kMargin) / kMinPanelW, 1, n);
        rows_ = (n + per_row_ - 1) / per_row_;
        // Fewer columns would leave panels too flat: prefer more per row then.
        while (per_row_ < n && (height_ - kHeader - kLegend - kMargin) / rows_ < kMinPanelH) {
            ++per_row_;
            rows_ = (n + per_row_ - 1) / per_row_;
        }
        panel_w_ = std::max(120, (width_ - 2 * kMargin) / per_row_);
        panel_h_ = std::max(100, (height_ - kHeader - kLegend - kMargin) / rows_);
    }
}

QRectF EvalScorePainter::plot_rect(int i) const {
    if (i < 0 || i >= static_cast<int>(panels_.size())) return {};
    const double x0 = kMargin + (i % per_row_) * panel_w_, y0 = kHeader + kLegend + (i / per_row_) * panel_h_;
    return QRectF(x0 + kPanelLeft, y0 + kPanelTop, std::max(10, panel_w_ - kPanelLeft - kPanelRight),
                  std::max(10, panel_h_ - kPanelTop - kPanelBottom));
}

double EvalScorePainter::x_of(double budget, const QRectF& area) const {
    return area.left() + (std::log(budget) - log_lo_) / (log_hi_ - log_lo_) * area.width();
}

double EvalScorePainter::y_of(double score, const QRectF& area) {
    return area.bottom() - std::clamp(score, 0.0, 100.0) / 100.0 * area.height();
}

double EvalScorePainter::dodge(const EvalScorePanel& panel, size_t line) const {
    return (static_cast<double>(line) - (static_cast<double>(panel.lines.size()) - 1) / 2) * kDodge;
}

QPointF EvalScorePainter::point_position(int i, const std::string& method, double budget) const {
    if (i < 0 || i >= static_cast<int>(panels_.size())) return {};
    const EvalScorePanel& panel = panels_[static_cast<size_t>(i)];
    const QRectF area = plot_rect(i);
    for (size_t k = 0; k < panel.lines.size(); ++k)
        if (panel.lines[k].method == method)
            for (const EvalCell& c : panel.lines[k].points)
                if (same_budget(c.budget, budget))
                    return {x_of(c.budget, area) + dodge(panel, k), y_of(c.mean, area)};
    return {};
}

void EvalScorePainter::paint(QPainter& p) const {
    const EvalPlotStyle& st = style_;
    const QFontMetrics fm(st.font);
    p.fillRect(QRect(0, 0, width_, height_), st.background);
    p.setRenderHint(QPainter::TextAntialiasing, true);
    p.setPen(st.ink);
    p.setFont(st.title_font);
    p.drawText(QRect(kMargin, 4, width_ - 2 * kMargin, 20), Qt::AlignLeft | Qt::AlignVCenter,
               QFontMetrics(st.title_font).elidedText(heading_, Qt::ElideRight, width_ - 2 * kMargin));
    p.setFont(st.font);
    p.drawText(QRect(kMargin, 24, width_ - 2 * kMargin, 18), Qt::AlignLeft | Qt::AlignVCenter,
               fm.elidedText(caption_, Qt::ElideRight, width_ - 2 * kMargin));

    // Legend: every method of the summary, the reference dashed.
    double lx = kMargin;
    const double ly = kHeader + kLegend / 2.0;
    for (const std::string& m : s_.methods) {
        const QColor c = st.colour_of(m);
        const bool level = m == s_.reference || !method_takes_budget(m);
        p.setRenderHint(QPainter::Antialiasing, true);
        p.setPen(QPen(c, 2, level ? Qt::DashLine : Qt::SolidLine));
        p.drawLine(QPointF(lx, ly), QPointF(lx + 18, ly));
        if (!level) {
            p.setBrush(c);
            p.drawEllipse(QPointF(lx + 9, ly), kMarker, kMarker);
            p.setBrush(Qt::NoBrush);
        }
        p.setRenderHint(QPainter::Antialiasing, false);
        p.setPen(st.ink);
        const QString name = m == s_.reference ? qs(m + " (reference)") : qs(m);
        p.drawText(QPointF(lx + 22, ly - fm.height() / 2.0 + fm.ascent()), name);
        lx += 22 + fm.horizontalAdvance(name) + 14;
    }

    for (int i = 0; i < static_cast<int>(panels_.size()); ++i) {
        const EvalScorePanel& panel = panels_[static_cast<size_t>(i)];
        const QRectF area = plot_rect(i);
        p.setRenderHint(QPainter::Antialiasing, false);
        p.setPen(st.ink);
        p.setFont(st.title_font);
        p.drawText(QRectF(area.left(), area.top() - kPanelTop, area.width(), kPanelTop - 4),
                   Qt::AlignLeft | Qt::AlignVCenter,
                   QFontMetrics(st.title_font).elidedText(panel.title(), Qt::ElideRight, int(area.width())));
        p.setFont(st.font);
        for (int v = 0; v <= 100; v += 25) {
            const double y = y_of(v, area);
            p.setPen(st.grid);
            p.drawLine(QPointF(area.left(), y), QPointF(area.right(), y));
            p.setPen(st.ink);
            p.drawText(QRectF(area.left() - kPanelLeft, y - fm.height() / 2.0, kPanelLeft - 6, fm.height()),
                       Qt::AlignRight | Qt::AlignVCenter, QString::number(v));
        }
        double label_end = -1e9;
        for (double b : budgets_) {
            const double x = x_of(b, area);
            p.setPen(st.grid);
            p.drawLine(QPointF(x, area.top()), QPointF(x, area.bottom()));
            const QString label = QString::number(b, 'g', 4);
            const double w = fm.horizontalAdvance(label);
            if (x - w / 2 < label_end + 6) continue;  // labels that would overlap are left out
            label_end = x + w / 2;
            p.setPen(st.ink);
            p.drawText(QRectF(x - w / 2 - 2, area.bottom() + 3, w + 4, fm.height()), Qt::AlignCenter, label);
        }
        p.setPen(st.ink);
        p.drawText(QRectF(area.left(), area.bottom() + fm.height() + 4, area.width(), fm.height()),
                   Qt::AlignCenter, QStringLiteral("budget \u03BA (log scale)"));
        p.setPen(st.frame);
        p.drawRect(area);
        const bool empty = panel.lines.empty() && !panel.reference && panel.levels.empty();
        if (empty) {
            p.setPen(st.ink);
            p.drawText(area, Qt::AlignCenter, QStringLiteral("no records"));
            continue;
        }

        p.save();
        p.setClipRect(area.adjusted(-kMarker - 1, -kMarker - 1, kMarker + 1, kMarker + 1));
        p.setRenderHint(QPainter::Antialiasing, true);
        auto level_line = [&](const EvalCell& c, Qt::PenStyle style) {
            p.setPen(QPen(st.colour_of(c.method), 1.5, style));
            const double y = y_of(c.mean, area);
            p.drawLine(QPointF(area.left(), y), QPointF(area.right(), y));
        };
        if (panel.reference) level_line(*panel.reference, Qt::DashLine);
        for (const EvalCell& c : panel.levels) level_line(c, Qt::DotLine);
        const double ref_mean = panel.reference ? panel.reference->mean : 0;
        // Whiskers and lines first, markers last.
        for (size_t k = 0; k < panel.lines.size(); ++k) {
            const QColor c = st.colour_of(panel.lines[k].method);
            BudgetLine line(budgets_);
            for (const EvalCell& pt : panel.lines[k].points) {
                const double x = x_of(pt.budget, area) + dodge(panel, k), y = y_of(pt.mean, area);
                const PairedComparison& d = pt.vs_reference;
                if (panel.reference && d.n > 0) {
                    p.setPen(QPen(c, 1));
                    paint_whisker(p, x, y_of(ref_mean + d.interval.low, area),
                                  y_of(ref_mean + d.interval.high, area));
                }
                line.add(pt.budget, x, y);
            }
            p.setPen(QPen(c, 1.5));
            p.setBrush(Qt::NoBrush);
            p.drawPath(line.path());
        }
        for (size_t k = 0; k < panel.lines.size(); ++k) {
            const QColor c = st.colour_of(panel.lines[k].method);
            for (const EvalCell& pt : panel.lines[k].points) {
                p.setPen(QPen(c, 1.5));
                p.setBrush(pt.vs_reference.significant() ? QBrush(c) : QBrush(st.background));
                p.drawEllipse(QPointF(x_of(pt.budget, area) + dodge(panel, k), y_of(pt.mean, area)), kMarker,
                              kMarker);
            }
        }
        p.setBrush(Qt::NoBrush);
        p.restore();
    }
}

QImage EvalScorePainter::render() const {
    QImage img(width_, height_, QImage::Format_RGB32);
    img.fill(style_.background);
    QPainter p(&img);
    paint(p);
    p.end();
    return img;
}

// ---- heatmap: method x budget ----

namespace {
constexpr int kHmTop = 30, kHmBottom = 40, kHmGap = 24, kBarW = 90;
}  // namespace

EvalHeatmapPainter::EvalHeatmapPainter(const EvalSummary& s, const std::string& task,
                                       const EvalPlotStyle& style)
    : s_(s), task_(task), style_(style) {
    budgets_ = sorted_budgets(s.budgets);
    const QFontMetrics fm(style_.font), tfm(style_.title_font);
    label_w_ = 40;
    for (const std::string& m : s.methods) label_w_ = std::max(label_w_, fm.horizontalAdvance(qs(m)) + 14);
    cw_ = std::max(64, fm.horizontalAdvance(QStringLiteral("+100.0*")) + 12);
    ch_ = std::max(34, 2 * fm.height() + 8);
    const int n_panels = std::max<int>(1, static_cast<int>(s.lengths.size()));
    per_row_ = std::min(n_panels, kMaxPerRow);
    rows_ = (n_panels + per_row_ - 1) / per_row_;
    const int cols = std::max<int>(1, static_cast<int>(budgets_.size()));
    const int title_w = tfm.horizontalAdvance(QStringLiteral("length 000000 tokens"));
    cw_ = std::max(cw_, (title_w + cols - 1) / cols);
    panel_w_ = label_w_ + cw_ * cols + kHmGap;
    panel_h_ = kHmTop + ch_ * static_cast<int>(s.methods.size()) + kHmBottom;
    heading_ = qs(fmt::format(
        "Mean score (0-100) by method and budget - {}, {}, {}; below: difference to {} (* its 95 % interval "
        "excludes 0)",
        task.empty() ? "all tasks" : task, s.model.empty() ? "model" : s.model, s.mode, s.reference));
    width_ = std::max(kMargin + per_row_ * panel_w_ + kBarW + kMargin,
                      2 * kMargin + tfm.horizontalAdvance(heading_) + 8);
    height_ = kHeader + rows_ * panel_h_ + kMargin;
}

const EvalCell* EvalHeatmapPainter::find(int64_t length, const std::string& method, double budget) const {
    for (const EvalCell* c : cells_of(s_, task_, length))
        if (c->method == method && (!method_takes_budget(method) || same_budget(c->budget, budget))) return c;
    return nullptr;
}

QRect EvalHeatmapPainter::cell_rect(int l, const std::string& method, double budget) const {
    const auto m = std::find(s_.methods.begin(), s_.methods.end(), method);
    if (l < 0 || l >= static_cast<int>(s_.lengths.size()) || m == s_.methods.end()) return {};
    const int row = static_cast<int>(m - s_.methods.begin());
    const int x0 = kMargin + (l % per_row_) * panel_w_ + label_w_;
    const int y0 = kHeader + (l / per_row_) * panel_h_ + kHmTop + row * ch_;
    const int cols = static_cast<int>(budgets_.size());
    if (!method_takes_budget(method)) return QRect(x0, y0, cw_ * std::max(1, cols), ch_);
    for (int b = 0; b < cols; ++b)
        if (same_budget(budgets_[static_cast<size_t>(b)], budget)) return QRect(x0 + b * cw_, y0, cw_, ch_);
    return {};
}

void EvalHeatmapPainter::paint(QPainter& p) const {
    const EvalPlotStyle& st = style_;
    p.fillRect(QRect(0, 0, width_, height_), st.background);
    p.setRenderHint(QPainter::TextAntialiasing, true);
    p.setPen(st.ink);
    p.setFont(st.title_font);
    p.drawText(QRect(kMargin, 0, width_ - 2 * kMargin, kHeader), Qt::AlignLeft | Qt::AlignVCenter, heading_);
    const int cols = static_cast<int>(budgets_.size());
    for (int l = 0; l < static_cast<int>(s_.lengths.size()); ++l) {
        const int64_t length = s_.lengths[static_cast<size_t>(l)];
        const int x0 = kMargin + (l % per_row_) * panel_w_, y0 = kHeader + (l / per_row_) * panel_h_;
        p.setPen(st.ink);
        p.setFont(st.title_font);
        p.drawText(QRect(x0 + label_w_, y0, cw_ * std::max(1, cols), kHmTop),
                   Qt::AlignLeft | Qt::AlignVCenter, qs(fmt::format("length {} tokens", length)));
        p.setFont(st.font);
        for (size_t m = 0; m < s_.methods.size(); ++m) {
            const std::string& method = s_.methods[m];
            const bool spans = !method_takes_budget(method);
            p.setPen(st.ink);
            p.drawText(QRect(x0, y0 + kHmTop + static_cast<int>(m) * ch_, label_w_ - 8, ch_),
                       Qt::AlignRight | Qt::AlignVCenter, qs(method));
            for (int b = 0; b < (spans ? 1 : cols); ++b) {
                const double budget = spans ? 1.0 : budgets_[static_cast<size_t>(b)];
                const QRect cell = cell_rect(l, method, budget);
                const EvalCell* c = find(length, method, budget);
                const bool has = c && c->n > 0;
                p.fillRect(cell, has ? niah_colour(c->mean / 100.0) : st.missing);
                p.setPen(st.background);
                p.drawRect(cell.adjusted(0, 0, -1, -1));
                p.setPen(has ? st.cell_text : st.ink);
                QString text = !has ? (c && c->infeasible > 0 ? QStringLiteral("n/a") : QStringLiteral("-"))
                                    : QString::number(c->mean, 'f', 1);
                if (has && c->vs_reference.n > 0)
                    text += qs(fmt::format("\n{:+.1f}{}", c->vs_reference.mean_difference,
                                           c->vs_reference.significant() ? "*" : ""));
                p.drawText(cell, Qt::AlignCenter, text);
            }
        }
        for (int b = 0; b < cols; ++b)
            p.drawText(QRect(x0 + label_w_ + b * cw_,
                             y0 + kHmTop + static_cast<int>(s_.methods.size()) * ch_ + 2, cw_, 16),
                       Qt::AlignHCenter | Qt::AlignTop,
                       QString::number(budgets_[static_cast<size_t>(b)], 'g', 4));
        p.drawText(QRect(x0 + label_w_, y0 + kHmTop + static_cast<int>(s_.methods.size()) * ch_ + 20,
                         cw_ * std::max(1, cols), 16),
                   Qt::AlignHCenter | Qt::AlignTop, QStringLiteral("budget \u03BA"));
    }
    // Colour bar: the fixed 0-100 scale.
    paint_colour_bar(p, kMargin + per_row_ * panel_w_ + 10, kHeader + kHmTop,
                     std::max(60, ch_ * static_cast<int>(s_.methods.size())), {"100", "50", "0"}, "score",
                     st.ink, st.font);
}

QImage EvalHeatmapPainter::render() const {
    QImage img(width_, height_, QImage::Format_RGB32);
    img.fill(style_.background);
    QPainter p(&img);
    paint(p);
    p.end();
    return img;
}

}  // namespace varrate::viz
