// Compressed-cache files in the main window, offscreen, on the stories260k fixture: after a query-agnostic
// run, a method's cache is saved through the action's function (no dialogs), opened again and answered
// from without a prefill, with the answer the answers table shows for that method; a cache of another model
// (or at another dtype, or not a cache at all) is refused with one message and nothing else changes; the
// Run panel's coefficient-bits control reaches CodecSettings, the session file, and, live, the footprints.
#include "tests/gui_test_support.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QFileInfo>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QSignalSpy>
#include <QStatusBar>
#include <QTableWidget>
#include <QTemporaryDir>

#include "core/cache_file.h"
#include "core/data_paths.h"
#include "core/session.h"
#include "models/device.h"
#include "viz/answers_table.h"
#include "viz/cache_dialog.h"
#include "viz/cache_qa.h"
#include "viz/live_explorer.h"
#include "viz/main_window.h"
#include "viz/run_model.h"
#include "viz/run_panel.h"
#include "viz/session_file.h"

using namespace varrate;
using namespace varrate::viz;

namespace {

constexpr int kLoadTimeoutMs = 120000;
constexpr int kRunTimeoutMs = 300000;
constexpr int kStepTimeoutMs = 120000;

const MethodRun& run_of(const RunOutcome& o, const std::string& method) {
    for (const MethodRun& r : o.result.runs)
        if (r.method == method) return r;
    qFatal("no %s run", method.c_str());
}

int table_row(const AnswersTable* t, const QString& method) {
    for (int r = 0; r < t->rowCount(); ++r)
        if (t->item(r, 0) && t->item(r, 0)->text() == method) return r;
    return -1;
}

int64_t rank_sum(const RankGrid& g) {
    int64_t s = 0;
    for (int32_t r : g.ranks) s += r;
    return s;
}

// A cache of a short text, compressed by `full` on the model in `dir` at `dtype`, written to `out`.
void write_full_cache(const std::filesystem::path& dir, c10::ScalarType dtype, const QString& out) {
    RuntimeOptions o;
    o.threads = configure_threads(2);
    o.dtype = dtype;
    auto session = Session::open(dir, o);
    CompressContextRequest req;
    req.context = "Once upon a time there was a little dog. The dog liked to play in the park with a ball.";
    req.method = "full";
    write_cache_file(test::utf8(out), compress_context(*session, req));
}

}  // namespace

class GuiTestCache : public QObject {
    Q_OBJECT
    QTemporaryDir tmp_;
    std::unique_ptr<MainWindow> w_;

    // A window with a finished query-agnostic run on the fixture, its answers decoded.
    MainWindow& window() {
        if (w_ && w_->outcome()) return *w_;
        w_ = test::window_after_fixture_run(tmp_.filePath("cache.ini"), kLoadTimeoutMs, kRunTimeoutMs,
                                            kStepTimeoutMs);
        return *w_;
    }

    void wait_idle() { test::wait_idle(*w_, kStepTimeoutMs); }

    // Runs `action` (which posts a job) and waits for `signal`: 1 or 0 as it says, -1 when the action
    // refused at once or the signal did not come.
    template <typename Signal>
    int wait_for(Signal signal, const std::function<bool()>& action) {
        QSignalSpy spy(w_.get(), signal);
        if (!action() || !spy.wait(kStepTimeoutMs)) return -1;
        return spy.takeFirst().at(0).toBool() ? 1 : 0;
    }

