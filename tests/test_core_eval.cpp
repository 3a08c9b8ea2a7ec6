// Task-suite sweeps (core/eval.h): records per sample, scores equal to the scorer's on the regenerated
// sample, paired statistics recomputed from the records, kvpress's layout, resume, shards, and the CLI.
#include "tests/test_support.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/file_io.h"
#include "core/compare.h"
#include "core/session.h"
#include "core/suites/eval.h"
#include "core/suites/longbench.h"
#include "core/suites/longbench_metrics.h"
#include "core/suites/niah_record.h"
#include "core/suites/stats.h"

namespace fs = std::filesystem;
using namespace varrate;

using varrate::test::CliResult;
using varrate::test::run_varrate;

namespace {

EvalSweepOptions tiny_eval(const fs::path& out) {
    EvalSweepOptions o;
    o.tasks = {"niah_single_1", "niah_single_2"};
    o.lengths = {400};
    o.samples = 3;
    o.methods = {"full", "snapkv"};
    o.budgets = {0.3};
    o.settings.window = 16;
    o.settings.obs_window = 16;
    o.max_new_tokens = 16;
    o.out_dir = out;
    return o;
}

// The demo model (part of the repository): its tokenizer fits RULER's prompts at a few hundred tokens, where
// the stories260k fixture's 512 positions would not hold them.
fs::path demo_dir() {
    return varrate::test::source_dir() / "resources/models/varrate-demo";
}
std::unique_ptr<Session> demo_session() {
    RuntimeOptions ro;
    ro.threads = 2;
    return Session::open(demo_dir(), ro);
}

std::map<std::string, nlohmann::json> read_records(const fs::path& out) {
    std::map<std::string, nlohmann::json> files;
    for (const auto& e : fs::recursive_directory_iterator(out / "records"))
        if (e.is_regular_file()) {
            nlohmann::json j = nlohmann::json::parse(read_text_file(e.path()));
            j.erase("durations");
            j.erase("timestamp");
            files[fs::relative(e.path(), out).string()] = j;
        }
    return files;
}

}  // namespace

class TestEval : public QObject {
    Q_OBJECT
  private Q_SLOTS:
    // Fewer than 1000 bootstrap resamples are refused before any work (the interval's ends would be noise).
    void few_bootstrap_resamples_are_refused() {
        const auto session = demo_session();
        EvalSweepOptions o = tiny_eval(varrate::test::temp_dir("eval-bootstrap"));
        o.bootstrap_resamples = 999;
        EXPECT_ERROR(run_eval_sweep(*session, o, {}), "--bootstrap 999 is below 1000 resamples");
        QVERIFY(!fs::exists(o.out_dir / "records"));
    }

    // A length too short for one of the tasks is refused before any work, not when the sweep reaches it: the
    // tasks before it run nothing.
    void a_length_too_short_for_a_task_is_refused_first() {
        const auto session = demo_session();
        EvalSweepOptions o = tiny_eval(varrate::test::temp_dir("eval-too-short"));
        o.tasks = {"niah_single_1", "cwe"};  // cwe's smallest prompt is far longer than 400 tokens
        EXPECT_ERROR(run_eval_sweep(*session, o, {}), "cwe at length 400 is too short");
        QVERIFY(!fs::exists(o.out_dir / "records"));
    }

    // PyramidKV's fallback to SnapKV's counts (L x kappa below 20 x the window, as kvpress) is counted per
    // summary cell and written in summary.json; a valid schedule counts none.
    void pyramidkv_fallback_is_counted_in_the_summary() {
        const auto session = demo_session();
        EvalSweepOptions o = tiny_eval(varrate::test::temp_dir("eval-pyramidkv"));
        o.tasks = {"niah_single_1"};
        o.samples = 2;
        o.methods = {"full", "pyramidkv"};
        o.budgets = {0.2, 0.9};  // L = 400, window 16: 80 and 360 against 20 x 16 = 320
        run_eval_sweep(*session, o, {});
        const EvalSummary s = summarize_eval(o);
        std::map<double, int64_t> fallback;
        for (const EvalCell& c : s.overall)
            if (c.method == "pyramidkv") fallback[c.budget] = c.schedule_fallback;
        QCOMPARE(fallback, (std::map<double, int64_t>{{0.2, 2}, {0.9, 0}}));
        for (const EvalCell& c : s.cells)
            if (c.method == "pyramidkv")
                QCOMPARE(c.schedule_fallback, c.budget < 0.5 ? int64_t{2} : int64_t{0});
        const nlohmann::json j = to_json(s);
        int64_t written = 0;
        for (const auto& c : j["overall"])
            if (c.contains("schedule_fallback")) written += c["schedule_fallback"].get<int64_t>();
        QCOMPARE(written, int64_t{2});
    }

