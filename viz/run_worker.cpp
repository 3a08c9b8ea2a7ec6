#include "viz/run_worker.h"

#include <QDir>
#include <QFileInfo>
#include <QThread>

#include <chrono>
#include <filesystem>
#include <new>

#include <c10/util/Exception.h>

#include "base/error.h"
#include "codec/basis.h"
#include "core/codec_defaults.h"
#include "core/prompt.h"
#include "core/session.h"
#include "models/device.h"
#include "viz/run_model.h"

namespace varrate::viz {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

QString to_string(JobKind kind) {
    switch (kind) {
        case JobKind::Load:
            return QStringLiteral("load");
        case JobKind::Generate:
            return QStringLiteral("generate");
        case JobKind::Compare:
            return QStringLiteral("compare");
        case JobKind::Niah:
            return QStringLiteral("niah");
        case JobKind::Calibrate:
            return QStringLiteral("calibrate");
        case JobKind::Explore:
            return QStringLiteral("explore");
        case JobKind::SaveCache:
            return QStringLiteral("save-cache");
        case JobKind::OpenCache:
            return QStringLiteral("open-cache");
        case JobKind::AskCache:
            return QStringLiteral("ask-cache");
    }
    return {};
}

int64_t default_document_length(int64_t max_positions) {
    // The question and up to ~64 answer tokens follow the context: keep them inside the model's positions.
    return std::clamp<int64_t>(max_positions - 112, 64, 2048);
}

struct RunWorker::State {
    std::shared_ptr<Session> session;
    // The last comparison, kept for live exploration (it refers to `session`: dropped before it), and what
    // its outcomes share (token texts, needle, model).
    std::unique_ptr<LiveCompare> live;
    std::shared_ptr<const RunOutcome> live_base;
    QString dir;
    std::string device, dtype;
    std::shared_ptr<const Tokenizer> gui_tokenizer;
    int64_t loads = 0;  // sessions opened so far: an opened cache's tensors belong to one of them

    Session& ensure(RunWorker& w, const QString& model_dir, const RunSettings& rs, const JobControl& job,
                    bool* reused = nullptr, double* load_s = nullptr) {
        const QString clean = QDir::cleanPath(model_dir);
        if (session && dir == clean && device == rs.device && dtype == rs.dtype) {
            if (reused) *reused = true;
            return *session;
        }
        if (model_dir.trimmed().isEmpty()) throw Error("no model loaded: use File > Open Model");
        const QFileInfo fi(clean);
        if (!fi.exists()) throw Error(clean.toStdString() + ": model directory does not exist");
        if (!fi.isDir()) throw Error(clean.toStdString() + ": not a directory (a model is a directory)");
        live.reset();  // it refers to the session
        live_base.reset();
        session.reset();  // free the previous model before loading the next
        dir.clear();
        const RuntimeOptions ro = resolve_runtime(rs.device, rs.dtype);
        const auto t0 = Clock::now();
        session = Session::open(clean.toStdString(), ro, {}, job);
        ++loads;
        dir = clean;
        device = rs.device;
        dtype = rs.dtype;
        gui_tokenizer = std::make_shared<const Tokenizer>(Tokenizer::load(clean.toStdString()));
        if (reused) *reused = false;
        ModelInfo loaded = info(rs);
        loaded.load_s = seconds_since(t0);
        if (load_s) *load_s = loaded.load_s;
        Q_EMIT w.model_loaded(loaded);
        return *session;
    }

    ModelInfo info(const RunSettings& rs) const {
        ModelInfo m;
        m.model_dir = dir;
        m.name = QFileInfo(dir).fileName();
        const ModelConfig& c = session->model().config();
        m.joint_dim = session->joint_dim();
        m.n_layer = c.n_layer;
        m.max_positions = c.max_position_embeddings;
        m.vocab = session->tokenizer().vocab_size();
        m.basis_source =
            session->shipped_basis() ? QString::fromStdString(session->shipped_source()) : QString();
        m.codec_defaults = session->codec_defaults();
        m.defaults = session->default_codec_settings();
        m.defaults_text =
            QString::fromStdString(describe_codec_defaults(session->joint_dim(), session->codec_defaults()));
        m.device = QString::fromStdString(rs.device);
        m.dtype = QString::fromStdString(dtype_name(session->model().options().dtype));
        m.dtype_reason = QString::fromStdString(session->model().options().dtype_reason);
        m.tokenizer = gui_tokenizer;
        return m;
    }

