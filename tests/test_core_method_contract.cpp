// The methods' contract through the pipeline, for every registered method (no pinned list): on the fixture
// model, one compare runs them all side by side and each meets its budget rule; a cache compressed, saved
// and reloaded answers as compare does; a NIAH sweep, an eval sweep and a rate-distortion curve each give
// every method its record or point. A new method passes here, or says why it cannot, before it ships.
#include "tests/test_support.h"

#include <filesystem>
#include <set>

#include "base/error.h"
#include "codec/registry.h"
#include "core/cache_file.h"
#include "core/codec_defaults.h"
#include "core/compare.h"
#include "core/suites/eval.h"
#include "core/suites/niah.h"
#include "core/suites/rate_distortion.h"

using namespace varrate;
namespace fs = std::filesystem;

namespace {

const char* kContext =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
    "big red ball. One day, she saw a bird sitting on a tree. The bird was sad because it lost its way home. "
    "Lily wanted to help the bird, so she asked her mom. Her mom said they could look for the bird's nest "
    "together. They walked around the park and looked up in the trees. At last they found a small nest with "
    "two baby birds in it. The bird was very happy and sang a song. Lily smiled and went home with her mom. "
    "The next day, Lily came back to the park. The bird was there and it sang to her again.";

constexpr double kBudget = 0.5;

// Small settings at kBudget, with DuoAttention's streaming heads keeping 8 + 32 tokens: kvpress's 128 + 256
// fill these short documents.
CodecSettings contract_settings(double kappa = kBudget) {
    CodecSettings s = test::small_codec_settings(kappa);
    s.streaming_sink = 8;
    s.streaming_recent = 32;
    return s;
}

std::vector<std::string> all_methods() {
    return method_names();
}

}  // namespace

