#pragma once
// Shared look of the views: series and marker colours that read on light and dark palettes, colour mixing,
// the rank colour map, and "nice" axis ticks. Private to viz/.
#include <QColor>
#include <QPalette>
#include <QString>

#include <vector>

#include "viz/run_model.h"

namespace varrate::viz {

enum class StyleColour { Method, Reference, Exact, Needle, Floor, Uniform, Grid, Pinned };

bool is_dark(const QPalette& palette);
QColor style_colour(StyleColour which, const QPalette& palette);
// One colour per compression method, so that a method reads the same in every chart that shows several:
// varrate and flat keep the position charts' Method and Reference colours, full is the grey of a reference
// (Uniform); other methods get fixed hues of their own.
QColor method_colour(const QString& method, const QPalette& palette);
// The method the views show first and the one they compare it with (codec/registry.h's colour roles Method
// and Ablation: "varrate" and "flat").
QString featured_method();
QString compared_method();
// Shading hue of a document metric (mixed with the base colour by value).
QColor metric_colour(TokenMetric metric);
// a + t (b - a) per channel, t in [0, 1].
QColor mix(const QColor& a, const QColor& b, double t);
// Text colour readable on `fill` (t: how far fill is from the base colour).
QColor contrast_text(const QColor& fill, const QColor& normal_text, double t);
// Perceptual sequential map (viridis control points), t in [0, 1].
QColor sequential_colour(double t);
// The method the views show when none was chosen: "varrate" when present, else the first.
QString default_method(const RunModel& model);
// Round tick values covering [lo, hi] with about `target` ticks.
std::vector<double> nice_ticks(double lo, double hi, int target);
// A number for an axis label (no trailing zeros, k for thousands on position axes).
QString tick_label(double value, bool positions);

// The app's dark palette (Fusion style).
QPalette dark_palette();

}  // namespace varrate::viz
