#pragma once
// What several GUI tests need: a main window with the stories260k fixture loaded and one run finished, and a
// wait until its worker is idle. Header-only: only gui_test_* executables (which link the app) include it.
#include <QElapsedTimer>
#include <QSignalSpy>
#include <QTest>

#include <memory>

#include "tests/test_support.h"
#include "viz/main_window.h"

namespace varrate::test {

// Waits (processing events) while the window's worker is busy, at most timeout_ms.
inline void wait_idle(viz::MainWindow& w, int timeout_ms) {
    QElapsedTimer t;
    t.start();
    while (w.busy() && t.elapsed() < timeout_ms) QTest::qWait(20);
}

// A shown 1400 x 900 window (settings in settings_file) that loaded the stories260k fixture with its own
// codec settings and finished one run of the Run panel's settings; qFatal when either fails.
inline std::unique_ptr<viz::MainWindow> window_after_fixture_run(const QString& settings_file, int load_ms,
                                                                 int run_ms, int idle_ms) {
    auto w = std::make_unique<viz::MainWindow>(settings_file);
    w->resize(1400, 900);
    w->show();
    QSignalSpy idle(w.get(), &viz::MainWindow::idle);
    viz::StartupOptions o;
    o.model = QString::fromStdString(fixture("stories260k").string());
    o.use_defaults = false;
    w->start(o);
    if (!idle.wait(load_ms) || !w->error_text().isEmpty())
        qFatal("model did not load: %s", qPrintable(w->error_text()));
    QSignalSpy done(w.get(), &viz::MainWindow::run_finished);
    w->run();
    if (!done.wait(run_ms) || !done.takeFirst().at(0).toBool())
        qFatal("run failed: %s", qPrintable(w->error_text()));
    wait_idle(*w, idle_ms);
    return w;
}

}  // namespace varrate::test
