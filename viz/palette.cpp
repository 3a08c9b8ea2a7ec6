// Colours of the views that need only Qt Gui (shared with the CLI's PNG painters).
#include "viz/palette.h"

#include "codec/registry.h"

namespace varrate::viz {

bool is_dark(const QPalette& palette) {
    return palette.color(QPalette::Window).lightness() < 128;
}

QColor style_colour(StyleColour which, const QPalette& palette) {
    const bool dark = is_dark(palette);
    switch (which) {
        case StyleColour::Method:
            return dark ? QColor(0x5D, 0xAD, 0xFF) : QColor(0x1F, 0x6F, 0xD1);
        case StyleColour::Reference:
            return dark ? QColor(0xFF, 0xA6, 0x4D) : QColor(0xD9, 0x6C, 0x06);
        case StyleColour::Exact:
            return dark ? QColor(0x2E, 0xE6, 0xB0) : QColor(0x0A, 0x9E, 0x74);
        case StyleColour::Needle:
            return dark ? QColor(0xFF, 0x5C, 0xA8) : QColor(0xC2, 0x18, 0x5B);
        case StyleColour::Floor:
            return dark ? QColor(0xFF, 0x6B, 0x6B) : QColor(0xC6, 0x28, 0x28);
        case StyleColour::Uniform:
            return dark ? QColor(0xC0, 0xC0, 0xC0) : QColor(0x55, 0x55, 0x55);
        case StyleColour::Pinned:  // a frozen allocation under the live one: violet, apart from both methods
            return dark ? QColor(0xC0, 0x8C, 0xFF) : QColor(0x7B, 0x3F, 0xC4);
        case StyleColour::Grid: {
            QColor c = palette.color(QPalette::WindowText);
            c.setAlpha(dark ? 45 : 35);
            return c;
        }
    }
    return palette.color(QPalette::WindowText);
}

QColor method_colour(const QString& method, const QPalette& palette) {
    const bool dark = is_dark(palette);
    // The method's colour role (codec/registry.h); methods with a hue of their own, and names this build
    // does not know, get a stable hue from the name (qHash is seeded per process, so not that).
    const MethodTraits* traits = find_method_traits(method.toStdString());
    switch (traits ? traits->colour : ColourRole::Own) {
        case ColourRole::Method:
            return style_colour(StyleColour::Method, palette);
        case ColourRole::Ablation:
            return style_colour(StyleColour::Reference, palette);
        case ColourRole::Uncompressed:
            return style_colour(StyleColour::Uniform, palette);
        case ColourRole::Eviction:
            return dark ? QColor(0xC3, 0x8B, 0xFF) : QColor(0x7B, 0x3F, 0xC4);
        case ColourRole::Own:
            break;
    }
    uint h = 0;
    for (QChar c : method) h = h * 31 + c.unicode();
    return QColor::fromHsv(static_cast<int>(h % 360), dark ? 150 : 200, dark ? 240 : 170);
}

QString featured_method() {
    return QString::fromStdString(method_with_role(ColourRole::Method));
}

QString compared_method() {
    return QString::fromStdString(method_with_role(ColourRole::Ablation));
}

}  // namespace varrate::viz
