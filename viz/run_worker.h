#pragma once
// Runs the long jobs of the desktop app — model load, NIAH document generation, method comparison, NIAH
// sweeps, basis calibration and compressed-cache files (save, open, answer) — one after another on a worker
// thread, through the same session API as the CLI. Progress, results and errors come back as queued signals;
// cancel() raises the running job's JobControl flag, and the job unwinds at its next layer step (well under a
// second). The loaded Session is kept and reused while the model directory, device and dtype stay the same.
#include <QObject>
#include <QString>
#include <QStringList>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "core/cache_file.h"
#include "core/compare.h"
#include "core/live_compare.h"
#include "core/suites/niah.h"
#include "viz/run_panel.h"

class QThread;

namespace varrate::viz {

// What a job is; the worker reports it with started(), the window keeps its queue by it.
// Explore: a live update, re-decode or rate-distortion grid of the kept comparison. SaveCache, OpenCache,
// AskCache: a .vrkv file written, read, or answered from (core/cache_file.h).
enum class JobKind { Load, Generate, Compare, Niah, Calibrate, Explore, SaveCache, OpenCache, AskCache };
// "load", "generate", "compare", "niah", "calibrate", "explore", "save-cache", "open-cache", "ask-cache"
QString to_string(JobKind kind);

struct ModelInfo {
    QString model_dir, name;
    int64_t joint_dim = 0, n_layer = 0, max_positions = 0, vocab = 0;
    QString basis_source;                         // "" when runs self-calibrate
    std::optional<CodecSettings> codec_defaults;  // recorded beside the model (varrate-codec.json)
    CodecSettings defaults;                       // what runs start from (core default_codec_settings)
    QString defaults_text;                        // which defaults those are, and why
    QString device, dtype;
    QString dtype_reason;  // why that dtype (models/device.h), the status bar's tooltip
    double load_s = 0;
    bool reused = false;
    // A copy of the model's tokenizer for the GUI thread (rank-log export); the session's stays on the
    // worker.
    std::shared_ptr<const Tokenizer> tokenizer;
};

struct NiahDocRequest {
    int64_t length = 0;  // tokens; <= 0: chosen from the model's positions
    double depth_percent = 50;
    int64_t sample = 0;
    uint64_t seed = 42;
    int64_t distractors = 0;
    bool chat = false;
};

struct GeneratedDocument {
    QString context, question, answer_prefix, expected, needle;
    int64_t tokens = 0;
    double depth_percent = 0;
};

struct RunOutcome {
    CompareResult result;
    CompareRequest request;
    std::vector<QString> token_texts;                // one per context token of the runs
    std::optional<std::pair<int, int>> needle_span;  // token positions [begin, end)
    QString model_dir;
    double wall_s = 0;
    // The Run panel's settings the run was started with (device, dtype and basis too: a cache saved from it
    // uses the same); a session file's own settings for an outcome read from one.
    RunSettings run;
    // Live exploration (RunWorker::update_live): the worker keeps the run's capture, so settings re-allocate.
    bool answers_stale = false;  // settings changed since the answers were decoded (none shown)
    bool materialised = true;    // attention-output errors measured (else -1 until the caches are built)
    int64_t captures = 0;        // prefill captures of the kept comparison so far
    int64_t held_bytes = 0;      // what the kept captures hold
    int64_t prefills = 0;        // the session model's prefill forward passes so far (none per live step)
    QString step;        // what made this outcome: "run", "allocate", "analyse", "refit", "capture", "decode"
    double step_ms = 0;  // how long that took on the worker
};

// A rate-distortion grid of the kept comparison (RunWorker::live_rate_distortion).
struct RateGrid {
    std::vector<RatePoint> points;
    CodecSettings settings;  // the settings other than kappa the grid was made with
    bool attention_output = false;
};

// "Calibrate on files...": a basis from text files, written beside the model (or to `out`).
struct CalibrationRequest {
    QStringList files;
    QString out;                // "" = MODEL/varrate-basis.safetensors
    int64_t max_tokens = 4096;  // tokens used from each file, as `varrate calibrate --max-tokens`
};

struct CalibrationOutcome {
    QString path;  // the basis file written (now the session's shipped basis)
    int64_t layers = 0, dim = 0, rank = 0, tokens = 0;  // tokens: residual tokens per layer
};

struct NiahOutcome {
    NiahSummary summary;
    NiahSweepStats stats;
    QString out_dir;
    bool complete = true;  // false: cancelled part-way (finished records stay; rerun resumes)
};

// "Save compressed cache...": one method's cache of the run's document, at the run's settings.
struct CacheSaveRequest {
    QString path;  // the .vrkv to write
    std::string method;
    std::string context;  // the document the run compressed
    bool chat = false;
    int64_t max_new_tokens = 32;  // of answers to come: only for the positions warning
};

struct CacheSaveOutcome {
    QString path;
    CacheFileInfo info;  // as written
    int64_t file_bytes = 0;
    double wall_s = 0;
};

// A cache file read and checked against the loaded model. The tensors sit on the model's device and are
// used on the worker only; the GUI reads `context->info`.
struct OpenedCache {
    QString path;
    std::shared_ptr<const CompressedContext> context;
    QString model_dir;       // the model it was checked against
    int64_t model_load = 0;  // which load of the worker's model (a reload invalidates the tensors)
    int64_t prefills = 0;    // the model's prefill forward passes when it was opened
    int64_t file_bytes = 0;
    double load_ms = 0;
};

// Questions answered from an opened cache: decoded after the compressed context, no prefill of it.
struct CacheAnswers {
    std::vector<std::string> questions, answer_prefixes, answers;
    std::vector<std::vector<int64_t>> answer_ids;
    int64_t max_new_tokens = 0;
    int64_t prefills = 0;  // prefill forward passes the answers took (the document's: none)
    double ms = 0;
};

// The default NIAH document length for a model with `max_positions` positions: room for the question and
// the answer, at most 2048 tokens.
int64_t default_document_length(int64_t max_positions);

class RunWorker : public QObject {
    Q_OBJECT
  public:
    explicit RunWorker(QObject* parent = nullptr);
    ~RunWorker() override;  // cancels and waits for the running job

