#pragma once
// The VarRate Studio main window: menus (model, document, session, export, theme), the run panel dock, the
// linked views (document, position charts, rank heatmap, layer summary), the answers table, the NIAH sweep
// and Evaluation tabs, drag-and-drop and the status bar. Long jobs go to RunWorker; errors appear in a
// non-modal banner at the top of the window and in the status bar, never in a blocking dialog.
#include <QMainWindow>
#include <QString>

#include <deque>
#include <memory>

#include "viz/run_worker.h"

class QAction;
class QComboBox;
class QLabel;
class QMenu;
class QPlainTextEdit;
class QStackedWidget;
class QTabWidget;
class QTimer;
class QFrame;
class QMessageBox;

namespace varrate {
struct EvalRecord;
}

namespace varrate::viz {

class AnswersTable;
class AppSettings;
class CacheDialog;
class CacheQa;
class DocumentView;
class EvalTab;
class LayerSummary;
class LiveExplorer;
class RdChart;
class NiahTab;
class PositionAxis;
class PositionCharts;
class RankHeatmap;
class RunModel;
class RunPanel;
struct StudioSession;

struct StartupOptions {
    QString model;             // --model (wins over the demo model and the last one used)
    QString document;          // --document (else a generated NIAH document)
    bool run = false;          // --run: compare as soon as the model and the document are ready
    bool use_defaults = true;  // false: no demo / last-used model (tests of the empty state)
};

// Whether `dir` is the embedded demo model, and the document the window generates for a model when it has
// none: the demo model's first-run regime (core/data_paths.h DemoRegime), else NiahDocRequest's defaults.
bool is_demo_model(const QString& dir);
NiahDocRequest startup_document(const QString& model_dir);

class MainWindow : public QMainWindow {
    Q_OBJECT
  public:
    // settings_file: an ini file instead of the per-user settings (tests, screenshots).
    explicit MainWindow(const QString& settings_file = {}, QWidget* parent = nullptr);
    ~MainWindow() override;

    void start(const StartupOptions& options);
    // The embedded demo model when it holds weights, else "".
    static QString find_demo_model();

    // Actions (menus call them after their dialogs; tests call them directly). Errors go to the banner.
    void open_model(const QString& dir);
    bool open_document(const QString& path);
    void set_document(const QString& text, const QString& source, const QString& needle = {});
    void generate_document(const NiahDocRequest& request);
    void run();
    void cancel();
    void run_niah();
    // Calibrates a basis on text files with the run panel's codec settings and writes it beside the model
    // (MODEL/varrate-basis.safetensors, replacing one that is there: the menu asks first); runs with the
    // "shipped" basis use it from then on.
    void calibrate_on_files(const QStringList& files);
    bool save_session(const QString& path);
    bool open_session(const QString& path);
    bool export_results_json(const QString& path);
    bool export_rank_log(const QString& path);
    bool export_answers_csv(const QString& path);
    bool export_chart(const QString& path);  // the current view, format from the suffix
    bool copy_chart();
    void set_theme(const QString& theme);  // "dark" | "light"
    // Compressed-cache files (main_window_cache.cpp; the File menu's actions ask for the method and the path,
    // then call these). save_compressed_cache writes `method`'s cache of the current run — its document,
    // model, settings as shown (live ones included) and basis — on the worker; cache_saved(ok) follows and
    // the status bar reports its accounted and resident bytes. open_compressed_cache reads a file and checks
    // it against the model (a failure is one message box); cache_opened(ok). ask_compressed_cache answers a
    // question from the opened cache without prefilling its document; cache_answered(ok).
    bool save_compressed_cache(const QString& path, const QString& method);
    bool open_compressed_cache(const QString& path);
    bool ask_compressed_cache(const QString& question, const QString& answer_prefix = {},
                              int max_new_tokens = 32);
    QStringList cache_methods() const;        // the current run's methods a cache can be saved for
    QString selected_answers_method() const;  // the method of the answers table's selected row, or ""
    CacheQa* cache_qa() const { return cache_qa_; }
    CacheDialog* cache_dialog() const { return cache_dialog_; }
    QString cache_error() const { return cache_error_; }  // the last message box's text
    QAction* save_cache_action() const { return save_cache_action_; }

    QString error_text() const;  // the banner's message ("" when hidden)
    void clear_error();
    bool busy() const;
    bool job_queued(JobKind kind) const;
    bool has_model() const { return !loaded_.model_dir.isEmpty(); }
    const ModelInfo& model_info() const { return loaded_; }
    QString model_dir() const { return model_dir_; }
    QString document() const;
    QString theme() const { return theme_; }
    std::shared_ptr<const RunOutcome> outcome() const { return outcome_; }

    RunPanel* run_panel() const { return panel_; }
    AnswersTable* answers() const { return answers_; }
    NiahTab* niah_tab() const { return niah_; }
    EvalTab* eval_tab() const { return eval_; }
    RunModel* run_model() const { return model_; }
    PositionAxis* axis() const { return axis_; }
    DocumentView* document_view() const { return doc_view_; }
    PositionCharts* charts() const { return charts_; }
    RankHeatmap* rank_heatmap() const { return heatmap_; }
    LayerSummary* layer_summary() const { return layers_; }
    LiveExplorer* live() const { return live_; }
    RdChart* rd_chart() const { return rd_chart_; }
    // Pin: the current allocation frozen and overlaid on the live one (charts, answers, footprints).
    void pin_allocation();
    void unpin_allocation();
    bool export_rate_distortion_csv(const QString& path);
    QString cache_text() const;  // the status bar's "what is kept" label
    // Prefill forward passes of the loaded model as of the outcome shown (a live step adds none).
    int64_t prefills() const { return outcome_ ? outcome_->prefills : 0; }
    QWidget* current_chart() const { return current_chart_; }
    void set_current_chart(QWidget* w);

