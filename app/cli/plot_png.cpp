#include "app/cli/plot_png.h"

#ifdef VARRATE_HAVE_QTGUI
#include <QBuffer>
#include <QByteArray>
#include <QGuiApplication>

#include <memory>

#include <spdlog/spdlog.h>

#include "base/file_io.h"

namespace varrate::cli {

namespace {

// Text needs a QGuiApplication; the CLI has none, so make an offscreen one for the duration of the render.
std::unique_ptr<QGuiApplication> ensure_gui_app() {
    if (QGuiApplication::instance()) return nullptr;
    // The offscreen platform's notices (XDG_RUNTIME_DIR and the like) are not the user's concern. (constData,
    // not toStdString: that one is compiled into Qt with its std::string ABI, which a LibTorch may not
    // share.)
    qInstallMessageHandler([](QtMsgType type, const QMessageLogContext&, const QString& msg) {
        if (type == QtCriticalMsg || type == QtFatalMsg)
            spdlog::warn("png: {}", msg.toUtf8().constData());
        else
            spdlog::debug("png: {}", msg.toUtf8().constData());
    });
    static int argc = 3;
    static char arg0[] = "varrate", arg1[] = "-platform", arg2[] = "offscreen";
    static char* argv[] = {arg0, arg1, arg2, nullptr};
    return std::make_unique<QGuiApplication>(argc, argv);
}

}  // namespace

OffscreenGui::OffscreenGui() : app_(ensure_gui_app()) {}
OffscreenGui::~OffscreenGui() = default;

bool write_png(const std::function<QImage()>& render, const std::filesystem::path& png,
               std::string& why_not) {
    const OffscreenGui gui;
    const QImage img = render();
    QByteArray bytes;
    QBuffer buffer(&bytes);
    buffer.open(QIODevice::WriteOnly);
    if (img.isNull() || !img.save(&buffer, "PNG")) {
        why_not = png.string() + ": cannot encode the PNG";
        return false;
    }
    write_file_atomic(png, std::string(bytes.constData(), static_cast<size_t>(bytes.size())));
    return true;
}

}  // namespace varrate::cli
#endif