    // Saves `method`'s cache of the current run, opens it and asks the run's question (the answer is
    // checked by the caller against the answers table).
    void save_open_ask(const std::string& method) {
        MainWindow& w = *w_;
        const auto outcome = w.outcome();
        const MethodRun& run = run_of(*outcome, method);
        const CompareRequest& req = outcome->request;
        QCOMPARE(run.answers.size(), size_t{1});
        const QString file = tmp_.filePath(QString::fromStdString(method) + ".vrkv");
        const QString m = QString::fromStdString(method);
        QVERIFY2(wait_for(&MainWindow::cache_saved, [&] { return w.save_compressed_cache(file, m); }) == 1,
                 qPrintable(w.error_text()));
        wait_idle();

        // The file holds what the table accounts for, and the status bar says so.
        const CacheFileInfo info = read_cache_file_info(test::utf8(file));
        QCOMPARE(info.method, method);
        QCOMPARE(info.stored_bytes, run.stored_bytes);
        QCOMPARE(info.resident_bytes, run.resident_bytes);
        QCOMPARE(info.settings.coef_bits, req.settings.coef_bits);
        QCOMPARE(info.context, req.context);
        const QString shown = w.statusBar()->currentMessage();
        QVERIFY2(shown.contains(QString("accounted %1 bytes").arg(info.stored_bytes)) &&
                     shown.contains(QString("resident %1 bytes").arg(info.resident_bytes)),
                 qPrintable(shown));

        QVERIFY2(wait_for(&MainWindow::cache_opened, [&] { return w.open_compressed_cache(file); }) == 1,
                 qPrintable(w.cache_error()));
        const std::string prefix = req.answer_prefixes.empty() ? "" : req.answer_prefixes[0];
        QVERIFY2(wait_for(&MainWindow::cache_answered,
                          [&] {
                              return w.ask_compressed_cache(QString::fromStdString(req.questions.at(0)),
                                                            QString::fromStdString(prefix),
                                                            static_cast<int>(req.max_new_tokens));
                          }) == 1,
                 qPrintable(w.cache_qa()->status()));
        wait_idle();
    }

  private Q_SLOTS:
    void initTestCase() { QVERIFY(tmp_.isValid()); }

    // Without a run there is nothing to save, and without a model nothing to check a cache against: one
    // message each, no job.
    void save_needs_a_run_and_open_a_model() {
        MainWindow w(tmp_.filePath("empty.ini"));
        StartupOptions o;
        o.use_defaults = false;
        w.start(o);
        QVERIFY(!w.save_cache_action()->isEnabled());
        QVERIFY(!w.save_compressed_cache(tmp_.filePath("none.vrkv"), "varrate"));
        QVERIFY2(w.error_text().contains("run a comparison first"), qPrintable(w.error_text()));
        QVERIFY(!w.open_compressed_cache(tmp_.filePath("none.vrkv")));
        QVERIFY2(w.cache_error().contains("open that model first"), qPrintable(w.cache_error()));
        QVERIFY(!w.busy());
        QVERIFY(!QFileInfo::exists(tmp_.filePath("none.vrkv")));
    }

    // A VarRate cache saved from the run answers the run's question as the answers table does, without a
    // prefill; the dialog asks the same through its button.
    void saved_cache_answers_as_the_answers_table() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        MainWindow& w = window();
        QVERIFY(w.outcome()->request.mode == CompressionMode::QueryAgnostic);
        QVERIFY(w.save_cache_action()->isEnabled());
        QVERIFY(w.cache_methods().contains("varrate"));
        const MethodRun& run = run_of(*w.outcome(), "varrate");

        save_open_ask("varrate");
        if (QTest::currentTestFailed()) return;
        CacheQa* qa = w.cache_qa();
        QVERIFY(qa->has_cache());
        QCOMPARE(qa->cache()->context->info.method, std::string("varrate"));
        QCOMPARE(qa->entries().size(), size_t{1});
        QCOMPARE(qa->entries()[0].answer_ids, run.answer_ids.at(0));
        QCOMPARE(test::utf8(qa->entries()[0].answer), run.answers.at(0));
        QCOMPARE(qa->entries()[0].prefills, int64_t{0});  // the document is not prefilled again
        const int row = table_row(w.answers(), "varrate");
        QVERIFY(row >= 0);
        QVERIFY(w.answers()->item(row, 1)->toolTip() == qa->entries()[0].answer);

