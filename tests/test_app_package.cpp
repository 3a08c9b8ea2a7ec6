// The Debian packages as a user gets them: the .deb files that cpack wrote to build/packages/ (the
// package_build test, run first as a ctest fixture) are unpacked with `dpkg-deb -x` into a temporary root,
// and the installed varrate and varrate-studio run from there, in a working directory outside the source
// tree: they must find the demo model under the root's usr/share/varrate-studio, beside their own bin/.
#include "tests/test_support.h"

#include <QDir>
#include <QFileInfo>
#include <QProcess>
#include <QRegularExpression>
#include <QSettings>
#include <QStandardPaths>
#include <QTemporaryDir>
#if VARRATE_PACKAGE_GUI  // the GUI build: there is a varrate-studio package, and Qt Gui to read its images
#include <QImage>
#include <QSet>
#endif

namespace {

struct Run {
    int exit_code = -1;
    QString out, err;
};

Run run(const QString& program, const QStringList& args, const QString& cwd, int timeout_ms = 600000) {
    QProcess p;
    p.setWorkingDirectory(cwd);
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("QT_QPA_PLATFORM", "offscreen");
    p.setProcessEnvironment(env);
    p.start(program, args);
    if (!p.waitForFinished(timeout_ms)) p.kill();
    p.waitForFinished();
    Run r;
    r.exit_code = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
    r.out = QString::fromUtf8(p.readAllStandardOutput());
    r.err = QString::fromUtf8(p.readAllStandardError());
    return r;
}

QString canonical(const QString& path) {
    return QFileInfo(path).canonicalFilePath();
}

}  // namespace

class TestAppPackage : public QObject {
    Q_OBJECT
    QTemporaryDir root_, cwd_;  // the unpacked packages; the programs' working directory
    QString cli_deb_, studio_deb_;

    QString in_root(const QString& rel) const { return root_.filePath(rel); }
    QString demo_model() const { return canonical(in_root("usr/share/varrate-studio/models/varrate-demo")); }

    // The package's file in build/packages/, by its standard Debian name (name_version_arch.deb).
    static QString find_deb(const QString& package) {
        const QDir dir(VARRATE_PACKAGE_DIR);
        const QStringList hits =
            dir.entryList({package + "_" + VARRATE_PACKAGE_VERSION + "_*.deb"}, QDir::Files, QDir::Name);
        return hits.size() == 1 ? dir.filePath(hits.first()) : QString();
    }

    static QString control_field(const QString& deb, const QString& field) {
        const Run r = run("dpkg-deb", {"--field", deb, field}, QDir::tempPath());
        return r.exit_code == 0 ? r.out.trimmed() : QString();
    }

  private Q_SLOTS:
    void initTestCase() {
        if (QStandardPaths::findExecutable("dpkg-deb").isEmpty())
            QSKIP("dpkg-deb is not installed: the .deb files cannot be unpacked (install dpkg)");
        QVERIFY(root_.isValid() && cwd_.isValid());
        cli_deb_ = find_deb("varrate-cli");
        QVERIFY2(!cli_deb_.isEmpty(),
                 "no varrate-cli_" VARRATE_PACKAGE_VERSION "_*.deb in " VARRATE_PACKAGE_DIR
                 " (the package_build test runs cpack)");
        QStringList debs = {cli_deb_};
        if (VARRATE_PACKAGE_GUI) {
            studio_deb_ = find_deb("varrate-studio");
            QVERIFY2(!studio_deb_.isEmpty(), "no varrate-studio_" VARRATE_PACKAGE_VERSION
                                             "_*.deb in " VARRATE_PACKAGE_DIR " (the GUI is built)");
            debs << studio_deb_;
        }
        for (const QString& deb : debs) {
            const Run r = run("dpkg-deb", {"-x", deb, root_.path()}, QDir::tempPath());
            QVERIFY2(r.exit_code == 0, qPrintable("dpkg-deb -x " + deb + ": " + r.err));
        }
        // The working directory leads to no checkout: no resources/ in it, and outside the source tree.
        QVERIFY(!QFileInfo::exists(cwd_.filePath("resources")));
        QVERIFY(!canonical(cwd_.path()).startsWith(canonical(VARRATE_SOURCE_DIR) + "/"));
    }

