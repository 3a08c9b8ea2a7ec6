#pragma once
// PNGs of the desktop app's painters (viz/*_paint.h) from the headless CLI: rendered on an offscreen
// QGuiApplication made for the duration of the render, when the CLI was built with Qt Gui.
#ifdef VARRATE_HAVE_QTGUI
#include <QImage>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>

class QGuiApplication;

namespace varrate::cli {

// An offscreen QGuiApplication while it lives, unless the process has one. Hold one around several write_png
// calls: Qt does not start a second application in a process once the first is gone.
class OffscreenGui {
  public:
    OffscreenGui();
    ~OffscreenGui();
    OffscreenGui(const OffscreenGui&) = delete;
    OffscreenGui& operator=(const OffscreenGui&) = delete;

  private:
    std::unique_ptr<QGuiApplication> app_;
};

// Holds an OffscreenGui, calls `render` (painters measure text, which needs it), encodes the image and writes
// `png` atomically. Returns false with `why_not` set when encoding failed.
bool write_png(const std::function<QImage()>& render, const std::filesystem::path& png, std::string& why_not);

}  // namespace varrate::cli
#endif