    bool busy() const { return pending_ > 0; }
    // Opens (or reuses) the session for `dir` with the settings' device and dtype; with doc, then
    // generates a NIAH document for the model.
    void load_model(const QString& dir, const RunSettings& settings, std::optional<NiahDocRequest> doc = {});
    void generate_document(const QString& dir, const RunSettings& settings, const NiahDocRequest& doc);
    // needle: marked in the views when found in the document.
    void run_compare(const QString& dir, const RunSettings& settings, const QString& document,
                     const QString& needle);
    void run_niah(const QString& dir, const RunSettings& settings, const NiahSweepOptions& options);
    // Calibrates a basis on the files with the settings' stride, anchors, window and rank and saves it;
    // later runs with the "shipped" basis use it.
    void calibrate(const QString& dir, const RunSettings& settings, const CalibrationRequest& request);
    // Live exploration of the last comparison, which the worker keeps (its captures and analyses) until the
    // model or a new run replaces it. update_live re-allocates at the settings' codec settings without a
    // prefill; updates coalesce (a queued update takes the latest settings): returns false when an update
    // already queued will take these. decode_live builds the caches and decodes the answers;
    // live_rate_distortion measures every method over a kappa grid. All fail when nothing is kept.
    bool update_live(const RunSettings& settings);
    void decode_live();
    void live_rate_distortion(const std::vector<double>& kappas, bool attention_output);
    // Compressed-cache files. save_cache compresses the request's context by one method with the settings'
    // codec settings and basis (a query-agnostic prefill, as `varrate compress`) and writes it; open_cache
    // reads a file against the model (loaded, or reused, with the settings' device and dtype; every check of
    // read_cache_file); ask_cache answers questions from an opened cache without prefilling its document (as
    // `varrate ask`).
    void save_cache(const QString& dir, const RunSettings& settings, const CacheSaveRequest& request);
    void open_cache(const QString& dir, const RunSettings& settings, const QString& path);
    void ask_cache(std::shared_ptr<const OpenedCache> cache, const std::vector<std::string>& questions,
                   const std::vector<std::string>& answer_prefixes, int64_t max_new_tokens);
    // Raises the cancel flag of the running and of every queued job.
    void cancel();

  Q_SIGNALS:
    void started(varrate::viz::JobKind kind);
    void progress(QString stage, qint64 done, qint64 total);
    void model_loaded(varrate::viz::ModelInfo info);
    void document_ready(varrate::viz::GeneratedDocument doc);
    void compare_done(std::shared_ptr<const varrate::viz::RunOutcome> outcome);
    void live_updated(std::shared_ptr<const varrate::viz::RunOutcome> outcome);
    void rate_distortion_ready(std::shared_ptr<const varrate::viz::RateGrid> grid);
    void niah_progress(QString cell, qint64 done, qint64 total, QString stage);
    void niah_done(std::shared_ptr<const varrate::viz::NiahOutcome> outcome);
    void calibrated(varrate::viz::CalibrationOutcome outcome);
    void cache_saved(varrate::viz::CacheSaveOutcome outcome);
    void cache_opened(std::shared_ptr<const varrate::viz::OpenedCache> cache);
    void cache_answered(std::shared_ptr<const varrate::viz::CacheAnswers> answers);
    void failed(QString message);
    void cancelled();
    void finished();  // after every job, whatever its outcome

  private:
    struct State;
    using Job = std::function<void(State&, const JobControl&)>;
    void post(JobKind kind, Job job);

    QThread* thread_ = nullptr;
    QObject* executor_ = nullptr;                            // lives in thread_; jobs run in its event loop
    std::unique_ptr<State> state_;                           // touched only on thread_
    std::vector<std::shared_ptr<std::atomic<bool>>> flags_;  // of queued + running jobs (GUI thread)
    int pending_ = 0;
    std::mutex live_mutex_;
    std::optional<RunSettings> live_pending_;  // the latest settings of a queued live update
};

}  // namespace varrate::viz

Q_DECLARE_METATYPE(varrate::viz::JobKind)
Q_DECLARE_METATYPE(varrate::viz::ModelInfo)
Q_DECLARE_METATYPE(varrate::viz::CalibrationOutcome)
Q_DECLARE_METATYPE(varrate::viz::GeneratedDocument)
Q_DECLARE_METATYPE(std::shared_ptr<const varrate::viz::RunOutcome>)
Q_DECLARE_METATYPE(std::shared_ptr<const varrate::viz::NiahOutcome>)
Q_DECLARE_METATYPE(std::shared_ptr<const varrate::viz::RateGrid>)
Q_DECLARE_METATYPE(varrate::viz::CacheSaveOutcome)
Q_DECLARE_METATYPE(std::shared_ptr<const varrate::viz::OpenedCache>)
Q_DECLARE_METATYPE(std::shared_ptr<const varrate::viz::CacheAnswers>)