    // Puts the basis the settings ask for into the session (Session::select_basis); "calibrate now"
    // calibrates on the context part of the prompt built from `context` (none: per-run self-calibration).
    void select_basis(const RunSettings& rs, const std::string& context, const JobControl& job) {
        std::vector<int64_t> context_ids;
        if (rs.basis == BasisChoice::CalibrateNow && !context.empty()) {
            const std::string q = rs.questions.empty() ? std::string() : rs.questions.front();
            context_ids = build_prompt(session->tokenizer(), context, q, rs.chat).context_ids;
        }
        if (rs.basis == BasisChoice::File && rs.basis_file.empty())
            throw Error("basis: 'File' is selected but no basis file is given (Run panel > Basis file)");
        session->select_basis(rs.basis, rs.basis_file, context_ids, rs.codec, job);
    }

    // The kept comparison as an outcome: `step` made it in `ms`.
    std::shared_ptr<const RunOutcome> live_outcome(const QString& step, double ms) const {
        auto out = std::make_shared<RunOutcome>(*live_base);
        out->request = live->request();
        out->result = live->result();
        out->answers_stale = live->answers_stale();
        out->materialised = live->materialised();
        out->captures = live->captures();
        out->held_bytes = live->held_bytes();
        out->prefills = session->model().forward_calls();
        out->step = step;
        out->step_ms = ms;
        return out;
    }