    // LongBench's samsum stops at a newline (stop_at_newline, as pred.py's second eos_token_id): an answer
    // with stop ids ends at the first of them, kept, and is the start of the free answer.
    void stop_ids_end_answers() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const auto session = test::open_fixture_session();
        CompareRequest req;
        for (int i = 0; i < 6; ++i)
            req.context +=
                "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
                "park. One day, she saw a big red ball near the tree. The ball belonged to a boy named "
                "Tom. ";
        req.questions = {"Who had the red ball?"};
        req.methods = {"full"};
        req.mode = CompressionMode::QueryAgnostic;
        req.max_new_tokens = 40;
        const std::vector<int64_t> free_answer = run_compare(*session, req).runs.at(0).answer_ids.at(0);
        const int64_t newline = session->tokenizer().encode("\n", false).back();
        const auto first = std::find(free_answer.begin(), free_answer.end(), newline);
        QVERIFY2(first != free_answer.end() && first + 1 != free_answer.end(),
                 "no newline inside the answer");
        req.stop_ids = {newline};
        const std::vector<int64_t> stopped = run_compare(*session, req).runs.at(0).answer_ids.at(0);
        QCOMPARE(stopped, std::vector<int64_t>(free_answer.begin(), first + 1));
    }

    void sweep_records_statistics_and_kvpress_layout() {
        const auto session = demo_session();
        const fs::path out = varrate::test::temp_dir("eval-sweep");
        const EvalSweepOptions o = tiny_eval(out);
        const EvalSweepStats st = run_eval_sweep(*session, o, {});
        QCOMPARE(st.total, int64_t{12});  // 2 tasks x 3 samples x (full, snapkv at 0.3)
        QCOMPARE(st.computed, int64_t{12});
        QCOMPARE(st.documents, int64_t{6});  // one capture per sample serves both methods

        // Every record's score is the scorer's on the regenerated sample and the recorded prediction.
        RulerOptions ro;
        RulerGenerator gen(session->tokenizer(), ro);
        std::map<std::pair<std::string, int64_t>, double> full, snap;
        for (const std::string& task : o.tasks)
            for (int64_t s = 0; s < o.samples; ++s) {
                const RulerSample sample = gen.generate(task, 400, s);
                for (const char* m : {"full", "snapkv"}) {
                    const fs::path p = eval_record_path(out, m, 0.3, task, 400, s);
                    const EvalRecord r =
                        eval_record_from_json(nlohmann::json::parse(read_text_file(p)), p.string());
                    QCOMPARE(r.answers, sample.outputs);
                    QCOMPARE(r.question, sample.question);
                    QVERIFY(r.score.has_value());
                    // string_match_all, spelled out: the share of references that occur in the prediction,
                    // case-insensitively (RULER's niah_single_* have one reference: 0 or 100).
                    auto lower = [](std::string t) {
                        std::transform(t.begin(), t.end(), t.begin(),
                                       [](unsigned char c) { return std::tolower(c); });
                        return t;
                    };
                    int found = 0;
                    for (const std::string& ref : sample.outputs)
                        found += lower(r.prediction).find(lower(ref)) != std::string::npos ? 1 : 0;
                    QCOMPARE(*r.score, 100.0 * found / static_cast<double>(sample.outputs.size()));
                    QCOMPARE(r.max_new_tokens, int64_t{16});
                    (std::string(m) == "full" ? full : snap)[{task, s}] = *r.score;
                    if (std::string(m) == "snapkv") QVERIFY(std::abs(r.footprint_fraction - 0.3) < 0.01);
                }
            }
        QVERIFY(fs::exists(out / "records/full/niah_single_2/L400_S2.json"));
        QVERIFY(fs::exists(out / "records/snapkv/k0.3/niah_single_1/L400_S0.json"));

        // The summary's statistics are the paired ones recomputed from the records.
        const EvalSummary sum = summarize_eval(o);
        QCOMPARE(sum.cells.size(), size_t{4});  // 2 tasks x 1 length x 2 series
        QCOMPARE(sum.overall.size(), size_t{2});
        std::vector<double> a, b;
        for (const auto& [k, v] : snap) {
            a.push_back(v);
            b.push_back(full.at(k));
        }
        const PairedComparison want = paired_comparison(a, b);
        const EvalCell& overall = sum.overall[1];
        QCOMPARE(overall.method, std::string("snapkv"));
        QCOMPARE(overall.n, int64_t{6});
        QCOMPARE(overall.vs_reference.mean_difference, want.mean_difference);
        QCOMPARE(overall.vs_reference.interval.low, want.interval.low);
        QCOMPARE(overall.vs_reference.interval.high, want.interval.high);
        QCOMPARE(overall.vs_reference.sign_test_p, want.sign_test_p);
        QCOMPARE(sum.overall[0].vs_reference.n, int64_t{0});  // the reference itself
        // Three samples per cell cannot make a difference significant, whatever the scores: each compared
        // cell says so, with its pairs, in summary.json and summary.csv.
        const nlohmann::json sj = to_json(sum);
        int compared = 0;
        for (const auto& cell : sj["cells"]) {
            QCOMPARE(cell["n"].get<int64_t>(), int64_t{3});
            if (!cell.contains("vs_reference")) continue;
            ++compared;
            QCOMPARE(cell["vs_reference"]["n"].get<int64_t>(), int64_t{3});
            QCOMPARE(cell["vs_reference"]["significant"].get<bool>(), false);
            QCOMPARE(cell["vs_reference"]["verdict"].get<std::string>(), std::string("n too small"));
        }
        QCOMPARE(compared, 2);
        QVERIFY(sj["statistics"].get<std::string>().find("not corrected for multiple comparisons") !=
                std::string::npos);
        QVERIFY(eval_summary_csv(sum).find(",3,n too small\n") != std::string::npos);
        double second_full = 0;
        for (int64_t s = 0; s < 3; ++s) second_full += full.at({"niah_single_2", s});
        const EvalCell& second = sum.cells[2];
        QCOMPARE(second.task, std::string("niah_single_2"));
        QCOMPARE(second.method, std::string("full"));
        QVERIFY(std::abs(second.mean - second_full / 3) < 1e-9);

        // kvpress's layout: one folder per (length, press, compression ratio).
        write_eval_summary(sum, o);
        const std::string model = sum.model;
        const fs::path kv_full = out / "kvpress" / ("ruler__400__" + model + "__no_press__0.00");
        const fs::path kv_snap = out / "kvpress" / ("ruler__400__" + model + "__snapkv__0.70");
        for (const fs::path& d : {kv_full, kv_snap})
            for (const char* f : {"config.yaml", "metrics.json", "predictions.csv"})
                QVERIFY2(fs::exists(d / f), (d / f).string().c_str());
        const nlohmann::json metrics = nlohmann::json::parse(read_text_file(kv_full / "metrics.json"));
        QCOMPARE(metrics["niah_single_2"]["string_match"].get<double>(),
                 std::round(second_full / 3 * 100) / 100);
        const std::string csv = read_text_file(kv_snap / "predictions.csv");
        QVERIFY(
            csv.rfind("question,answer_prefix,answer,task,max_new_tokens,predicted_answer,compression_ratio,",
                      0) == 0);
        QCOMPARE(std::count(csv.begin(), csv.end(), '\n') >= 7,
                 true);  // header + 6 samples (quoted newlines may add)
        const std::string yaml = read_text_file(kv_snap / "config.yaml");
        QVERIFY2(yaml.find("press_name: 'snapkv'\ncompression_ratio: 0.7\n") != std::string::npos,
                 yaml.c_str());
        QVERIFY(yaml.find("data_dir: '400'") != std::string::npos);
        const std::string summary_csv = read_text_file(out / "summary.csv");
        QVERIFY(summary_csv.find("\nall,0,snapkv,0.3,6,") != std::string::npos);

        // Resume: nothing left to run. Another sweep's settings in the same folder: refused by name.
        QCOMPARE(run_eval_sweep(*session, o, {}).computed, int64_t{0});
        EvalSweepOptions other = o;
        other.settings.window = 24;
        EXPECT_ERROR(run_eval_sweep(*session, other, {}), "written by a different sweep", "settings");

        // Three shards into another folder: the same records and summary.
        const fs::path split = varrate::test::temp_dir("eval-split");
        EvalSweepOptions part = o;
        part.out_dir = split;
        for (int64_t i = 0; i < 3; ++i) {
            part.shard = parse_shard(std::to_string(i) + "/3");
            QCOMPARE(run_eval_sweep(*session, part, {}).documents, int64_t{2});
        }
        QVERIFY(read_records(out) == read_records(split));
        QVERIFY(to_json(summarize_eval(read_eval_grid(split))) == to_json(sum));

        // Bad grids are named.
        EvalSweepOptions bad = o;
        bad.tasks = {"niah_single_9"};
        EXPECT_ERROR(run_eval_sweep(*session, bad, {}), "niah_single_9");
        bad = o;
        bad.reference = "varrate";
        EXPECT_ERROR(run_eval_sweep(*session, bad, {}), "--reference", "varrate");
        fs::remove_all(out);
        fs::remove_all(split);
    }

    // LongBench-format files: datasets as tasks, the shipped templates, middle truncation to --lengths, the
    // dataset's metric on LongBench's decode of the answer, and kvpress's longbench layout.
    void longbench_files_are_a_suite() {
        const auto session = demo_session();
        const fs::path out = varrate::test::temp_dir("eval-longbench");
        const std::string story =
            "Lily had a red ball and a blue kite. She played in the park with her friend Tom every day. ";
        std::string context;
        for (int i = 0; i < 40; ++i) context += story;  // longer than the limit: cut in the middle
        std::string jsonl;
        for (int i = 0; i < 3; ++i)
            jsonl += nlohmann::json{{"input", ""},
                                    {"context", context},
                                    {"answers", {std::to_string(i + 1)}},
                                    {"length", 700},
                                    {"dataset", "passage_count"},
                                    {"all_classes", nullptr},
                                    {"_id", "pc" + std::to_string(i)}}
                         .dump() +
                     "\n";
        for (int i = 0; i < 2; ++i)
            jsonl += nlohmann::json{{"input", "What colour was the kite?"}, {"context", context},
                                    {"answers", {"blue", "a blue kite"}},   {"length", 700},
                                    {"dataset", "multifieldqa_en"},         {"all_classes", nullptr},
                                    {"_id", "mf" + std::to_string(i)}}
                         .dump() +
                     "\n";
        const fs::path file = out / "data.jsonl";
        fs::create_directories(out);
        write_file_atomic(file, jsonl);
        EvalSweepOptions o = tiny_eval(out / "run");
        o.tasks.clear();
        o.longbench_files = {file};
        o.lengths = {300};
        o.max_new_tokens = 8;
        const EvalSweepStats st = run_eval_sweep(*session, o, {});
        QCOMPARE(st.computed, int64_t{10});  // 5 samples x (full, snapkv)
        const EvalSweepOptions r = resolve_eval_suite(o);
        QCOMPARE(r.tasks, (std::vector<std::string>{"passage_count", "multifieldqa_en"}));
        QCOMPARE(r.samples, int64_t{3});
        const LongBenchConfig config = load_longbench_config(find_longbench_config());
        for (const std::string& task : r.tasks)
            for (int64_t i = 0; i < (task == "passage_count" ? 3 : 2); ++i) {
                const fs::path p = eval_record_path(out / "run", "snapkv", 0.3, task, 300, i);
                const EvalRecord rec =
                    eval_record_from_json(nlohmann::json::parse(read_text_file(p)), p.string());
                const LongBenchDataset& ds = config.dataset(task);
                QCOMPARE(rec.metric, to_string(ds.metric));
                QCOMPARE(*rec.score,
                         100.0 * longbench_sample_score(ds.metric, ds.first_line_only, rec.prediction,
                                                        rec.answers, std::nullopt));
                QVERIFY(rec.context_tokens < 300);  // truncated
                QCOMPARE(rec.sample_id, (task == "passage_count" ? "pc" : "mf") + std::to_string(i));
            }
        QVERIFY(!fs::exists(eval_record_path(out / "run", "full", 1, "multifieldqa_en", 300, 2)));
        const EvalSummary sum = summarize_eval(r);
        QCOMPARE(sum.suite, std::string("longbench"));
        QCOMPARE(sum.overall[1].n, int64_t{5});
        write_eval_summary(sum, r);
        const fs::path kv = out / "run" / "kvpress" /
                            ("longbench__passage_count__" + sum.model + "__snapkv__0.70__max_context300");
        const nlohmann::json metric = nlohmann::json::parse(read_text_file(kv / "metrics.json"));
        QVERIFY(metric.is_number());
        QCOMPARE(metric.get<double>(), std::round(sum.cells[1].mean * 100) / 100);
        QCOMPARE(sum.cells[1].task, std::string("passage_count"));
        QVERIFY(read_text_file(kv / "config.yaml").find("max_context_length: 300\n") != std::string::npos);
        // The grid reads back with the files; a dataset the files lack is named.
        QVERIFY(to_json(summarize_eval(read_eval_grid(out / "run"))) == to_json(sum));
        EvalSweepOptions missing = o;
        missing.tasks = {"trec"};
        EXPECT_ERROR(resolve_eval_suite(missing), "no sample of 'trec'");
        fs::remove_all(out);
    }

    void cli_eval_and_summarize() {
        QVERIFY2(fs::exists(varrate::test::bin_dir() / "varrate"),
                 "the varrate executable is not built (the suites depend on it)");
        const fs::path dir = demo_dir();
        const fs::path out = varrate::test::temp_dir("eval-cli");
        const QStringList args = {"eval",
                                  "--model",
                                  QString::fromStdString(dir.string()),
                                  "--tasks",
                                  "niah_single_2",
                                  "--lengths",
                                  "400",
                                  "--samples",
                                  "2",
                                  "--methods",
                                  "full,snapkv",
                                  "--budget",
                                  "0.3",
                                  "--window",
                                  "16",
                                  "--obs-window",
                                  "16",
                                  "--max-new-tokens",
                                  "12",
                                  "--threads",
                                  "2",
                                  "--out",
                                  QString::fromStdString(out.string())};
        const CliResult r = run_varrate(args);
        QVERIFY2(r.exit_code == 0, qPrintable(r.err));
        QVERIFY2(r.out.contains("4 records: 4 computed, 0 reused (2 documents)"), qPrintable(r.out));
        QVERIFY2(r.out.contains("snapkv k0.3") && r.out.contains("overall"), qPrintable(r.out));
        // plots/: a score-vs-kappa image per length, a heatmap per task and the pooled one; a build without
        // Qt Gui says it skipped them.
        const bool no_gui = r.err.contains("plots skipped: this build of varrate has no Qt Gui");
        const QString plots_line = QString::fromStdString("wrote 3 plots in " + (out / "plots").string());
        auto check_plots = [&](const CliResult& res) {
            if (no_gui) return;
            QVERIFY2(res.out.contains(plots_line), qPrintable(res.out + res.err));
            for (const char* f :
                 {"score_vs_kappa_L400.png", "heatmap_niah_single_2.png", "heatmap_all.png"}) {
                const fs::path png = out / "plots" / f;
                QVERIFY2(fs::exists(png), png.string().c_str());
                QVERIFY2(fs::file_size(png) > 4000, png.string().c_str());
                QCOMPARE(read_text_file(png).substr(1, 3), std::string("PNG"));
            }
        };
        check_plots(r);
        if (QTest::currentTestFailed()) return;
        const std::string summary = read_text_file(out / "summary.json");
        fs::remove(out / "summary.json");
        fs::remove_all(out / "plots");
        const CliResult merged = run_varrate({"summarize", QString::fromStdString(out.string())});
        QVERIFY2(merged.exit_code == 0, qPrintable(merged.err));
        QCOMPARE(read_text_file(out / "summary.json"), summary);
        check_plots(merged);
        if (QTest::currentTestFailed()) return;
        QStringList bad = args;
        bad[bad.indexOf("niah_single_2")] = "nope";
        const CliResult refused = run_varrate(bad);
        QCOMPARE(refused.exit_code, 1);
        QVERIFY2(refused.err.contains("nope"), qPrintable(refused.err));
        fs::remove_all(out);
    }
};

QTEST_GUILESS_MAIN(TestEval)
#include "test_core_eval.moc"
