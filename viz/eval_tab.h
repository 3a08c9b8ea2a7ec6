#pragma once
// The Evaluation tab: a `varrate eval` results folder opened and summarised off the UI thread (read_eval_grid
// and summarize_eval of core/eval.h), its cells in a table (task x length x method x budget: mean score,
// difference to the reference with its paired 95 % bootstrap interval, wins/losses, sign test p), the
// score-vs-kappa chart at a chosen length (one panel per task and one for every task pooled), and a
// double-click on a task's row opens that cell's samples (EvalRecordDialog); from there a RULER sample can be
// regenerated into the Analysis tab when its model is loaded (the window does that: open_sample_requested).
#include <QWidget>

#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>  // core/eval.h declares json members with json_fwd.hpp only

#include "core/suites/eval.h"

class QComboBox;
class QLabel;
class QLineEdit;
class QModelIndex;
class QProgressBar;
class QPushButton;
class QTableView;

namespace varrate::viz {

class EvalRecordDialog;
class EvalScoreChart;
class EvalTableModel;

// What loading a folder found.
struct EvalFolder {
    std::filesystem::path dir;
    EvalSweepOptions options;  // read_eval_grid's
    std::shared_ptr<const EvalSummary> summary;
    int64_t records = 0;  // cells' n + infeasible, every series
};

class EvalTab : public QWidget {
    Q_OBJECT
  public:
    explicit EvalTab(QWidget* parent = nullptr);
    ~EvalTab() override;

    // Reads the folder on a worker thread; loaded(ok) follows (an older load still running is dropped).
    void open_folder(const QString& dir);
    void cancel_load();  // drops the running load (its result is ignored)
    bool loading() const { return loading_; }
    QString folder() const;
    std::shared_ptr<const EvalFolder> current() const { return folder_; }

    // The loaded model: "Open in Analysis" regenerates a RULER sample with its tokenizer ("" = none).
    void set_model(const QString& name);

    // Opens the samples of the table's row (a task's row; pooled rows have no single cell). Returns false
    // when the row has none.
    bool open_row(int row);

    QTableView* table() const { return table_; }
    EvalTableModel* model() const { return model_; }
    EvalScoreChart* chart() const { return chart_; }
    QComboBox* length_box() const { return length_box_; }
    EvalRecordDialog* record_dialog() const { return dialog_; }  // nullptr until a row is opened
    QString status_text() const;

  Q_SIGNALS:
    void loaded(bool ok);
    void open_sample_requested(std::shared_ptr<const varrate::EvalRecord> record);

  private:
    void show_folder(std::shared_ptr<const EvalFolder> folder);
    void set_loading(bool loading);
    void update_analysis_state();

    QLineEdit* dir_ = nullptr;
    QPushButton *open_ = nullptr, *reload_ = nullptr, *cancel_ = nullptr;
    QProgressBar* progress_ = nullptr;
    QLabel* status_ = nullptr;
    QTableView* table_ = nullptr;
    EvalTableModel* model_ = nullptr;
    QComboBox* length_box_ = nullptr;
    EvalScoreChart* chart_ = nullptr;
    EvalRecordDialog* dialog_ = nullptr;
    std::shared_ptr<const EvalFolder> folder_;
    QString model_name_;
    int generation_ = 0;  // of the newest load: older results are dropped
    bool loading_ = false;
};

}  // namespace varrate::viz
