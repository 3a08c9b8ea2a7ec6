// Colours and ticks shared by the views.
#include "viz/view_style.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace varrate::viz {

QColor metric_colour(TokenMetric metric) {
    switch (metric) {
        case TokenMetric::Salience:
        case TokenMetric::SalienceNorm:
            return QColor(0xF2, 0x8C, 0x28);
        case TokenMetric::Rank:
            return QColor(0x2F, 0x7F, 0xE0);
        case TokenMetric::RelError:
            return QColor(0xE0, 0x3E, 0x52);
    }
    return QColor(0x80, 0x80, 0x80);
}

QColor mix(const QColor& a, const QColor& b, double t) {
    t = std::clamp(t, 0.0, 1.0);
    auto ch = [t](int x, int y) { return static_cast<int>(std::lround(x + t * (y - x))); };
    return QColor(ch(a.red(), b.red()), ch(a.green(), b.green()), ch(a.blue(), b.blue()),
                  ch(a.alpha(), b.alpha()));
}

QColor contrast_text(const QColor& fill, const QColor& normal_text, double t) {
    if (t < 0.35) return normal_text;
    // Relative luminance decides between black and white on strong shades.
    const double y = 0.2126 * fill.redF() + 0.7152 * fill.greenF() + 0.0722 * fill.blueF();
    return y > 0.5 ? QColor(Qt::black) : QColor(Qt::white);
}

QColor sequential_colour(double t) {
    static const std::array<QColor, 5> stops = {QColor(0x44, 0x01, 0x54), QColor(0x3B, 0x52, 0x8B),
                                                QColor(0x21, 0x90, 0x8C), QColor(0x5D, 0xC9, 0x63),
                                                QColor(0xFD, 0xE7, 0x25)};
    if (!std::isfinite(t)) t = 0;
    t = std::clamp(t, 0.0, 1.0) * (stops.size() - 1);
    const size_t i = std::min(static_cast<size_t>(t), stops.size() - 2);
    return mix(stops[i], stops[i + 1], t - static_cast<double>(i));
}

QString default_method(const RunModel& model) {
    const QStringList methods = model.methods();
    const QString featured = featured_method();
    if (methods.contains(featured)) return featured;
    return methods.isEmpty() ? QString() : methods.front();
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
    std::vector<double> out;
    if (!(hi > lo) || target < 1 || !std::isfinite(lo) || !std::isfinite(hi)) return out;
    const double raw = (hi - lo) / target;
    const double mag = std::pow(10.0, std::floor(std::log10(raw)));
    double step = mag;
    for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
        if (m * mag >= raw) {
            step = m * mag;
            break;
        }
    for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step)
        out.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);
    return out;
}

QString tick_label(double value, bool positions) {
    if (positions && std::abs(value) >= 10000)
        return QString::number(value / 1000, 'g', 4) + QLatin1Char('k');
    return QString::number(value, 'g', 4);
}

// The app's dark theme: Fusion colours close to the charts' dark backgrounds.
QPalette dark_palette() {
    QPalette p;
    const QColor window(0x1f, 0x22, 0x28), base(0x17, 0x19, 0x1e), text(0xd8, 0xdb, 0xe2),
        mid(0x3a, 0x3f, 0x4b), accent(0x3d, 0x8b, 0xfd);
    p.setColor(QPalette::Window, window);
    p.setColor(QPalette::WindowText, text);
    p.setColor(QPalette::Base, base);
    p.setColor(QPalette::AlternateBase, QColor(0x1c, 0x1f, 0x25));
    p.setColor(QPalette::ToolTipBase, QColor(0x2a, 0x2e, 0x36));
    p.setColor(QPalette::ToolTipText, text);
    p.setColor(QPalette::PlaceholderText, QColor(0x80, 0x86, 0x92));
    p.setColor(QPalette::Text, text);
    p.setColor(QPalette::Button, QColor(0x2a, 0x2e, 0x36));
    p.setColor(QPalette::ButtonText, text);
    p.setColor(QPalette::BrightText, Qt::white);
    p.setColor(QPalette::Highlight, accent);
    p.setColor(QPalette::HighlightedText, Qt::white);
    p.setColor(QPalette::Link, accent);
    p.setColor(QPalette::Mid, mid);
    p.setColor(QPalette::Dark, QColor(0x12, 0x14, 0x18));
    p.setColor(QPalette::Light, QColor(0x44, 0x4a, 0x56));
    p.setColor(QPalette::Disabled, QPalette::Text, QColor(0x6c, 0x72, 0x7e));
    p.setColor(QPalette::Disabled, QPalette::ButtonText, QColor(0x6c, 0x72, 0x7e));
    p.setColor(QPalette::Disabled, QPalette::WindowText, QColor(0x6c, 0x72, 0x7e));
    return p;
}

}  // namespace varrate::viz