  Q_SIGNALS:
    void model_ready();  // a model finished loading (or a load was reused)
    void document_changed();
    void run_finished(bool ok);  // a comparison ended: true with results, false on error/cancel
    void niah_finished(bool ok);
    void calibration_finished(bool ok);
    void idle();          // no job queued or running
    void live_applied();  // a live update or re-decode is in every view
    void cache_saved(bool ok);
    void cache_opened(bool ok);
    void cache_answered(bool ok);

  protected:
    void closeEvent(QCloseEvent* e) override;
    void dragEnterEvent(QDragEnterEvent* e) override;
    void dropEvent(QDropEvent* e) override;
    bool eventFilter(QObject* watched, QEvent* e) override;

  private:
    void build_menus();
    void build_live();  // main_window_live.cpp: live controls, rate-distortion chart, pin
    // main_window_eval.cpp: the Evaluation tab, and one of its samples regenerated into the Analysis tab.
    void build_eval_tab();
    void open_eval_sample(std::shared_ptr<const EvalRecord> record);
    // main_window_cache.cpp: the cache actions and the worker's cache results.
    void build_cache_actions(QMenu* file);
    void dialog_save_cache();
    void dialog_open_cache();
    void show_cache_error(const QString& message);
    // A failed job that reads or answers from a cache reports here (true) rather than in the banner.
    bool cache_job_failed(const QString& message);
    void finish_cache_job(JobKind kind, bool ok);
    void apply_live_outcome(std::shared_ptr<const RunOutcome> outcome);
    void apply_pin();
    void show_current_rd_points();
    void update_cache_label();
    void build_views();
    void connect_worker();
    void show_error(const QString& message);
    void status(const QString& message);
    void apply_outcome(std::shared_ptr<const RunOutcome> outcome);
    void update_view_selectors();
    void update_status_labels();
    void update_empty_state();
    void rebuild_recent_menu();
    void on_model_loaded(const ModelInfo& info);
    void on_job_finished();
    QString ask_save_path(const QString& title, const QString& name, const QString& filter);
    void dialog_generate_document();
    void dialog_paste_text();
    void dialog_calibrate();
    StudioSession current_session() const;
    // main_window_io.cpp: the session autosave (AppSettings::autosave_file), restored by start() when the
    // last run did not close normally.
    void build_autosave();
    void autosave();
    bool restore_autosave();
    void remove_autosave();

    std::unique_ptr<AppSettings> settings_;
    RunWorker* worker_ = nullptr;
    RunModel* model_ = nullptr;
    PositionAxis* axis_ = nullptr;

    RunPanel* panel_ = nullptr;
    AnswersTable* answers_ = nullptr;
    NiahTab* niah_ = nullptr;
    EvalTab* eval_ = nullptr;
    DocumentView* doc_view_ = nullptr;
    PositionCharts* charts_ = nullptr;
    RankHeatmap* heatmap_ = nullptr;
    LayerSummary* layers_ = nullptr;
    QWidget* current_chart_ = nullptr;
    LiveExplorer* live_ = nullptr;
    RdChart* rd_chart_ = nullptr;
    QLabel* cache_label_ = nullptr;
    QAction *pin_action_ = nullptr, *unpin_action_ = nullptr;
    QPlainTextEdit* source_ = nullptr;  // the document's text (editable)
    QTabWidget* tabs_ = nullptr;
    QStackedWidget* stack_ = nullptr;  // welcome prompt | analysis
    QFrame* banner_ = nullptr;
    QLabel* banner_text_ = nullptr;
    QLabel *model_label_ = nullptr, *doc_label_ = nullptr, *welcome_ = nullptr;
    QComboBox *method_box_ = nullptr, *reference_box_ = nullptr, *metric_box_ = nullptr,
              *layer_box_ = nullptr, *error_box_ = nullptr;
    QMenu* recent_menu_ = nullptr;
    QAction *dark_action_ = nullptr, *light_action_ = nullptr, *run_action_ = nullptr,
            *cancel_action_ = nullptr, *save_cache_action_ = nullptr;
    CacheQa* cache_qa_ = nullptr;
    CacheDialog* cache_dialog_ = nullptr;  // made when a cache is first opened
    QMessageBox* cache_error_box_ = nullptr;
    QString cache_error_;
    QTimer* autosave_timer_ = nullptr;

    QString model_dir_;        // the model runs use (requested; may still be loading)
    ModelInfo loaded_;         // the model the worker has loaded
    QString document_source_;  // file path, "generated", "pasted", "session"
    QString needle_;
    QString theme_ = "dark";
    std::shared_ptr<const RunOutcome> outcome_;
    std::shared_ptr<const NiahOutcome> niah_outcome_;
    std::deque<JobKind> jobs_;  // kinds of the queued jobs, in order
    bool apply_defaults_on_load_ = true;
    bool run_when_ready_ = false;
    bool job_failed_ = false;
};

}  // namespace varrate::viz
