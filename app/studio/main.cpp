// varrate-studio: the desktop app. Parses the command line, shows the main window, and for --screenshot
// renders the window (after an optional --run) to a PNG and exits; --bench-interaction times hover, scroll,
// repaint, zoom and re-shading on a real run (app/studio/interaction_bench.h) and writes the latencies to
// JSON. Both modes work without a display.
#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QImage>
#include <QSaveFile>
#include <QTimer>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "app/studio/interaction_bench.h"
#include "base/error.h"
#include "base/process_env.h"
#include "models/device.h"
#include "viz/app_settings.h"
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
    varrate::prepare_process_environment(argc, argv);
    const bool offscreen_ok =
        has_arg(argc, argv, "--screenshot") || has_arg(argc, argv, "--bench-interaction");
    const bool help = has_arg(argc, argv, "--help") || has_arg(argc, argv, "-h");
    if (!have_display()) {
        if (offscreen_ok || help) {
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
    const QCommandLineOption size("size", "window size for --screenshot and --bench-interaction", "WxH",
                                  "1600x1000");
    const QCommandLineOption bench("bench-interaction",
                                   "time hover, scroll, repaint, zoom and re-shading on a real run of a "
                                   "generated NIAH document; write the latencies to a JSON file and exit",
                                   "OUT.json");
    const QCommandLineOption tokens(
        "tokens", "document length in tokens for --bench-interaction (default 32768)", "N", "32768");
    const QCommandLineOption repeats(
        "repeats", "timed events per interaction for --bench-interaction (default 50)", "N", "50");
    const QCommandLineOption threads("threads", "CPU threads for the model (default 0: all cores)", "N", "0");
    p.addOptions({model, document, run, shot, settings, size, bench, tokens, repeats, threads});
    p.process(app);
    // LibTorch's own default is not all cores (one thread on a 2-core VM with Debian's 1.13): set it before
    // the worker thread first uses LibTorch, which then takes this count (as the CLI's --threads does).
    bool ok_threads = false;
    const int n_threads = p.value(threads).toInt(&ok_threads);
    if (!ok_threads || n_threads < 0) {
        std::fprintf(stderr,
                     "varrate-studio: --threads must be 0 (all cores) or a positive count, got '%s'\n",
                     qPrintable(p.value(threads)));
        return 2;
    }
    varrate::configure_threads(n_threads);
    const QStringList wh = p.value(size).split('x');
    const QSize window_size(wh.value(0).toInt() > 0 ? wh.value(0).toInt() : 1600,
                            wh.value(1).toInt() > 0 ? wh.value(1).toInt() : 1000);

    if (p.isSet(bench)) {
        varrate::viz::InteractionBenchOptions o;
        o.model_dir = p.isSet(model) ? p.value(model) : varrate::viz::MainWindow::find_demo_model();
        if (o.model_dir.isEmpty()) {
            std::fprintf(stderr,
                         "varrate-studio: --bench-interaction: no model (the demo model has no weights "
                         "yet): give --model DIR\n");
            return 2;
        }
        bool ok_tokens = false, ok_repeats = false;
        o.tokens = p.value(tokens).toLongLong(&ok_tokens);
        o.repeats = p.value(repeats).toInt(&ok_repeats);
        if (!ok_tokens || o.tokens < 16 || !ok_repeats || o.repeats < 1) {
            std::fprintf(stderr, "varrate-studio: --tokens must be >= 16 and --repeats >= 1\n");
            return 2;
        }
        o.window_size = window_size;
        o.settings_file = p.value(settings);
        o.log = [](const QString& line) { std::fprintf(stderr, "%s\n", qPrintable(line)); };
        try {
            const auto report = varrate::viz::run_interaction_bench(o);
            varrate::viz::write_report(report, p.value(bench));
            std::printf("%s", qPrintable(varrate::viz::format_table(report)));
            std::printf("wrote %s\n", qPrintable(p.value(bench)));
        } catch (...) {
            std::fprintf(stderr, "varrate-studio: error: %s\n",
                         varrate::describe_current_exception().c_str());
            return 1;
        }
        return 0;
    }

    // Screenshots must not depend on (or change) the user's settings: use a scratch ini unless one is given.
    QString ini = p.value(settings);
    if (ini.isEmpty() && p.isSet(shot)) ini = QDir::temp().filePath("varrate-studio-screenshot.ini");
    if (p.isSet(shot)) {
        QFile::remove(ini);
        QFile::remove(varrate::viz::AppSettings(ini).autosave_file());  // nor restore another run's session
    }
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

    w.resize(window_size);
    w.show();
    const QString out = p.value(shot);
    int rc = 0;
    auto take = [&] {
        // Let layouts and queued repaints settle before grabbing.
        QTimer::singleShot(300, &app, [&] {
            const QImage img = w.grab().toImage();
            QSaveFile file(out);  // atomic, as every file the project writes
            if (img.isNull() || !file.open(QIODevice::WriteOnly) || !img.save(&file, "PNG") ||
                !file.commit()) {
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
