#pragma once
// Plots of an evaluation folder (core/eval.h), shared by the desktop app's Evaluation tab and the CLI's
// DIR/plots/*.png. Qt Gui only (no widgets), so the headless CLI can link it.
//  - Score against the budget kappa at one context length: one panel per task and one for every task pooled,
//    a line per compressing method (x on a log scale through the sweep's budgets, y = mean score 0-100), the
//    reference (`full`) as a horizontal dashed line, and at each point the paired 95 % bootstrap interval of
//    its difference to the reference as a whisker, drawn around the reference's mean (reference +
//    difference): a whisker clear of the dashed line is a difference that counts; such points are filled,
//    others hollow.
//  - A heatmap per task: methods (rows) x budgets (columns), one panel per context length, cells = mean score
//    on the NIAH heatmap's colour scale (niah_colour of score / 100) with the difference to the reference.
#include <QColor>
#include <QFont>
#include <QImage>
#include <QRectF>
#include <QSize>
#include <QString>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>  // core/eval.h declares json members with json_fwd.hpp only

#include "core/suites/eval.h"

class QPainter;

namespace varrate::viz {

// The PNGs' method colours (the app's light theme): varrate blue, flat orange, full grey, snapkv violet,
// others a stable hue from the name.
QColor eval_method_colour(const std::string& method);

struct EvalPlotStyle {
    QFont font, title_font;
    QColor background{0xFF, 0xFF, 0xFF}, ink{0x20, 0x20, 0x20};
    QColor grid{0xE2, 0xE2, 0xE2}, frame{0xA0, 0xA0, 0xA0};
    QColor cell_text{0x20, 0x20, 0x20};  // on the coloured heatmap cells (all scale colours are light)
    QColor missing{0xD8, 0xD8, 0xD8};    // heatmap cells without records
    std::function<QColor(const std::string& method)> method_colour;  // empty: eval_method_colour

    static EvalPlotStyle png();  // DejaVu Sans 11 px, titles 13 px bold
    QColor colour_of(const std::string& method) const;
};

// One panel of the score-vs-kappa plot: the cells of one task (or of every task pooled: task "") at one
// length.
struct EvalScoreLine {
    std::string method;
    std::vector<EvalCell> points;  // ascending budget; only cells with records
};
struct EvalScorePanel {
    std::string task;  // "" = every task pooled (EvalSummary::by_length)
    int64_t length = 0;
    std::vector<EvalScoreLine> lines;   // compressing methods, in the summary's order
    std::optional<EvalCell> reference;  // the reference's cell, when it has records
    std::vector<EvalCell> levels;       // other methods without a budget: horizontal lines too
    QString title() const;              // "niah_single_1  (full 93.3)" / "all tasks  (full 90.0)"
};
// The panels of `length`: one per task of the summary, then the pooled one.
std::vector<EvalScorePanel> eval_score_panels(const EvalSummary& summary, int64_t length);

class EvalScorePainter {
  public:
    // size: the whole plot (the app's widget); empty: fixed panels of 340 x 260 px, up to three per row.
    EvalScorePainter(const EvalSummary& summary, int64_t length, const EvalPlotStyle& style, QSize size = {});

    QSize size() const { return {width_, height_}; }
    const std::vector<EvalScorePanel>& panels() const { return panels_; }
    // Panel i's plot area, and the centre of a method's marker there (null when not drawn).
    QRectF plot_rect(int panel) const;
    QPointF point_position(int panel, const std::string& method, double budget) const;
    void paint(QPainter& p) const;
    QImage render() const;  // paint() into a new image of size()

  private:
    double x_of(double budget, const QRectF& area) const;
    static double y_of(double score, const QRectF& area);
    double dodge(const EvalScorePanel& panel, size_t line) const;

    const EvalSummary& s_;
    int64_t length_ = 0;
    EvalPlotStyle style_;
    std::vector<EvalScorePanel> panels_;
    std::vector<double> budgets_;  // ascending: the x ticks
    double log_lo_ = 0, log_hi_ = 1;
    QString heading_, caption_;
    int per_row_ = 1, rows_ = 1, panel_w_ = 0, panel_h_ = 0, width_ = 0, height_ = 0;
};

class EvalHeatmapPainter {
  public:
    // task "": every task pooled per length (EvalSummary::by_length).
    EvalHeatmapPainter(const EvalSummary& summary, const std::string& task, const EvalPlotStyle& style);

    QSize size() const { return {width_, height_}; }
    // The cell of (method, budget) in the panel of length index l (a method without a budget spans the row).
    QRect cell_rect(int l, const std::string& method, double budget) const;
    void paint(QPainter& p) const;
    QImage render() const;

  private:
    const EvalCell* find(int64_t length, const std::string& method, double budget) const;

    const EvalSummary& s_;
    std::string task_;
    EvalPlotStyle style_;
    std::vector<double> budgets_;
    QString heading_;
    int label_w_ = 0, cw_ = 0, ch_ = 0, per_row_ = 1, rows_ = 1, panel_w_ = 0, panel_h_ = 0;
    int width_ = 0, height_ = 0;
};

}  // namespace varrate::viz
