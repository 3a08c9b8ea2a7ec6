// varrate-studio: the desktop app. Parses the command line, shows the main window, and for --screenshot
// renders the window (after an optional --run) to a PNG and exits; that mode works without a display.
#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QFileInfo>
#include <QImage>
#include <QTimer>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/openmp_env.h"
#include "viz/main_window.h"

namespace {

bool has_arg(int argc, char** argv, const char* name) {
    for (int i = 1; i < argc; ++i)
        if (std::strcmp(argv[i], name) == 0 ||
            (std::strncmp(argv[i], name, std::strlen(name)) == 0 && argv[i][std::strlen(name)] == '='))
            return true;
    return false;
}

bool have_display() {
#if defined(Q_OS_LINUX) || defined(Q_OS_FREEBSD)
    const auto set = [](const char* v) { return std::getenv(v) && *std::getenv(v); };
    return set("QT_QPA_PLATFORM") || set("DISPLAY") || set("WAYLAND_DISPLAY");
#else
    return true;
#endif
}

}  // namespace

int main(int argc, char** argv) {
    varrate::ensure_passive_openmp_wait(argc, argv);
    const bool screenshot = has_arg(argc, argv, "--screenshot");
    const bool help = has_arg(argc, argv, "--help") || has_arg(argc, argv, "-h");
    if (!have_display()) {
        if (screenshot || help) {
            qputenv("QT_QPA_PLATFORM", "offscreen");  // rendering to a file needs no display
        } else {
            std::fprintf(stderr,
                         "varrate-studio: no display found (DISPLAY / WAYLAND_DISPLAY are unset).\n"
                         "  Render the window to a file instead:  varrate-studio --screenshot out.png "
                         "--model DIR [--document FILE] [--run]\n"
                         "  or use the command-line tool:         varrate compare --model DIR "
                         "--context-file FILE --question ...\n");
            return 2;
        }
    }
    QApplication app(argc, argv);
    QApplication::setOrganizationName("VarRate");
    QApplication::setApplicationName("VarRate Studio");

    QCommandLineParser p;
    p.setApplicationDescription(
        "VarRate Studio: variable-rate KV-cache compression, inspected on your model");
    p.addHelpOption();
    const QCommandLineOption model({"m", "model"}, "Hugging Face model directory to open", "DIR");
    const QCommandLineOption document({"d", "document"}, "text/markdown document to open", "FILE");
    const QCommandLineOption run("run", "compare the methods as soon as the model and document are ready");
    const QCommandLineOption shot("screenshot", "render the main window to a PNG and exit", "FILE");
    const QCommandLineOption settings("settings", "use this ini file for the app settings", "FILE");
    const QCommandLineOption size("size", "window size for --screenshot", "WxH", "1600x1000");
    p.addOptions({model, document, run, shot, settings, size});
    p.process(app);

    // Screenshots must not depend on (or change) the user's settings: use a scratch ini unless one is given.
    QString ini = p.value(settings);
    if (ini.isEmpty() && p.isSet(shot)) ini = QDir::temp().filePath("varrate-studio-screenshot.ini");
    if (p.isSet(shot)) QFile::remove(ini);
    varrate::viz::MainWindow w(ini);
    varrate::viz::StartupOptions o;
    o.model = p.value(model);
    o.document = p.value(document);
    o.run = p.isSet(run);
    if (p.isSet(model) && !QFileInfo(o.model).isDir()) {
        std::fprintf(stderr, "varrate-studio: --model %s: not a directory\n", qPrintable(o.model));
        if (p.isSet(shot)) return 1;
    }

    if (!p.isSet(shot)) {
        w.show();
        w.start(o);
        return app.exec();
    }

    const QStringList wh = p.value(size).split('x');
    w.resize(wh.value(0).toInt() > 0 ? wh.value(0).toInt() : 1600,
             wh.value(1).toInt() > 0 ? wh.value(1).toInt() : 1000);
    w.show();
    const QString out = p.value(shot);
    int rc = 0;
    auto take = [&] {
        // Let layouts and queued repaints settle before grabbing.
        QTimer::singleShot(300, &app, [&] {
            const QImage img = w.grab().toImage();
            if (img.isNull() || !img.save(out, "PNG")) {
                std::fprintf(stderr, "varrate-studio: could not write %s\n", qPrintable(out));
                rc = 1;
            } else {
                std::printf("wrote %s (%dx%d)\n", qPrintable(out), img.width(), img.height());
            }
            if (!w.error_text().isEmpty())
                std::fprintf(stderr, "error shown: %s\n", qPrintable(w.error_text()));
            app.quit();
        });
    };
    QObject::connect(&w, &varrate::viz::MainWindow::idle, &app, [&] {
        static bool done = false;
        if (done) return;
        done = true;
        take();
    });
    w.start(o);
    if (!w.busy()) take();
    app.exec();
    return rc;
}
