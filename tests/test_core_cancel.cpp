// Cancel at every stage returns within a second on the CPU and leaves the session as it was. Each job (load,
// tokenize + prefill by chunk + each codec stage + decoding in a comparison, perplexity, calibration, a NIAH
// sweep, an evaluation sweep) runs once uncancelled on the demo model, then on a worker thread that the test
// cancels at random times within the uncancelled run's wall time (seeded: VARRATE_TEST_SEED, printed). The
// time from raising the flag to the worker's return must stay under 1 s, and afterwards the same job gives
// the uncancelled run's result again (a sweep resumes to the same records).
#include <QtTest/QtTest>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/file_io.h"
#include "core/compare.h"
#include "core/session.h"
#include "core/suites/demo_corpus.h"
#include "core/suites/eval.h"
#include "core/suites/niah.h"
#include "test_support.h"

namespace fs = std::filesystem;
using namespace varrate;

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kCancelLimitMs = 1000;
constexpr int kCancelsPerJob = 4;

double ms_since(Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

fs::path demo_dir() {
    return test::source_dir() / "resources/models/varrate-demo";
}
RuntimeOptions two_threads() {
    RuntimeOptions ro;
    ro.threads = 2;
    return ro;
}

std::string demo_text(int64_t sentences, uint64_t seed) {
    DemoTextGenerator gen(seed);
    std::string text;
    for (int64_t i = 0; i < sentences; ++i) text += (i ? " " : "") + gen.filler_sentence();
    return text;
}

// A job's result in a form two runs can be compared by: what it computed, no timings.
using Job = std::function<nlohmann::json(const JobControl&)>;

struct CancelOutcome {
    bool cancelled = false;  // false: it finished before the flag was raised or looked at
    double latency_ms = 0;   // from raising the flag to the job's return
};

// Runs `job` on a worker thread and raises its cancel flag after `delay_ms`.
CancelOutcome cancel_after(const Job& job, double delay_ms) {
    std::atomic<bool> cancel{false}, returned{false};
    CancelOutcome out;
    std::exception_ptr failure;
    Clock::time_point raised{}, done{};
    std::thread worker([&] {
        JobControl control;
        control.cancel = &cancel;
        try {
            job(control);
        } catch (const Cancelled&) {
            out.cancelled = true;
        } catch (...) {
            failure = std::current_exception();
        }
        done = Clock::now();
        returned = true;
    });
    const auto start = Clock::now();
    while (!returned && ms_since(start) < delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    raised = Clock::now();
    cancel = true;
    worker.join();
    if (failure) std::rethrow_exception(failure);
    out.latency_ms = out.cancelled ? std::chrono::duration<double, std::milli>(done - raised).count() : 0;
    return out;
}

nlohmann::json records_without_timing(const fs::path& out) {
    nlohmann::json all = nlohmann::json::object();
    for (const auto& e : fs::recursive_directory_iterator(out / "records")) {
        if (!e.is_regular_file()) continue;
        nlohmann::json j = read_json_file(e.path());
        for (const char* k : {"timestamp", "durations", "prefill_ms", "compress_ms", "document_ms"})
            j.erase(k);
        all[fs::relative(e.path(), out).string()] = j;
    }
    return all;
}

}  // namespace

class TestCancel : public QObject {
    Q_OBJECT
    std::unique_ptr<Session> session_;
    std::mt19937 rng_;
    std::vector<double> latencies_;

    // The reference run, then kCancelsPerJob cancelled runs at random times, then the reference again.
    void check_job(const char* name, const Job& job, const std::function<void()>& reset = {}) {
        if (reset) reset();
        const auto t0 = Clock::now();
        const nlohmann::json reference = job({});
        const double wall_ms = ms_since(t0);
        std::uniform_real_distribution<double> at(0.0, wall_ms);
        int cancelled = 0;
        double worst = 0;
        for (int k = 0; k < kCancelsPerJob; ++k) {
            if (reset) reset();
            const double delay = at(rng_);
            const CancelOutcome c = cancel_after(job, delay);
            if (!c.cancelled) continue;
            ++cancelled;
            worst = std::max(worst, c.latency_ms);
            latencies_.push_back(c.latency_ms);
            QVERIFY2(c.latency_ms < kCancelLimitMs,
                     qPrintable(QString("%1: cancelled after %2 ms returned %3 ms later")
                                    .arg(name)
                                    .arg(delay, 0, 'f', 0)
                                    .arg(c.latency_ms, 0, 'f', 0)));
        }
        qInfo("%s: uncancelled %.0f ms; %d of %d runs cancelled, slowest return %.1f ms", name, wall_ms,
              cancelled, kCancelsPerJob, worst);
        // State intact: the same job (a sweep: resumed over what the cancelled runs kept) gives the same
        // result.
        const nlohmann::json again = job({});
        QVERIFY2(again == reference,
                 qPrintable(QString("%1: the result after cancelling differs").arg(name)));
    }

  private Q_SLOTS:
    void initTestCase() {
        rng_.seed(qEnvironmentVariableIsSet("VARRATE_TEST_SEED")
                      ? static_cast<uint32_t>(qEnvironmentVariableIntValue("VARRATE_TEST_SEED"))
                      : 1203u);
        qInfo("cancel times from seed %s (VARRATE_TEST_SEED)", qEnvironmentVariableIsSet("VARRATE_TEST_SEED")
                                                                   ? qgetenv("VARRATE_TEST_SEED").constData()
                                                                   : "1203");
        session_ = Session::open(demo_dir(), two_threads());
    }

    void cancel_load() {
        check_job("load", [](const JobControl& job) {
            const auto s = Session::open(demo_dir(), two_threads(), {}, job);
            return nlohmann::json(s->fingerprint());
        });
    }

    // Tokenizing a ~3000-token document, prefilling it in chunks of 512, every codec stage of four methods
    // and 24 decoded tokens per method.
    void cancel_compare() {
        const std::string context = demo_text(300, 7);
        check_job("compare", [&](const JobControl& job) {
            CompareRequest req;
            req.context = context;
            req.questions = {DemoTextGenerator::question("amberfox")};
            req.methods = {"full", "varrate", "flat", "snapkv"};
            req.settings = session_->default_codec_settings();
            req.settings.budget = 0.3;
            req.max_new_tokens = 24;
            const CompareResult r = run_compare(*session_, req, job);
            nlohmann::json out = nlohmann::json::array();
            for (const MethodRun& run : r.runs)
                out.push_back({run.method, run.answers, run.footprint_fraction});
            return out;
        });
    }

    void cancel_perplexity() {
        const std::vector<int64_t> ids = session_->tokenizer().encode(demo_text(200, 11), true);
        check_job("perplexity", [&](const JobControl& job) {
            PplRequest req;
            req.ids = ids;
            req.prefix_tokens = static_cast<int64_t>(ids.size()) * 3 / 4;
            req.methods = {"full", "varrate", "snapkv"};
            req.settings = session_->default_codec_settings();
            req.settings.budget = 0.3;
            nlohmann::json out = nlohmann::json::array();
            for (const PplRun& r : run_perplexity(*session_, req, job)) out.push_back({r.method, r.nll});
            return out;
        });
    }

    void cancel_calibration() {
        const CodecSettings settings = session_->default_codec_settings();
        std::vector<std::vector<int64_t>> texts;
        for (uint64_t seed : {21, 22, 23})
            texts.push_back(session_->tokenizer().encode(demo_text(120, seed), true));
        check_job("calibrate", [&](const JobControl& job) {
            const Basis b = session_->calibrate(texts, settings, settings.rank, false, job);
            return nlohmann::json(b.info().calibration_tokens);
        });
    }

    void cancel_niah_sweep() {
        const fs::path out = test::temp_dir("cancel-niah");
        NiahSweepOptions o;
        o.lengths = {600};
        o.depths = {0, 50, 100};
        o.samples = 2;
        o.methods = {"full", "snapkv", "varrate"};
        o.budgets = {0.3};
        o.settings = session_->default_codec_settings();
        o.max_new_tokens = 8;
        o.out_dir = out;
        check_job(
            "niah sweep",
            [&](const JobControl& job) {
                run_niah_sweep(*session_, o, job);
                return records_without_timing(out);
            },
            [&] { fs::remove_all(out / "records"); });
        fs::remove_all(out);
    }

    void cancel_eval_sweep() {
        const fs::path out = test::temp_dir("cancel-eval");
        EvalSweepOptions o;
        o.tasks = {"niah_single_1", "niah_single_2"};
        o.lengths = {400};
        o.samples = 3;
        o.methods = {"full", "snapkv"};
        o.budgets = {0.3};
        o.settings.window = 16;
        o.settings.obs_window = 16;
        o.max_new_tokens = 12;
        o.out_dir = out;
        check_job(
            "eval sweep",
            [&](const JobControl& job) {
                run_eval_sweep(*session_, o, job);
                return records_without_timing(out);
            },
            [&] { fs::remove_all(out / "records"); });
        fs::remove_all(out);
    }

    void cleanupTestCase() {
        if (latencies_.empty()) return;
        std::sort(latencies_.begin(), latencies_.end());
        qInfo("%zu cancellations: median %.1f ms, slowest %.1f ms (limit %.0f ms)", latencies_.size(),
              latencies_[latencies_.size() / 2], latencies_.back(), kCancelLimitMs);
    }
};

QTEST_GUILESS_MAIN(TestCancel)
#include "test_core_cancel.moc"