    void cliPackageHoldsProgramsDataAndDocs() {
        for (const char* rel : {"usr/bin/varrate", "usr/bin/varrate-train"})
            QVERIFY2(QFileInfo(in_root(rel)).isExecutable(), rel);
        for (const char* rel :
             {"usr/share/varrate-studio/models/varrate-demo/model.safetensors",
              "usr/share/varrate-studio/models/varrate-demo/tokenizer.json",
              "usr/share/varrate-studio/configs/llama-3.2-1b.json",
              "usr/share/varrate-studio/eval/stories260k/eval.txt", "usr/share/man/man1/varrate.1.gz",
              "usr/share/man/man1/varrate-train.1.gz", "usr/share/doc/varrate-cli/copyright",
              "usr/share/doc/varrate-cli/changelog.gz"})
            QVERIFY2(QFileInfo(in_root(rel)).isFile(), rel);
        // Headless: Qt Gui (offscreen PNG rendering) at most, never Widgets or Charts.
        const QString depends = control_field(cli_deb_, "Depends");
        QVERIFY2(!depends.isEmpty(), "varrate-cli has no Depends (dpkg-shlibdeps did not run?)");
        QVERIFY2(depends.contains("libtorch"), qPrintable(depends));
        QVERIFY2(!depends.contains("widgets") && !depends.contains("charts"), qPrintable(depends));
    }

    void studioPackageHoldsAppAndDesktopFiles() {
#if !VARRATE_PACKAGE_GUI
        QSKIP("built without the GUI (VARRATE_GUI=OFF): no varrate-studio package");
#else
        for (const char* rel :
             {"usr/share/applications/io.github.varrate.Studio.desktop",
              "usr/share/metainfo/io.github.varrate.Studio.metainfo.xml",
              "usr/share/icons/hicolor/scalable/apps/io.github.varrate.Studio.svg",
              "usr/share/icons/hicolor/256x256/apps/io.github.varrate.Studio.png",
              "usr/share/man/man1/varrate-studio.1.gz", "usr/share/doc/varrate-studio/copyright"})
            QVERIFY2(QFileInfo(in_root(rel)).isFile(), rel);
        QVERIFY(QFileInfo(in_root("usr/bin/varrate-studio")).isExecutable());
        QCOMPARE(QImage(in_root("usr/share/icons/hicolor/256x256/apps/io.github.varrate.Studio.png")).size(),
                 QSize(256, 256));
        const QString depends = control_field(studio_deb_, "Depends");
        QVERIFY2(depends.contains("varrate-cli (= " VARRATE_PACKAGE_VERSION ")"), qPrintable(depends));
        QVERIFY2(depends.contains("libqt6widgets6"), qPrintable(depends));
#endif
    }

    void demoRunsFromTheUnpackedTree() {
        // 256 tokens keep it short; kappa 0.09 (the demo's default) cannot hold anchors + window that short.
        const Run r = run(in_root("usr/bin/varrate"),
                          {"demo", "--length", "256", "--budget", "0.2", "--threads", "2"}, cwd_.path());
        QVERIFY2(r.exit_code == 0, qPrintable(r.err));
        // The first line names the model it found: the unpacked share/, not a checkout.
        const QString first = r.out.section('\n', 0, 0);
        QVERIFY2(first.startsWith("model"), qPrintable(r.out));
        const QString model = canonical(first.mid(5).trimmed());
        QVERIFY2(!demo_model().isEmpty() && model == demo_model(), qPrintable(first + " vs " + demo_model()));
        // Every method answered in both modes.
        for (const char* method : {"full", "varrate", "flat", "snapkv"})
            QCOMPARE(
                r.out.count(QRegularExpression(QString("\\n(query-aware|query-agnostic) +%1 ").arg(method))),
                2);
    }

    void studioScreenshotFromTheUnpackedTree() {
#if !VARRATE_PACKAGE_GUI
        QSKIP("built without the GUI (VARRATE_GUI=OFF): no varrate-studio package");
#else
        const QString png = cwd_.filePath("shot.png"), ini = cwd_.filePath("studio.ini");
        const Run r =
            run(in_root("usr/bin/varrate-studio"),
                {"--screenshot", png, "--run", "--size", "1280x800", "--settings", ini}, cwd_.path());
        QVERIFY2(r.exit_code == 0, qPrintable(r.out + r.err));
        QVERIFY2(!r.err.contains("error shown"), qPrintable(r.err));
        // The window loaded the demo model from the unpacked share/ (it records each model it loads).
        const QStringList recent = QSettings(ini, QSettings::IniFormat).value("models/recent").toStringList();
        QVERIFY2(!recent.isEmpty(), "varrate-studio loaded no model");
        QCOMPARE(canonical(recent.first()), demo_model());
        // A real rendering of the window: its size, and far more colours than an empty frame has.
        const QImage img(png);
        QCOMPARE(img.size(), QSize(1280, 800));
        QSet<QRgb> colours;
        for (int y = 0; y < img.height(); y += 2)
            for (int x = 0; x < img.width(); x += 2) colours.insert(img.pixel(x, y));
        QVERIFY2(colours.size() > 200, qPrintable(QString("only %1 colours").arg(colours.size())));
#endif
    }
};

QTEST_GUILESS_MAIN(TestAppPackage)
#include "test_app_package.moc"