        // The dialog: shown with the file's method, settings and bytes; its Ask button asks the same.
        CacheDialog* d = w.cache_dialog();
        QVERIFY(d && d->isVisible());
        QVERIFY2(d->summary_text().contains("varrate") && d->summary_text().contains("Accounted"),
                 qPrintable(d->summary_text()));
        QCOMPARE(d->question_edit()->text(), QString::fromStdString(w.outcome()->request.questions[0]));
        QSignalSpy answered(&w, &MainWindow::cache_answered);
        QTest::mouseClick(d->ask_button(), Qt::LeftButton);
        QVERIFY(answered.wait(kStepTimeoutMs));
        QVERIFY(answered.takeFirst().at(0).toBool());
        QCOMPARE(qa->entries().size(), size_t{2});
        QCOMPARE(qa->entries()[1].answer, qa->entries()[0].answer);
        QCOMPARE(d->answers_table()->rowCount(), 2);
        QVERIFY(w.error_text().isEmpty());
        wait_idle();
    }

    // The method of the answers table's selected row is the one the menu saves without asking.
    void selected_row_names_the_method() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        MainWindow& w = window();
        const int row = table_row(w.answers(), "snapkv");
        QVERIFY(row >= 0);
        w.answers()->selectRow(row);
        QCOMPARE(w.selected_answers_method(), QString("snapkv"));
        w.answers()->clearSelection();
        QCOMPARE(w.selected_answers_method(), QString());
        QVERIFY(!w.save_compressed_cache(tmp_.filePath("x.vrkv"), "kivi2"));  // not in this run
        QVERIFY(w.error_text().contains("no kivi2 cache"));
        w.clear_error();
    }

    // A cache of another model, of this model at another dtype, or not a cache: one message box each,
    // nothing opened, the window usable.
    void other_model_cache_is_refused() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        MainWindow& w = window();
        const std::string demo = find_demo_model();
        if (demo.empty()) QSKIP("the embedded demo model has no weights");
        const auto before = w.cache_qa()->cache();

        const QString other = tmp_.filePath("demo.vrkv");
        write_full_cache(demo, c10::kFloat, other);
        QCOMPARE(wait_for(&MainWindow::cache_opened, [&] { return w.open_compressed_cache(other); }), 0);
        QVERIFY2(w.cache_error().contains("different model"), qPrintable(w.cache_error()));
        auto* box = w.findChild<QMessageBox*>("cache_error_box");
        QVERIFY(box && box->isVisible());
        QCOMPARE(box->text(), w.cache_error());
        QVERIFY(w.error_text().isEmpty());  // one message: the box, not the banner too
        box->close();
        QVERIFY(w.cache_qa()->cache() == before);  // the cache open before stays

        const QString bf16 = tmp_.filePath("bf16.vrkv");
        write_full_cache(dir, c10::kBFloat16, bf16);
        QCOMPARE(wait_for(&MainWindow::cache_opened, [&] { return w.open_compressed_cache(bf16); }), 0);
        QVERIFY2(w.cache_error().contains("cache_dtype") && w.cache_error().contains("choose bf16"),
                 qPrintable(w.cache_error()));
        box->close();

        const QString junk = tmp_.filePath("junk.vrkv");
        QFile f(junk);
        QVERIFY(f.open(QIODevice::WriteOnly) && f.write("not a cache file") > 0);
        f.close();
        QCOMPARE(wait_for(&MainWindow::cache_opened, [&] { return w.open_compressed_cache(junk); }), 0);
        QVERIFY2(w.cache_error().contains("junk.vrkv"), qPrintable(w.cache_error()));
        box->close();
        QVERIFY(w.cache_qa()->cache() == before);
        wait_idle();
    }

    // The device list: "cuda" exactly where this build's LibTorch sees a GPU (a CUDA build,
    // docs/DEVELOPING.md "Building against LibTorch 2.x with CUDA", with the GUI needing a C++11-ABI
    // LibTorch), and choosing it reaches the settings with fp16 offered; "auto" stays the first dtype.
    void device_list_follows_the_build() {
        RunPanel panel;
        QComboBox* device = panel.findChild<QComboBox*>("device");
        QComboBox* dtype = panel.findChild<QComboBox*>("dtype");
        QVERIFY(device && dtype);
        QCOMPARE(device->findText("cpu"), 0);
        QCOMPARE(device->findText("cuda") >= 0, cuda_available());
        QCOMPARE(dtype->itemText(0), QString("auto"));
        QCOMPARE(dtype->findText("fp16"), -1);
        if (!cuda_available()) return;
        device->setCurrentText("cuda");
        QCOMPARE(QString::fromStdString(panel.settings().device), QString("cuda"));
        QVERIFY(dtype->findText("fp16") >= 0);
    }

    // The codec group is made from the settings table: one editor per field (named by its JSON key; the list
    // here is written by hand), and every field goes through set_settings, settings() and a session file.
    void run_panel_has_an_editor_per_setting() {
        RunPanel panel;
        for (const char* key : {"budget", "r_min", "rank", "stride", "anchors", "window", "obs_window",
                                "pool_kernel", "coef_bits", "key_channel_ratio", "layer_profile",
                                "streaming_sink", "streaming_recent", "paper_accounting", "precise_timing"}) {
            QWidget* editor = panel.codec_editor(key);
            QVERIFY2(editor, key);
            QCOMPARE(editor->objectName(), QString(key));
            QVERIFY2(!editor->toolTip().isEmpty(), key);
        }
        RunSettings s = panel.settings();
        s.codec.budget = 0.35;
        s.codec.r_min = 5;
        s.codec.rank = 77;
        s.codec.stride = 9;
        s.codec.anchors = 3;
        s.codec.window = 11;
        s.codec.obs_window = 13;
        s.codec.pool_kernel = 7;
        s.codec.coef_bits = 4;
        s.codec.layer_profile = {0.7, 0.9, 1.1, 1.3};
        s.codec.paper_accounting = true;
        s.codec.precise_timing = true;
        panel.set_settings(s);
        auto* profile = qobject_cast<QLineEdit*>(panel.codec_editor("layer_profile"));
        QVERIFY(profile);
        QCOMPARE(profile->text(), QString("0.7,0.9,1.1,1.3"));
        const RunSettings back = run_settings_from_json(to_json(panel.settings()), "test");
        QCOMPARE(back.codec.layer_profile, s.codec.layer_profile);
        QVERIFY2(setting_difference(back.codec, s.codec, SettingTier::Runtime).empty(),
                 setting_difference(back.codec, s.codec, SettingTier::Runtime).c_str());
        QCOMPARE(back.codec.precise_timing, true);
        QCOMPARE(back.codec.pool_kernel, int64_t{7});
        // A list typed in the box: a bad entry keeps the last good value and the box says why; a good one is
        // the setting; an empty box is none.
        profile->setText("1, 0, 2");
        QCOMPARE(panel.settings().codec.layer_profile, s.codec.layer_profile);
        QVERIFY2(profile->toolTip().contains("entry 2"), qPrintable(profile->toolTip()));
        profile->setText("2, 1");
        QCOMPARE(panel.settings().codec.layer_profile, (std::vector<double>{2.0, 1.0}));
        profile->clear();
        QVERIFY(panel.settings().codec.layer_profile.empty());
        panel.set_settings(s);
        // A session saved with an old method name (an alias) checks the method it now is; the panel lists the
        // methods in registry order whatever their grouping on screen.
        s.methods = {"varrate-kvzip", "snapkv", "full"};
        panel.set_settings(s);
        QVERIFY(panel.findChild<QCheckBox*>("method_varrate@kvzip")->isChecked());
        QCOMPARE(panel.settings().methods, (std::vector<std::string>{"full", "snapkv", "varrate@kvzip"}));
        // A model's defaults change the rows the table marks as the model's and keep the user's regime.
        CodecSettings model;
        model.budget = 0.25;
        model.stride = 32;
        panel.apply_model_defaults(model, false, "defaults");
        QCOMPARE(panel.settings().codec.budget, 0.25);
        QCOMPARE(panel.settings().codec.stride, int64_t{32});
        QCOMPARE(panel.settings().codec.pool_kernel, int64_t{7});
        QCOMPARE(panel.settings().codec.coef_bits, int64_t{4});
        QCOMPARE(panel.settings().codec.paper_accounting, true);
    }

    // The control: every choice reaches CodecSettings, set_settings shows it, the session file keeps it.
    void coef_bits_control_reaches_codec_settings() {
        RunPanel panel;
        QComboBox* bits = panel.findChild<QComboBox*>("coef_bits");
        QVERIFY(bits);
        QCOMPARE(bits, panel.coef_bits_box());
        QVERIFY(!bits->toolTip().isEmpty());
        QCOMPARE(panel.settings().codec.coef_bits, int64_t{16});
        QCOMPARE(bits->count(), 5);
        for (int i = 0; i < bits->count(); ++i) {
            bits->setCurrentIndex(i);
            QCOMPARE(panel.settings().codec.coef_bits, int64_t(bits->itemData(i).toInt()));
        }
        QSignalSpy changed(&panel, &RunPanel::settings_changed);
        QSignalSpy live(&panel, &RunPanel::live_settings_changed);
        bits->setCurrentIndex(bits->findData(4));
        QCOMPARE(changed.count(), 1);
        QCOMPARE(live.count(), 1);
        RunSettings s = panel.settings();
        QCOMPARE(s.codec.coef_bits, int64_t{4});
        const RunSettings back = run_settings_from_json(to_json(s), "test");
        QCOMPARE(back.codec.coef_bits, int64_t{4});
        s.codec.coef_bits = 3;
        panel.set_settings(s);
        QCOMPARE(bits->currentData().toInt(), 3);
        QCOMPARE(live.count(), 1);  // set_settings is not a user change
        // A model's defaults keep the user's choice, as they keep paper accounting.
        panel.apply_model_defaults(CodecSettings{}, true, "defaults");
        QCOMPARE(panel.settings().codec.coef_bits, int64_t{3});
    }

    // Live: a step of the control re-allocates the kept run (no prefill) and the footprints shown follow;
    // the rate-distortion grid is measured again; a VarRate cache saved then holds 4-bit coefficients and
    // answers as the table does.
    void coef_bits_are_live() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        MainWindow& w = window();
        wait_idle();
        const auto o0 = w.outcome();
        const MethodRun& v0 = run_of(*o0, "varrate");
        const MethodRun& s0 = run_of(*o0, "snapkv");
        const int64_t ranks0 = rank_sum(w.run_model()->rank_grid("varrate"));
        QComboBox* bits = w.run_panel()->coef_bits_box();
        QVERIFY(w.run_panel()->live_hint().contains("coefficient bits"));

        QSignalSpy applied(&w, &MainWindow::live_applied);
        bits->setCurrentIndex(bits->findData(4));
        QVERIFY(applied.wait(kStepTimeoutMs));
        auto o = w.outcome();
        QCOMPARE(o->step, QString("allocate"));  // no prefill, no analysis
        QCOMPARE(o->request.settings.coef_bits, int64_t{4});
        // (The saves of the tests before prefilled; the outcome counts the model's passes so far.)
        const int64_t prefills = w.prefills();
        const MethodRun& v = run_of(*o, "varrate");
        // The budget, counted in bits, now holds more rank; SnapKV does not read the bits.
        QVERIFY2(
            rank_sum(w.run_model()->rank_grid("varrate")) > ranks0,
            qPrintable(
                QString("ranks %1 -> %2").arg(ranks0).arg(rank_sum(w.run_model()->rank_grid("varrate")))));
        QVERIFY(v.stored_bytes != v0.stored_bytes);
        QVERIFY(v.footprint_fraction <= o->request.settings.budget + 1e-9);
        QCOMPARE(run_of(*o, "snapkv").stored_bytes, s0.stored_bytes);
        const int row = table_row(w.answers(), "varrate");
        QCOMPARE(w.answers()->item(row, w.answers()->footprint_column())->text(),
                 QString("%1 %").arg(100 * v.footprint_fraction, 0, 'f', 2));

        // The controls rest: answers decoded, the grid measured at 4 bits.
        QTRY_VERIFY_WITH_TIMEOUT(!w.outcome()->answers_stale, kStepTimeoutMs);
        QTRY_VERIFY_WITH_TIMEOUT(w.live()->grid() && w.live()->grid()->settings.coef_bits == 4,
                                 kStepTimeoutMs);
        wait_idle();
        QCOMPARE(w.prefills(), prefills);
        QVERIFY(run_of(*w.outcome(), "varrate").resident_bytes > 0);

        save_open_ask("varrate");
        if (QTest::currentTestFailed()) return;
        const CacheQa* qa = w.cache_qa();
        QCOMPARE(qa->cache()->context->info.settings.coef_bits, int64_t{4});
        QVERIFY(cache_settings_text("varrate", qa->cache()->context->info.settings).contains("4-bit"));
        QCOMPARE(qa->entries().back().answer_ids, run_of(*w.outcome(), "varrate").answer_ids.at(0));

        bits->setCurrentIndex(bits->findData(16));
        QTRY_VERIFY_WITH_TIMEOUT(w.outcome()->request.settings.coef_bits == 16, kStepTimeoutMs);
        wait_idle();
        QVERIFY2(w.error_text().isEmpty(), qPrintable(w.error_text()));
    }
};

QTEST_MAIN(GuiTestCache)
#include "gui_test_cache.moc"
