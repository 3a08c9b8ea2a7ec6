#pragma once
// The compressed cache opened in the app (File > Open Compressed Cache): the file the worker read and
// checked, and the questions asked of it so far with their answers. Data only, no widgets: the main window
// fills it from the worker's results, CacheDialog shows it and asks through the window.
#include <QObject>
#include <QString>

#include <memory>
#include <vector>

#include "viz/run_worker.h"

namespace varrate::viz {

class CacheQa : public QObject {
    Q_OBJECT
  public:
    struct Entry {
        QString question, answer_prefix, answer;
        std::vector<int64_t> answer_ids;
        int64_t prefills = 0;  // prefill forward passes the answer took (none: the cache is the context)
        double ms = 0;         // of the batch it was answered in
    };

    explicit CacheQa(QObject* parent = nullptr);

    // A newly opened cache replaces the last one and its answers.
    void set_cache(std::shared_ptr<const OpenedCache> cache);
    std::shared_ptr<const OpenedCache> cache() const { return cache_; }
    bool has_cache() const { return cache_ != nullptr; }
    void add_answers(const CacheAnswers& answers);
    const std::vector<Entry>& entries() const { return entries_; }
    // While questions are being answered; the status says what happens or went wrong.
    void set_busy(bool busy);
    bool busy() const { return busy_; }
    void set_status(const QString& text, bool error = false);
    QString status() const { return status_; }
    bool status_is_error() const { return error_; }
    void clear();

  Q_SIGNALS:
    void cache_changed();
    void entries_changed();
    void state_changed();  // busy or status

  private:
    std::shared_ptr<const OpenedCache> cache_;
    std::vector<Entry> entries_;
    QString status_;
    bool busy_ = false, error_ = false;
};

// The codec settings a cache was made with, as far as its method reads them ("κ 0.2 · r_min 4 · R 64 ·
// stride 32 · anchors 4 · window 16 · obs. window 16 · 4-bit coefficients"); "uncompressed" for full.
QString cache_settings_text(const std::string& method, const CodecSettings& s);
// What the dialog says about an opened cache (HTML): method, settings, context, accounted and resident bytes,
// basis, file.
QString cache_summary_html(const OpenedCache& cache);
// The status bar's line after "Save compressed cache": method, accounted and resident bytes, the file.
QString cache_saved_text(const CacheSaveOutcome& saved);

}  // namespace varrate::viz
