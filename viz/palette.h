#pragma once
// The palette roles of the views and one colour per compression method (by its registry colour role), on
// light and dark palettes. Qt Gui only: the app's views and the CLI's PNG painters share it.
#include <QColor>
#include <QPalette>
#include <QString>

namespace varrate::viz {

enum class StyleColour { Method, Reference, Exact, Needle, Floor, Uniform, Grid, Pinned };

bool is_dark(const QPalette& palette);
QColor style_colour(StyleColour which, const QPalette& palette);
// One colour per compression method, so that a method reads the same in every chart that shows several:
// varrate and flat keep the position charts' Method and Reference colours, full is the grey of a reference
// (Uniform), SnapKV the eviction violet; other methods get a stable hue from their name.
QColor method_colour(const QString& method, const QPalette& palette);
// The method the views show first and the one they compare it with (codec/registry.h's colour roles Method
// and Ablation: "varrate" and "flat").
QString featured_method();
QString compared_method();

}  // namespace varrate::viz
