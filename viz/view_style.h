#pragma once
// Shared look of the views: series and marker colours that read on light and dark palettes, colour mixing,
// the rank colour map, and "nice" axis ticks. Private to viz/.
#include <QColor>
#include <QPalette>
#include <QString>

#include <vector>

#include "viz/palette.h"
#include "viz/run_model.h"

namespace varrate::viz {

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
