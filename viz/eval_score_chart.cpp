#include "viz/eval_score_chart.h"

#include <QPainter>

#include <algorithm>

#include "viz/eval_plot_paint.h"
#include "viz/view_style.h"

namespace varrate::viz {

EvalScoreChart::EvalScoreChart(QWidget* parent) : QWidget(parent) {
    setAttribute(Qt::WA_OpaquePaintEvent);
}

void EvalScoreChart::set_summary(std::shared_ptr<const EvalSummary> summary, int64_t length) {
    summary_ = std::move(summary);
    length_ = 0;
    if (summary_ && !summary_->lengths.empty()) {
        const auto& ls = summary_->lengths;
        length_ = std::find(ls.begin(), ls.end(), length) != ls.end() ? length : ls.front();
    }
    update();
}

void EvalScoreChart::set_length(int64_t length) {
    if (!summary_) return;
    const auto& ls = summary_->lengths;
    if (std::find(ls.begin(), ls.end(), length) == ls.end()) return;
    length_ = length;
    update();
}

void EvalScoreChart::clear() {
    summary_.reset();
    length_ = 0;
    update();
}

EvalPlotStyle EvalScoreChart::style() const {
    const QPalette pal = palette();
    EvalPlotStyle st;
    st.font = font();
    st.title_font = font();
    st.title_font.setBold(true);
    st.background = pal.color(QPalette::Base);
    st.ink = pal.color(QPalette::WindowText);
    st.grid = style_colour(StyleColour::Grid, pal);
    st.frame = pal.color(QPalette::Mid);
    st.missing = pal.color(QPalette::Mid);
    st.method_colour = [pal](const std::string& m) { return method_colour(QString::fromStdString(m), pal); };
    return st;
}

QStringList EvalScoreChart::series() const {
    if (!summary_) return {};
    const std::vector<EvalScorePanel> panels = eval_score_panels(*summary_, length_);
    QStringList out;
    for (const std::string& m : summary_->methods) {
        const bool drawn = std::any_of(panels.begin(), panels.end(), [&](const EvalScorePanel& p) {
            return (p.reference && p.reference->method == m) ||
                   std::any_of(p.lines.begin(), p.lines.end(),
                               [&](const EvalScoreLine& l) { return l.method == m; }) ||
                   std::any_of(p.levels.begin(), p.levels.end(),
                               [&](const EvalCell& c) { return c.method == m; });
        });
        if (drawn) out << QString::fromStdString(m);
    }
    return out;
}

int EvalScoreChart::panel_count() const {
    return summary_ ? static_cast<int>(eval_score_panels(*summary_, length_).size()) : 0;
}

QPointF EvalScoreChart::point_position(int panel, const QString& method, double budget) const {
    if (!summary_) return {};
    return EvalScorePainter(*summary_, length_, style(), size())
        .point_position(panel, method.toStdString(), budget);
}

void EvalScoreChart::paintEvent(QPaintEvent*) {
    QPainter p(this);
    if (!summary_ || summary_->lengths.empty()) {
        const QPalette& pal = palette();
        p.fillRect(rect(), pal.color(QPalette::Base));
        p.setPen(pal.color(QPalette::WindowText));
        p.drawText(rect(), Qt::AlignCenter, QStringLiteral("Open an evaluation folder (varrate eval --out)"));
        return;
    }
    EvalScorePainter(*summary_, length_, style(), size()).paint(p);
}

}  // namespace varrate::viz
