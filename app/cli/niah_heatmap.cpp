#include "app/cli/niah_heatmap.h"

#include <memory>

#include <spdlog/spdlog.h>

#include "core/base/file_io.h"

#ifdef VARRATE_HAVE_QTGUI
#include <QBuffer>
#include <QByteArray>
#include <QGuiApplication>
#include <QImage>

#include "viz/niah_heatmap_paint.h"
#endif

namespace varrate::cli {

#ifdef VARRATE_HAVE_QTGUI

namespace {

// Text needs a QGuiApplication; the CLI has none, so make an offscreen one for the duration of the render.
std::unique_ptr<QGuiApplication> ensure_gui_app() {
    if (QGuiApplication::instance()) return nullptr;
    // The offscreen platform's notices (XDG_RUNTIME_DIR and the like) are not the user's concern. (constData,
    // not toStdString: that one is compiled into Qt with its std::string ABI, which a LibTorch may not
    // share.)
    qInstallMessageHandler([](QtMsgType type, const QMessageLogContext&, const QString& msg) {
        if (type == QtCriticalMsg || type == QtFatalMsg)
            spdlog::warn("heatmap: {}", msg.toUtf8().constData());
        else
            spdlog::debug("heatmap: {}", msg.toUtf8().constData());
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
    const QImage img = viz::NiahHeatmapPainter(s, viz::NiahHeatmapStyle::png()).render();
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