class TestMethodContract : public QObject {
    Q_OBJECT
  private Q_SLOTS:
    // One compare of every method: each run meets its budget rule (or says why it cannot), and the
    // reference keeps the whole cache.
    void compare_runs_every_method() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const Session& s = *test::shared_fixture_session();
        CompareRequest req;
        req.context = kContext;
        req.questions = {"Who did Lily help?"};
        req.methods = all_methods();
        req.settings = contract_settings();
        req.max_new_tokens = 4;
        const CompareResult r = run_compare(s, req);
        std::set<std::string> seen;
        for (const MethodRun& run : r.runs) {
            const MethodTraits& t = method_traits(run.method);
            const QByteArray n = QByteArray::fromStdString(run.method);
            seen.insert(run.method);
            QVERIFY2(run.infeasible.empty(),
                     qPrintable(n + ": " + QByteArray::fromStdString(run.infeasible)));
            QCOMPARE(run.answers.size(), size_t{1});
            // Within one token per layer of kappa: PyramidKV rounds its depth schedule per layer, as kvpress.
            const double slack = 1.0 / static_cast<double>(run.context_ids.size());
            if (t.budget == BudgetRule::Kappa)
                QVERIFY2(
                    run.footprint_fraction <= kBudget + slack,
                    qPrintable(n + QByteArray(": footprint ") + QByteArray::number(run.footprint_fraction)));
            if (t.budget == BudgetRule::Uncompressed) QCOMPARE(run.footprint_fraction, 1.0);
            if (t.budget == BudgetRule::OwnSettings) QVERIFY(run.footprint_fraction < 1.0);
        }
        QCOMPARE(seen.size(), all_methods().size());
    }

    // Every method's cache, compressed, written and read back, answers what compare answers, without a
    // prefill; a method whose cache cannot be saved says so in one error naming it.
    void every_cache_round_trips() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const Session& s = *test::shared_fixture_session();
        const fs::path out = test::temp_dir("method-contract-cache");
        CompareRequest req;
        req.context = kContext;
        req.questions = {"Who did Lily help?"};
        req.settings = contract_settings();
        req.max_new_tokens = 4;
        req.mode = CompressionMode::QueryAgnostic;
        int saved_files = 0;
        for (const std::string& method : all_methods()) {
            const QByteArray n = QByteArray::fromStdString(method);
            req.methods = {method};
            const MethodRun want = run_compare(s, req).runs.at(0);
            CompressContextRequest c;
            c.context = req.context;
            c.method = method;
            c.settings = req.settings;
            CompressedContext saved;
            try {
                saved = compress_context(s, c);
            } catch (const Error& e) {
                // Only a method that needs the question refuses a query-agnostic cache, and says why.
                QVERIFY2(method_traits(method).probe == MethodProbe::Question,
                         qPrintable(n + ": " + e.what()));
                QVERIFY2(std::string(e.what()).find(method) != std::string::npos, e.what());
                continue;
            }
            const fs::path file = out / (method + ".vrkv");
            write_cache_file(file, saved);
            const CompressedContext loaded = read_cache_file(file, s);
            QCOMPARE(loaded.info.method, method);
            QCOMPARE(loaded.info.stored_bytes, want.stored_bytes);
            const int64_t prefills = s.model().forward_calls();
            const auto got = answer_from_cache(s, loaded, req.questions, {}, req.max_new_tokens);
            QCOMPARE(s.model().forward_calls(), prefills);
            QVERIFY2(got == want.answer_ids, n + ": answers from the saved cache differ from compare's");
            ++saved_files;
        }
        QVERIFY(saved_files >= static_cast<int>(all_methods().size()) - 2);
        fs::remove_all(out);
    }

    // A NIAH sweep and an eval sweep write one record per method (series), and resume with none to do.
    void sweeps_record_every_method() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const Session& s = *test::shared_fixture_session();
        const size_t n = all_methods().size();

        NiahSweepOptions niah;
        niah.lengths = {200};
        niah.depths = {50};
        niah.samples = 1;
        niah.methods = all_methods();
        niah.budgets = {kBudget};
        niah.settings = contract_settings();
        niah.max_new_tokens = 6;
        niah.out_dir = test::temp_dir("method-contract-niah");
        const SweepStats a = run_niah_sweep(s, niah);
        QCOMPARE(a.total, static_cast<int64_t>(n));
        QCOMPARE(a.computed, static_cast<int64_t>(n));
        QCOMPARE(a.documents, int64_t{1});  // one compare serves every method
        const SweepStats again = run_niah_sweep(s, niah);
        QCOMPARE(again.skipped, static_cast<int64_t>(n));
        QCOMPARE(again.computed, int64_t{0});
        const NiahSummary summary = summarize_niah(niah);
        QCOMPARE(summary.series.size(), n);

        // RULER's prompts need the demo model's tokenizer to fit a few hundred tokens (the fixture's 512
        // positions would not hold them); its shipped basis and codec defaults.
        const fs::path demo = test::source_dir() / "resources/models/varrate-demo";
        if (!fs::exists(demo / "model.safetensors")) QSKIP("the demo model is not in this checkout");
        RuntimeOptions ro;
        ro.threads = 2;
        const auto demo_session = Session::open(demo, ro);
        EvalSweepOptions eval;
        eval.tasks = {"niah_single_1"};
        eval.lengths = {400};
        eval.samples = 1;
        eval.methods = all_methods();
        eval.budgets = {kBudget};
        eval.settings = default_codec_settings(demo);
        eval.settings.budget = kBudget;
        eval.settings.streaming_sink =
            8;  // DuoAttention in a 400-token document (kvpress's 128 + 256 fill it)
        eval.settings.streaming_recent = 32;
        eval.max_new_tokens = 8;
        eval.out_dir = test::temp_dir("method-contract-eval");
        const SweepStats e = run_eval_sweep(*demo_session, eval);
        QCOMPARE(e.total, static_cast<int64_t>(n));
        QCOMPARE(e.computed, static_cast<int64_t>(n));
        QCOMPARE(e.documents, int64_t{1});
        QCOMPARE(run_eval_sweep(*demo_session, eval).skipped, static_cast<int64_t>(n));
        fs::remove_all(niah.out_dir);
        fs::remove_all(eval.out_dir);
    }

    // A rate-distortion curve has a point for every method at every kappa (the reference once, at 1).
    void rate_distortion_has_every_method() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const Session& s = *test::shared_fixture_session();
        RdRequest req;
        req.methods = all_methods();
        req.kappas = {0.3, 0.5};
        req.answer_at = {0.5};
        req.settings = contract_settings(0.3);
        req.max_new_tokens = 4;
        RdDocument doc;
        doc.id = "file";
        doc.context = kContext;
        doc.questions = {"Who did Lily help?"};
        req.documents = {doc};
        const RdResult r = run_rate_distortion(s, req);
        for (const std::string& method : all_methods()) {
            const MethodTraits& t = method_traits(method);
            const QByteArray n = QByteArray::fromStdString(method);
            if (t.budget != BudgetRule::Kappa) {
                QVERIFY2(!r.points.empty(), n);
                continue;  // the reference and the quantizers: a point of their own
            }
            for (double k : req.kappas) {
                const RdPoint* p = r.find(method, k);
                QVERIFY2(p, qPrintable(n + " at " + QByteArray::number(k)));
                // Within one token per layer (PyramidKV's per-layer rounding, as in compare).
                const double slack = 1.0 / static_cast<double>(r.document_tokens.at(0));
                QVERIFY2(p->infeasible > 0 || p->footprint <= k + slack, n);
            }
        }
    }
};

QTEST_GUILESS_MAIN(TestMethodContract)
#include "test_core_method_contract.moc"
