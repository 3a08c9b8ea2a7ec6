#pragma once
// The NIAH sweep tab: lengths x depths x samples at a list of budgets and one needle protocol, written as
// resumable records into an output folder, with progress/cancel, the accuracy heatmaps per method and budget,
// each one's overall accuracy with its 95 % interval, and accuracy against the budget (NiahAccuracyChart).
// Methods, mode, codec settings, answer length and chat come from the run panel (one set of settings in the
// window); the tab shows which in one read-only line and keeps only what is NIAH's own.
#include <QWidget>

#include <vector>

#include "core/suites/niah.h"
#include "viz/run_panel.h"
#include "viz/run_worker.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSpinBox;

namespace varrate::viz {

class NiahAccuracyChart;
class NiahHeatmapView;

// "128, 256 512" -> {128, 256, 512}; throws Error naming `what` for anything but positive numbers.
std::vector<int64_t> parse_int_list(const QString& text, const QString& what);
std::vector<double> parse_double_list(const QString& text, const QString& what, double lo, double hi);
// One line per method and budget: the accuracy over every cell with its Wilson 95 % interval.
QString niah_overall_text(const NiahSummary& summary);
// One line per compressing method and budget: the mean share of the asked needle value's K/V kept in the last
// layer, over right and wrong answers (and the distractors'), from the summary's retention; "" when there is
// none.
QString niah_retention_text(const NiahSummary& summary);
// The run-panel settings a sweep takes, in one line: "run panel: varrate, flat · query-agnostic · κ 0.2 ·
// r_min 2 · R 128 · stride 32 · ...".
QString niah_run_settings_text(const RunSettings& run);

class NiahTab : public QWidget {
    Q_OBJECT
  public:
    explicit NiahTab(QWidget* parent = nullptr);

    // The sweep the tab describes: its own lengths, depths, samples, budgets, distractors, needles, seed and
    // folder with the run panel's methods, mode, codec settings, answer length and chat. An empty budget list
    // sweeps run.codec.budget alone. Throws Error.
    NiahSweepOptions options(const RunSettings& run) const;
    // Refreshes the line that says which run-panel settings a sweep takes.
    void show_run_settings(const RunSettings& run);
    QString run_settings_text() const;
    // Sensible lengths for the model's positions and an output folder per model.
    void apply_model(const ModelInfo& info);
    void set_output_dir(const QString& dir);
    QString output_dir() const;
    void set_lengths(const QString& text);
    void set_depths(const QString& text);
    void set_samples(int n);
    void set_budgets(const QString& text);  // "0.1, 0.2"; "": the run panel's budget
    void set_needles(NeedleProtocol p);

    void set_running(bool running);
    bool running() const { return running_; }
    void set_progress(const QString& cell, qint64 done, qint64 total, const QString& stage);
    void show_outcome(const NiahOutcome& outcome);
    NiahHeatmapView* heatmaps() const { return heatmaps_; }
    NiahAccuracyChart* accuracy_chart() const { return accuracy_; }
    QString status_text() const;
    QString retention_text() const;
    QString overall_text() const;

  Q_SIGNALS:
    void run_requested();
    void cancel_requested();
    void load_requested();  // show the records already in the output folder

  private:
    QLineEdit *lengths_ = nullptr, *depths_ = nullptr, *budgets_ = nullptr, *out_dir_ = nullptr;
    QSpinBox *samples_ = nullptr, *distractors_ = nullptr, *seed_ = nullptr;
    QComboBox* needles_ = nullptr;
    QPushButton *run_ = nullptr, *cancel_ = nullptr, *load_ = nullptr;
    QProgressBar* progress_ = nullptr;
    QLabel *run_settings_ = nullptr, *status_ = nullptr, *overall_ = nullptr, *retention_ = nullptr;
    NiahHeatmapView* heatmaps_ = nullptr;
    NiahAccuracyChart* accuracy_ = nullptr;
    bool running_ = false;
};

}  // namespace varrate::viz
