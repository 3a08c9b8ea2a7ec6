#pragma once
// The window of an opened compressed cache (File > Open Compressed Cache): what the file holds (method,
// settings, bytes), a question and the start of its reply, and the answers decoded from the cache so far.
// Non-modal; it shows a CacheQa and asks through ask_requested (the main window posts the job), so that
// nothing here runs the model.
#include <QDialog>

#include <string>
#include <vector>

class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;
class QTableWidget;

namespace varrate::viz {

class CacheQa;

class CacheDialog : public QDialog {
    Q_OBJECT
  public:
    explicit CacheDialog(CacheQa* qa, QWidget* parent = nullptr);

    // Fills the question fields (e.g. with the Run panel's first question) without asking.
    void set_question(const QString& question, const QString& answer_prefix, int max_new_tokens);
    QLineEdit* question_edit() const { return question_; }
    QPushButton* ask_button() const { return ask_; }
    QTableWidget* answers_table() const { return answers_; }
    QString summary_text() const;

  Q_SIGNALS:
    void ask_requested(QString question, QString answer_prefix, int max_new_tokens);
    void cancel_requested();

  private:
    void show_cache();
    void show_entries();
    void show_state();
    void ask();

    CacheQa* qa_;
    QLabel *summary_ = nullptr, *status_ = nullptr;
    QLineEdit *question_ = nullptr, *prefix_ = nullptr;
    QSpinBox* max_new_ = nullptr;
    QPushButton *ask_ = nullptr, *cancel_ = nullptr;
    QTableWidget* answers_ = nullptr;
};

}  // namespace varrate::viz
