#pragma once
// One sample of an evaluation cell, read from its record (records/<series>/<task>/L<length>_S<sample>.json):
// the question, the references, the prediction and its score, with a sample selector. Records do not hold the
// context; "Open in Analysis" asks the window to regenerate it (RULER tasks, with the sweep's model loaded).
#include <QDialog>
#include <QString>

#include <filesystem>
#include <memory>

#include <nlohmann/json.hpp>  // core/eval.h declares json members with json_fwd.hpp only

#include "core/suites/eval.h"

class QLabel;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;

namespace varrate::viz {

class EvalRecordDialog : public QDialog {
    Q_OBJECT
  public:
    explicit EvalRecordDialog(QWidget* parent = nullptr);

    // The cell's samples 0..samples-1 of the folder; shows the first that has a record.
    void show_cell(const std::filesystem::path& out_dir, const EvalCell& cell, int64_t samples);
    // Returns false (and says so in the dialog) when the sample has no record.
    bool show_sample(int64_t sample);
    // Whether "Open in Analysis" can regenerate the sample's context now, and why not.
    void set_analysis_available(bool available, const QString& why_not);

    std::shared_ptr<const EvalRecord> record() const { return record_; }
    int64_t sample() const;
    QString prediction_text() const;
    QString question_text() const;
    QString references_text() const;
    QString score_text() const;

  Q_SIGNALS:
    void open_in_analysis(std::shared_ptr<const varrate::EvalRecord> record);

  private:
    std::filesystem::path out_dir_;
    EvalCell cell_;
    std::shared_ptr<const EvalRecord> record_;
    QLabel *title_ = nullptr, *score_ = nullptr, *details_ = nullptr;
    QSpinBox* sample_ = nullptr;
    QPlainTextEdit *question_ = nullptr, *references_ = nullptr, *prediction_ = nullptr;
    QPushButton* open_ = nullptr;
    bool analysis_available_ = false;
    QString analysis_why_not_;
};

}  // namespace varrate::viz