    LiveCompare& kept() const {
        if (!live) throw Error("nothing to explore: run a comparison first");
        return *live;
    }
};

RunWorker::RunWorker(QObject* parent) : QObject(parent), state_(std::make_unique<State>()) {
    qRegisterMetaType<JobKind>();
    qRegisterMetaType<ModelInfo>();
    qRegisterMetaType<CalibrationOutcome>();
    qRegisterMetaType<GeneratedDocument>();
    qRegisterMetaType<std::shared_ptr<const RunOutcome>>();
    qRegisterMetaType<std::shared_ptr<const NiahOutcome>>();
    qRegisterMetaType<std::shared_ptr<const RateGrid>>();
    qRegisterMetaType<CacheSaveOutcome>();
    qRegisterMetaType<std::shared_ptr<const OpenedCache>>();
    qRegisterMetaType<std::shared_ptr<const CacheAnswers>>();
    thread_ = new QThread(this);
    thread_->setObjectName("varrate-worker");
    executor_ = new QObject;
    executor_->moveToThread(thread_);
    connect(thread_, &QThread::finished, executor_, &QObject::deleteLater);
    thread_->start();
}

RunWorker::~RunWorker() {
    for (auto& f : flags_) f->store(true);
    thread_->quit();
    thread_->wait();
    state_.reset();
}

void RunWorker::cancel() {
    for (auto& f : flags_) f->store(true);
    // A queued live update will not run now: the next update_live posts one again.
    const std::lock_guard<std::mutex> lock(live_mutex_);
    live_pending_.reset();
}

void RunWorker::post(JobKind kind, Job job) {
    auto flag = std::make_shared<std::atomic<bool>>(false);
    flags_.push_back(flag);
    ++pending_;
    QMetaObject::invokeMethod(
        executor_,
        [this, kind, flag, job = std::move(job)] {
            JobControl control;
            control.cancel = flag.get();
            control.progress = [this](const std::string& stage, int64_t done, int64_t total) {
                Q_EMIT progress(QString::fromStdString(stage), done, total);
            };
            try {
                check_cancel(control);  // cancelled while queued
                Q_EMIT started(kind);
                job(*state_, control);
            } catch (const Cancelled&) {
                Q_EMIT cancelled();
            } catch (...) {
                Q_EMIT failed(QString::fromStdString(describe_current_exception()));
            }
            QMetaObject::invokeMethod(
                this,
                [this, flag] {
                    flags_.erase(std::remove(flags_.begin(), flags_.end(), flag), flags_.end());
                    --pending_;
                    Q_EMIT finished();
                },
                Qt::QueuedConnection);
        },
        Qt::QueuedConnection);
}

namespace {

GeneratedDocument generate(const Session& s, const NiahDocRequest& req) {
    NiahDocOptions o;
    o.seed = req.seed;
    o.distractors = req.distractors;
    o.chat = req.chat;
    // One document, not a grid: keep the needle a (seed, sample) has always had, as `varrate demo` does.
    o.needles = NeedleProtocol::Fixed;
    NiahGenerator gen(s.tokenizer(), o);
    const int64_t len =
        req.length > 0 ? req.length : default_document_length(s.model().config().max_position_embeddings);
    const NiahDocument d = gen.generate(len, req.depth_percent, req.sample);
    GeneratedDocument g;
    g.context = QString::fromStdString(d.context);
    g.question = QString::fromStdString(d.question);
    g.answer_prefix = QString::fromStdString(d.answer_prefix);
    g.expected = QString::fromStdString(d.expected);
    g.needle = QString::fromStdString(d.needle);
    g.tokens = d.context_tokens;
    g.depth_percent = req.depth_percent;
    return g;
}

}  // namespace

void RunWorker::load_model(const QString& dir, const RunSettings& settings,
                           std::optional<NiahDocRequest> doc) {
    post(JobKind::Load, [this, dir, settings, doc](State& st, const JobControl& job) {
        bool reused = false;
        double load_s = 0;
        Session& s = st.ensure(*this, dir, settings, job, &reused, &load_s);
        if (reused) {
            ModelInfo info = st.info(settings);
            info.reused = true;
            Q_EMIT model_loaded(info);
        }
        if (doc) {
            check_cancel(job);
            if (job.progress) job.progress("generate document", 0, 1);
            Q_EMIT document_ready(generate(s, *doc));
        }
    });
}

void RunWorker::generate_document(const QString& dir, const RunSettings& settings,
                                  const NiahDocRequest& doc) {
    post(JobKind::Generate, [this, dir, settings, doc](State& st, const JobControl& job) {
        Session& s = st.ensure(*this, dir, settings, job);
        if (job.progress) job.progress("generate document", 0, 1);
        Q_EMIT document_ready(generate(s, doc));
    });
}

void RunWorker::run_compare(const QString& dir, const RunSettings& settings, const QString& document,
                            const QString& needle) {
    post(JobKind::Compare, [this, dir, settings, document, needle](State& st, const JobControl& job) {
        const auto t0 = Clock::now();
        if (settings.methods.empty()) throw Error("no method selected: tick at least one in the Run panel");
        if (document.trimmed().isEmpty()) throw Error("the document is empty: open, paste or generate one");
        Session& s = st.ensure(*this, dir, settings, job);
        st.live.reset();  // a new run replaces what was explored (and its memory) first
        st.live_base.reset();
        auto base = std::make_shared<RunOutcome>();
        CompareRequest request = settings.request(document.toStdString());
        // A budget a method cannot meet is marked in its row rather than stopping the run (and every live
        // step that passes through it).
        request.skip_infeasible = true;
        st.select_basis(settings, request.context, job);
        // The run is kept alive: the live controls re-allocate it (update_live) without a prefill.
        auto live = std::make_unique<LiveCompare>(s, request, job);
        live->decode(job);
        const CompareResult first = live->result();
        if (!first.runs.empty())
            base->token_texts = token_display_texts(s.tokenizer(), first.runs[0].context_ids);
        base->needle_span = text_token_span(base->token_texts, needle.trimmed());
        base->model_dir = st.dir;
        base->run = settings;
        base->wall_s = seconds_since(t0);
        st.live = std::move(live);
        st.live_base = base;
        Q_EMIT compare_done(st.live_outcome("run", base->wall_s * 1000));
    });
}

bool RunWorker::update_live(const RunSettings& settings) {
    {
        const std::lock_guard<std::mutex> lock(live_mutex_);
        const bool queued = live_pending_.has_value();
        live_pending_ = settings;
        if (queued) return false;  // the queued update takes these settings
    }
    post(JobKind::Explore, [this](State& st, const JobControl& job) {
        std::optional<RunSettings> rs;
        {
            const std::lock_guard<std::mutex> lock(live_mutex_);
            rs.swap(live_pending_);
        }
        if (!rs) return;
        LiveCompare& live = st.kept();
        const auto t0 = Clock::now();
        const LiveUpdateCost cost = live.update_cost(rs->codec);
        live.update(rs->codec, {rs->codec.budget}, job);
        const QString step = cost == LiveUpdateCost::Allocate  ? QStringLiteral("allocate")
                             : cost == LiveUpdateCost::Analyse ? QStringLiteral("analyse")
                             : cost == LiveUpdateCost::Refit   ? QStringLiteral("refit")
                                                               : QStringLiteral("capture");
        Q_EMIT live_updated(st.live_outcome(step, seconds_since(t0) * 1000));
    });
    return true;
}

void RunWorker::decode_live() {
    post(JobKind::Explore, [this](State& st, const JobControl& job) {
        LiveCompare& live = st.kept();
        const auto t0 = Clock::now();
        live.decode(job);
        Q_EMIT live_updated(st.live_outcome(QStringLiteral("decode"), seconds_since(t0) * 1000));
    });
}

void RunWorker::live_rate_distortion(const std::vector<double>& kappas, bool attention_output) {
    post(JobKind::Explore, [this, kappas, attention_output](State& st, const JobControl& job) {
        LiveCompare& live = st.kept();
        auto grid = std::make_shared<RateGrid>();
        grid->points = live.rate_distortion(kappas, attention_output, job);
        grid->settings = live.request().settings;
        grid->attention_output = attention_output;
        Q_EMIT rate_distortion_ready(grid);
    });
}

void RunWorker::run_niah(const QString& dir, const RunSettings& settings, const NiahSweepOptions& options) {
    post(JobKind::Niah, [this, dir, settings, options](State& st, const JobControl& job) {
        Session& s = st.ensure(*this, dir, settings, job);
        if (options.out_dir.empty()) throw Error("NIAH sweep: choose an output folder");
        // Every sweep document is different: "calibrate now" means the per-document self-calibration.
        st.select_basis(settings, std::string(), job);
        auto out = std::make_shared<NiahOutcome>();
        out->out_dir = QString::fromStdString(options.out_dir.string());
        try {
            out->stats = run_niah_sweep(s, options, job, [this](const NiahProgress& p) {
                Q_EMIT niah_progress(QString::fromStdString(p.cell), p.done, p.total,
                                     QString::fromStdString(p.stage));
            });
        } catch (const Cancelled&) {
            out->complete = false;
            out->summary = summarize_niah(options);  // what is finished so far; a rerun resumes
            Q_EMIT niah_done(out);
            throw;
        }
        out->summary = summarize_niah(options);
        write_niah_summary(out->summary, options.out_dir);
        Q_EMIT niah_done(out);
    });
}

void RunWorker::calibrate(const QString& dir, const RunSettings& settings,
                          const CalibrationRequest& request) {
    post(JobKind::Calibrate, [this, dir, settings, request](State& st, const JobControl& job) {
        Session& s = st.ensure(*this, dir, settings, job);
        if (request.files.isEmpty()) throw Error("calibrate: choose at least one text file");
        std::vector<std::filesystem::path> files;
        for (const QString& f : request.files) files.emplace_back(f.toStdString());
        const std::filesystem::path out = request.out.isEmpty()
                                              ? std::filesystem::path(st.dir.toStdString()) / kBasisFile
                                              : std::filesystem::path(request.out.toStdString());
        // The same core steps as `varrate calibrate --text-file ...`: tokenize and cut, calibrate, save.
        const auto texts = s.calibration_texts(files, settings.codec, request.max_tokens);
        auto basis =
            std::make_shared<Basis>(s.calibrate(texts, settings.codec, settings.codec.rank, false, job));
        check_cancel(job);
        basis->save(out);
        s.set_shipped_basis(basis, out.string());
        CalibrationOutcome o;
        o.path = QString::fromStdString(out.string());
        o.layers = basis->n_layer();
        o.dim = basis->info().dim;
        o.rank = basis->info().rank;
        o.tokens = basis->info().calibration_tokens;
        Q_EMIT calibrated(o);
    });
}

namespace {

// " (the cache was made at bf16 ...)" when the file differs from the session's model in the cache dtype
// alone; "" otherwise (or when the file cannot say).
std::string dtype_hint(const std::filesystem::path& file, const Session& s) {
    nlohmann::json there, here = model_identity(s.model().config(), s.model().options().dtype);
    try {
        there = read_cache_file_info(file).model;
    } catch (const std::exception&) {
        return {};
    }
    if (!there.is_object() || !there.contains("cache_dtype") || there["cache_dtype"] == here["cache_dtype"])
        return {};
    const std::string want = there["cache_dtype"].is_string() ? there["cache_dtype"].get<std::string>() : "";
    const std::string have = here["cache_dtype"].get<std::string>();
    there.erase("cache_dtype");
    here.erase("cache_dtype");
    if (want.empty() || there != here) return {};
    return " (the cache was made at " + want + " and the model is loaded at " + have + ": choose " + want +
           " as the Run panel's dtype and open the cache again, which loads the model at it)";
}

}  // namespace

void RunWorker::save_cache(const QString& dir, const RunSettings& settings, const CacheSaveRequest& request) {
    post(JobKind::SaveCache, [this, dir, settings, request](State& st, const JobControl& job) {
        const auto t0 = Clock::now();
        if (request.context.empty()) throw Error("the run has no document to compress");
        Session& s = st.ensure(*this, dir, settings, job);
        // The basis the run used (shipped, a file, or calibrated on this document), so that the cache is
        // the one whose answers the answers table shows.
        st.select_basis(settings, request.context, job);
        CompressContextRequest c;
        c.context = request.context;
        c.method = request.method;
        c.settings = settings.codec;
        c.chat = request.chat;
        c.max_new_tokens = request.max_new_tokens;
        const CompressedContext ctx = compress_context(s, c, job);
        check_cancel(job);
        const std::filesystem::path path(request.path.toStdString());
        CacheSaveOutcome out;
        out.path = request.path;
        out.info = write_cache_file(path, ctx);
        out.file_bytes = static_cast<int64_t>(std::filesystem::file_size(path));
        out.wall_s = seconds_since(t0);
        Q_EMIT cache_saved(out);
    });
}

void RunWorker::open_cache(const QString& dir, const RunSettings& settings, const QString& path) {
    post(JobKind::OpenCache, [this, dir, settings, path](State& st, const JobControl& job) {
        Session& s = st.ensure(*this, dir, settings, job);
        const auto t0 = Clock::now();
        const std::filesystem::path file(path.toStdString());
        auto out = std::make_shared<OpenedCache>();
        try {
            out->context = std::make_shared<const CompressedContext>(read_cache_file(file, s));
        } catch (const Error& e) {
            // The model runs at the Run panel's dtype, and a cache made by the same model at another dtype is
            // refused as another model: say which setting makes it fit.
            const std::string hint = dtype_hint(file, s);
            if (hint.empty()) throw;
            throw Error(std::string(e.what()) + hint);
        }
        out->path = path;
        out->model_dir = st.dir;
        out->model_load = st.loads;
        out->prefills = s.model().forward_calls();
        out->file_bytes = static_cast<int64_t>(std::filesystem::file_size(file));
        out->load_ms = seconds_since(t0) * 1000;
        Q_EMIT cache_opened(out);
    });
}

void RunWorker::ask_cache(std::shared_ptr<const OpenedCache> cache, const std::vector<std::string>& questions,
                          const std::vector<std::string>& answer_prefixes, int64_t max_new_tokens) {
    post(JobKind::AskCache,
         [this, cache, questions, answer_prefixes, max_new_tokens](State& st, const JobControl& job) {
             if (!cache || !cache->context)
                 throw Error("no compressed cache is open: File > Open Compressed Cache");
             if (!st.session || st.loads != cache->model_load)
                 throw Error("the model was loaded again since " + cache->path.toStdString() +
                             " was opened: open the cache again");
             const Session& s = *st.session;
             const auto t0 = Clock::now();
             const int64_t prefills = s.model().forward_calls();
             auto out = std::make_shared<CacheAnswers>();
             out->questions = questions;
             out->answer_prefixes = answer_prefixes;
             out->max_new_tokens = max_new_tokens;
             out->answer_ids =
                 answer_from_cache(s, *cache->context, questions, answer_prefixes, max_new_tokens, job);
             // Decoded as compare decodes its answers, so that the strings compare equal too.
             for (const auto& ids : out->answer_ids) out->answers.push_back(s.tokenizer().decode(ids, true));
             out->prefills = s.model().forward_calls() - prefills;
             out->ms = seconds_since(t0) * 1000;
             Q_EMIT cache_answered(out);
         });
}

}  // namespace varrate::viz
