#pragma once
// The run panel: questions and expected answers, budget and every codec setting, the methods to compare,
// mode, device, dtype and basis, Run/Cancel and the stage-by-stage progress of the running job.
#include <QWidget>

#include <optional>
#include <string>
#include <vector>

#include "codec/settings_table.h"
#include "viz/run_settings.h"

class QAbstractSpinBox;
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

class RunPanel : public QWidget {
    Q_OBJECT
  public:
    explicit RunPanel(QWidget* parent = nullptr);

    RunSettings settings() const;
    void set_settings(const RunSettings& s);
    // Applies a model's codec defaults (core/codec_defaults.h: recorded beside the model, else width-based)
    // to the settings the table marks as the model's, and shows `description`, which says which are in
    // force; the others (paper accounting, stage timing, coefficient bits, pool kernel) keep the user's
    // choice.
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
    // The editor of a codec setting (its object name is the table's key) and its slider (null: none).
    QWidget* codec_editor(const std::string& key) const;
    QSlider* codec_slider(const std::string& key) const;
    QSlider* kappa_slider() const { return codec_slider("budget"); }
    QSlider* r_min_slider() const { return codec_slider("r_min"); }
    QSlider* rank_slider() const { return codec_slider("rank"); }
    QDoubleSpinBox* budget_box() const;
    QSpinBox* r_min_box() const;
    QSpinBox* rank_box() const;
    QComboBox* coef_bits_box() const;

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
    // One per row of codec/settings_table.h, made from it.
    struct CodecEditor {
        const CodecSettingSpec* spec = nullptr;
        QDoubleSpinBox* real = nullptr;
        QSpinBox* integer = nullptr;
        QComboBox* choice = nullptr;
        QCheckBox* flag = nullptr;
        QLineEdit* text = nullptr;           // a List row: comma-separated numbers
        mutable std::vector<double> listed;  // its last value that parsed (what a bad text leaves in place)
        QSlider* slider = nullptr;
        QWidget* widget() const;
        // The row's value into s (a List whose text does not parse gives its last good value; the box says
        // why).
        void read(CodecSettings& s) const;
        void show(const CodecSettings& s) const;
    };
    QWidget* make_codec_editor(CodecEditor& e);
    const CodecEditor* find_codec_editor(const std::string& key) const;
    void emit_live_change();
    void add_question_row(const QString& q, const QString& prefix, const QString& a);
    void update_dtypes();

    QTableWidget* questions_ = nullptr;
    std::vector<CodecEditor> codec_;
    QSpinBox* max_new_ = nullptr;
    QCheckBox* chat_ = nullptr;
    std::vector<QCheckBox*> methods_;
    QComboBox *mode_ = nullptr, *device_ = nullptr, *dtype_ = nullptr, *basis_ = nullptr;
    QLineEdit* basis_file_ = nullptr;
    QPushButton* basis_browse_ = nullptr;
    QLabel *defaults_ = nullptr, *basis_status_ = nullptr, *stage_ = nullptr;
    QPushButton *run_ = nullptr, *cancel_ = nullptr;
    QProgressBar* progress_ = nullptr;
    QLabel* live_hint_ = nullptr;
    QString current_method_;
    bool running_ = false, self_calibrated_ = false, live_ = false;
    int quiet_ = 0;  // > 0 while set_settings changes the editors
};

}  // namespace varrate::viz
