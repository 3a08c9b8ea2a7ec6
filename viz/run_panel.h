#pragma once
// The run panel: questions and expected answers, budget and every codec setting, the methods to compare,
// mode, device, dtype and basis, Run/Cancel and the stage-by-stage progress of the running job.
#include <QWidget>

#include <optional>
#include <string>
#include <vector>

#include "codec/method.h"
#include "core/compare.h"
#include "core/session.h"
#include "models/device.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSlider;
class QSpinBox;
class QTableWidget;

namespace varrate::viz {

// Everything the panel edits; the document comes from the main window.
struct RunSettings {
    std::vector<std::string> questions, answers;  // answers: empty, or one per question
    std::vector<std::string> answer_prefixes;     // the start of each reply: empty, or one per question
    std::vector<std::string> methods = default_method_names();
    CodecSettings codec;
    CompressionMode mode = CompressionMode::QueryAgnostic;
    int64_t max_new_tokens = 32;
    bool chat = false;
    std::string device = "cpu", dtype = "auto";  // models/device.h's policy, as the CLI's default
    BasisChoice basis = BasisChoice::Shipped;
    std::string basis_file;

    CompareRequest request(const std::string& context) const;
};

class RunPanel : public QWidget {
    Q_OBJECT
  public:
    explicit RunPanel(QWidget* parent = nullptr);

    RunSettings settings() const;
    void set_settings(const RunSettings& s);
    // Applies a model's codec defaults (core/codec_defaults.h: recorded beside the model, else width-based)
    // and shows `description`, which says which are in force. Paper accounting, stage timing, the
    // coefficient bits and the SnapKV pool kernel keep the user's choice; so do the anchors unless the model
    // records them.
    void apply_model_defaults(const CodecSettings& defaults, bool recorded, const QString& description);
    QString defaults_text() const;

    void set_questions(const std::vector<std::string>& questions, const std::vector<std::string>& answers,
                       const std::vector<std::string>& answer_prefixes = {});
    // After a run or a model load: "basis: <source>", flagged when the runs were self-calibrated.
    void set_basis_status(const QString& source, bool self_calibrated);
    bool self_calibrated_shown() const { return self_calibrated_; }

    void set_running(bool running);
    bool running() const { return running_; }
    void set_progress(const QString& stage, qint64 done, qint64 total);
    QString stage_text() const;
    QPushButton* run_button() const { return run_; }
    QPushButton* cancel_button() const { return cancel_; }
    QProgressBar* progress_bar() const { return progress_; }

    // After a run the worker keeps (live exploration): every codec setting change emits
    // live_settings_changed; `hint` says what is live and what needs a new run.
    void set_live(bool live, const QString& hint);
    bool live() const { return live_; }
    QString live_hint() const;
    // The model's D bounds the r_min and R sliders.
    void set_rank_limit(int dim);
    QSlider* kappa_slider() const { return kappa_slider_; }
    QSlider* r_min_slider() const { return r_min_slider_; }
    QSlider* rank_slider() const { return rank_slider_; }
    QDoubleSpinBox* budget_box() const { return budget_; }
    QSpinBox* r_min_box() const { return r_min_; }
    QSpinBox* rank_box() const { return rank_; }
    QComboBox* coef_bits_box() const { return coef_bits_; }

  Q_SIGNALS:
    void run_requested();
    void cancel_requested();
    void settings_changed();  // any editor changed (also through set_settings): views mirroring them refresh
    // A codec setting changed by the user (not by set_settings / apply_model_defaults).
    void live_settings_changed();
    // Enter in a codec setting: decode the answers now rather than when the controls rest.
    void decode_requested();

  protected:
    bool eventFilter(QObject* watched, QEvent* e) override;

  private:
    void emit_live_change();
    void add_question_row(const QString& q, const QString& prefix, const QString& a);
    void update_dtypes();

    QTableWidget* questions_ = nullptr;
    QDoubleSpinBox* budget_ = nullptr;
    QSpinBox *r_min_ = nullptr, *rank_ = nullptr, *stride_ = nullptr, *anchors_ = nullptr, *window_ = nullptr,
             *obs_window_ = nullptr, *pool_kernel_ = nullptr, *max_new_ = nullptr;
    QCheckBox *paper_accounting_ = nullptr, *precise_timing_ = nullptr, *chat_ = nullptr;
    std::vector<QCheckBox*> methods_;
    QComboBox *mode_ = nullptr, *device_ = nullptr, *dtype_ = nullptr, *basis_ = nullptr,
              *coef_bits_ = nullptr;
    QLineEdit* basis_file_ = nullptr;
    QPushButton* basis_browse_ = nullptr;
    QLabel *defaults_ = nullptr, *basis_status_ = nullptr, *stage_ = nullptr;
    QPushButton *run_ = nullptr, *cancel_ = nullptr;
    QProgressBar* progress_ = nullptr;
    QSlider *kappa_slider_ = nullptr, *r_min_slider_ = nullptr, *rank_slider_ = nullptr;
    QLabel* live_hint_ = nullptr;
    QString current_method_;
    bool running_ = false, self_calibrated_ = false, live_ = false;
    int quiet_ = 0;  // > 0 while set_settings changes the editors
};

}  // namespace varrate::viz
