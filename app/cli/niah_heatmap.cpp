#include "app/cli/niah_heatmap.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "core/base/file_io.h"

#ifdef VARRATE_HAVE_QTGUI
#include <QBuffer>
#include <QByteArray>
#include <QFont>
#include <QFontMetrics>
#include <QGuiApplication>
#include <QImage>
#include <QPainter>
#include <QString>
#endif

namespace varrate::cli {

unsigned niah_color(double accuracy) {
    static const unsigned stops[3] = {0xF0496E, 0xEBB839, 0x0CD79F};
    const double a = std::clamp(std::isfinite(accuracy) ? accuracy : 0.0, 0.0, 1.0);
    const int lo = a < 0.5 ? 0 : 1;
    const double t = (a - 0.5 * lo) / 0.5;
    unsigned out = 0;
    for (int shift = 16; shift >= 0; shift -= 8) {
        const double c0 = (stops[lo] >> shift) & 0xFF, c1 = (stops[lo + 1] >> shift) & 0xFF;
        const unsigned c = static_cast<unsigned>(std::lround(c0 + (c1 - c0) * t));
        out |= std::min(c, 255u) << shift;
    }
    return out;
}

#ifdef VARRATE_HAVE_QTGUI

namespace {

QString qs(const std::string& s) {
    return QString::fromStdString(s);
}

// Text needs a QGuiApplication; the CLI has none, so make an offscreen one for the duration of the render.
std::unique_ptr<QGuiApplication> ensure_gui_app() {
    if (QGuiApplication::instance()) return nullptr;
    // The offscreen platform's notices (XDG_RUNTIME_DIR and the like) are not the user's concern.
    qInstallMessageHandler([](QtMsgType type, const QMessageLogContext&, const QString& msg) {
        if (type == QtCriticalMsg || type == QtFatalMsg)
            spdlog::warn("heatmap: {}", msg.toStdString());
        else
            spdlog::debug("heatmap: {}", msg.toStdString());
    });
    static int argc = 3;
    static char arg0[] = "varrate", arg1[] = "-platform", arg2[] = "offscreen";
    static char* argv[] = {arg0, arg1, arg2, nullptr};
    return std::make_unique<QGuiApplication>(argc, argv);
}

}  // namespace

bool write_niah_heatmap(const NiahSummary& s, const std::filesystem::path& png, std::string& why_not) {
    if (s.methods.empty() || s.lengths.empty() || s.depths.empty()) {
        why_not = "nothing to draw (no method, length or depth)";
        return false;
    }
    const auto app = ensure_gui_app();
    const int n_len = static_cast<int>(s.lengths.size()), n_depth = static_cast<int>(s.depths.size());
    const int n_methods = static_cast<int>(s.methods.size());
    const int cw = std::max(64, (180 + n_len - 1) / n_len), ch = 30;  // one cell; titles need ~180 px
    const int left = 62, top = 30, bottom = 48, gap = 24;             // around one panel's grid
    const int panel_w = left + cw * n_len + gap, panel_h = top + ch * n_depth + bottom;
    const int per_row = std::min(n_methods, 3);
    const int rows = (n_methods + per_row - 1) / per_row;
    const int header = 40, bar_w = 90, margin = 12;
    QFont font("DejaVu Sans");
    font.setPixelSize(11);
    QFont title_font = font;
    title_font.setPixelSize(13);
    title_font.setBold(true);
    const QColor ink(0x20, 0x20, 0x20);
    const QString heading = qs(fmt::format("Needle in a haystack - {}, {}, budget {:g}, {} sample{} per cell",
                                           s.model.empty() ? "model" : s.model, s.mode, s.budget, s.samples,
                                           s.samples == 1 ? "" : "s"));
    const int width = std::max(margin + per_row * panel_w + bar_w + margin,
                               2 * margin + QFontMetrics(title_font).horizontalAdvance(heading) + 8);
    const int height = header + rows * panel_h + margin;

    QImage img(width, height, QImage::Format_RGB32);
    img.fill(QColor(0xFF, 0xFF, 0xFF));
    QPainter p(&img);
    p.setRenderHint(QPainter::Antialiasing, true);
    p.setRenderHint(QPainter::TextAntialiasing, true);
    p.setPen(ink);
    p.setFont(title_font);
    p.drawText(QRect(margin, 0, width - 2 * margin, header), Qt::AlignLeft | Qt::AlignVCenter, heading);

    for (int m = 0; m < n_methods; ++m) {
        const int x0 = margin + (m % per_row) * panel_w, y0 = header + (m / per_row) * panel_h;
        const int gx = x0 + left, gy = y0 + top;
        int64_t n = 0, correct = 0;
        for (int d = 0; d < n_depth; ++d)
            for (int l = 0; l < n_len; ++l) {
                const NiahCell& c = s.cell(m, d, l);
                n += c.n;
                correct += c.correct;
                const QRect cell(gx + l * cw, gy + d * ch, cw, ch);
                if (c.n > 0) {
                    const unsigned rgb = niah_color(c.accuracy());
                    p.fillRect(cell, QColor((rgb >> 16) & 0xFF, (rgb >> 8) & 0xFF, rgb & 0xFF));
                } else {
                    p.fillRect(cell, QColor(0xD8, 0xD8, 0xD8));
                }
                p.setPen(QColor(0xFF, 0xFF, 0xFF));
                p.drawRect(cell.adjusted(0, 0, -1, -1));
                p.setPen(ink);
                p.setFont(font);
                p.drawText(cell, Qt::AlignCenter,
                           c.n > 0            ? qs(fmt::format("{:.0f}%", 100.0 * c.accuracy()))
                           : c.infeasible > 0 ? QString("n/a")  // the budget is infeasible at this length
                                              : QString("-"));
            }
        // Title, depth ticks (rows), length ticks (columns) and axis names.
        p.setFont(title_font);
        p.drawText(QRect(gx, y0, cw * n_len, top), Qt::AlignLeft | Qt::AlignVCenter,
                   qs(n > 0 ? fmt::format("{}  ({:.0f}% of {})", s.methods[m], 100.0 * correct / n, n)
                            : fmt::format("{}  (no records)", s.methods[m])));
        p.setFont(font);
        for (int d = 0; d < n_depth; ++d)
            p.drawText(QRect(x0 + 16, gy + d * ch, left - 22, ch), Qt::AlignRight | Qt::AlignVCenter,
                       qs(fmt::format("{:g}%", s.depths[d])));
        for (int l = 0; l < n_len; ++l)
            p.drawText(QRect(gx + l * cw, gy + n_depth * ch + 2, cw, 18), Qt::AlignHCenter | Qt::AlignTop,
                       qs(std::to_string(s.lengths[l])));
        p.drawText(QRect(gx, gy + n_depth * ch + 22, cw * n_len, 18), Qt::AlignHCenter | Qt::AlignTop,
                   "context length (tokens)");
        p.save();
        p.translate(x0 + 8, gy + n_depth * ch / 2);
        p.rotate(-90);
        p.drawText(QRect(-60, -8, 120, 16), Qt::AlignCenter, "depth %");
        p.restore();
    }

    // Colour bar: the fixed 0-1 scale.
    const int bx = margin + per_row * panel_w + 10, by = header + top, bh = std::max(60, ch * n_depth);
    for (int y = 0; y < bh; ++y) {
        const unsigned rgb = niah_color(1.0 - static_cast<double>(y) / (bh - 1));
        p.setPen(QColor((rgb >> 16) & 0xFF, (rgb >> 8) & 0xFF, rgb & 0xFF));
        p.drawLine(bx, by + y, bx + 16, by + y);
    }
    p.setPen(ink);
    p.setFont(font);
    p.drawText(QRect(bx + 20, by - 8, 50, 16), Qt::AlignLeft | Qt::AlignVCenter, "1.0");
    p.drawText(QRect(bx + 20, by + bh / 2 - 8, 50, 16), Qt::AlignLeft | Qt::AlignVCenter, "0.5");
    p.drawText(QRect(bx + 20, by + bh - 8, 50, 16), Qt::AlignLeft | Qt::AlignVCenter, "0.0");
    p.drawText(QRect(bx - 4, by - 26, 80, 16), Qt::AlignLeft | Qt::AlignVCenter, "accuracy");
    p.end();

    QByteArray bytes;
    QBuffer buffer(&bytes);
    buffer.open(QIODevice::WriteOnly);
    if (!img.save(&buffer, "PNG")) {
        why_not = png.string() + ": cannot encode the PNG";
        return false;
    }
    write_file_atomic(png, std::string(bytes.constData(), static_cast<size_t>(bytes.size())));
    return true;
}

#else

bool write_niah_heatmap(const NiahSummary&, const std::filesystem::path&, std::string& why_not) {
    why_not = "this build of varrate has no Qt Gui";
    return false;
}

#endif

}  // namespace varrate::cli
