// Needle-in-a-haystack sweeps (core/niah.h): records per method and budget, the older single-budget layout,
// the summary with Wilson intervals, resumability, the needle protocol in the sweep's identity, infeasible
// cells and cancellation, through the library and through `varrate niah`. The documents themselves are
// tested in test_core_niah_document.cpp.
#include "tests/test_support.h"

#include <QProcess>
#include <QRegularExpression>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <csignal>
#include <fstream>
#include <map>
#include <regex>
#include <thread>

#include <signal.h>

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include "base/error.h"
#include "base/file_io.h"
#include "core/compare.h"
#include "core/prompt.h"
#include "core/session.h"
#include "core/suites/niah.h"
#include "core/suites/stats.h"
#include "models/tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using namespace varrate;

using varrate::test::CliResult;
using varrate::test::run_varrate;

namespace {

QString qs(const std::string& s) {
    return QString::fromStdString(s);
}

NiahSweepOptions tiny_sweep(const fs::path& out) {
    NiahSweepOptions o;
    o.lengths = {200};
    o.depths = {0, 100};
    o.samples = 1;
    o.methods = {"full", "snapkv"};
    o.settings.window = 16;
    o.settings.obs_window = 16;
    o.max_new_tokens = 12;
    o.out_dir = out;
    return o;
}

std::map<std::string, std::string> read_records(const fs::path& out) {
    std::map<std::string, std::string> files;
    if (!fs::exists(out / "records")) return files;
    for (const auto& e : fs::recursive_directory_iterator(out / "records"))
        if (e.is_regular_file()) files[fs::relative(e.path(), out).string()] = read_text_file(e.path());
    return files;
}

const char* kHaystackText =
    "The lighthouse keeper counted the waves every evening. Boats came and went, and the gulls followed "
    "them.\nIn winter the café by the harbour closed early; its owner painted the shutters blue.\n\nNobody "
    "remembered when the old bell was last rung. Children still dared each other to climb the tower.";

}  // namespace

class TestNiah : public QObject {
    Q_OBJECT
  private Q_SLOTS:
    void sweep_records_summary_and_resume() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const auto session = test::open_fixture_session();
        const fs::path out = varrate::test::temp_dir("niah-sweep");
        const NiahSweepOptions o = tiny_sweep(out);
        int64_t model_stages = 0;
        auto on_progress = [&](const NiahProgress& p) {
            if (!p.stage.empty()) ++model_stages;
            QVERIFY(p.done <= p.total && p.total == 4);
        };
        const NiahSweepStats first = run_niah_sweep(*session, o, {}, on_progress);
        QCOMPARE(first.total, int64_t{4});
        QCOMPARE(first.computed, int64_t{4});
        QCOMPARE(first.skipped, int64_t{0});
        QCOMPARE(first.documents, int64_t{2});  // one run_compare per document, both methods in it
        QVERIFY(model_stages > 0);

        const auto records = read_records(out);
        QCOMPARE(records.size(), size_t{4});
        const std::regex iso(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)");
        std::map<double, std::string> needle_at_depth;
        for (const std::string& m : o.methods)
            for (double depth : o.depths) {
                const fs::path path = niah_record_path(out, m, o.settings.budget, 200, depth, 0);
                QVERIFY2(fs::exists(path), qPrintable(qs(path.string())));
                const nlohmann::json r = read_json_file(path);
                QCOMPARE(r["model"].get<std::string>(), std::string("stories260k"));
                QCOMPARE(r["method"].get<std::string>(), m);
                QCOMPARE(r["budget"].get<double>(), m == "full" ? 1.0 : o.settings.budget);
                QCOMPARE(r["mode"].get<std::string>(), std::string("query-agnostic"));
                QCOMPARE(r["context_length"].get<int64_t>(), int64_t{200});
                QCOMPARE(r["context_tokens"].get<int64_t>(), int64_t{200});
                QCOMPARE(r["compressed_tokens"].get<int64_t>(), int64_t{200});
                QCOMPARE(r["depth_percent"].get<double>(), depth);
                const std::string response = r["response"].get<std::string>();
                const std::string expected = r["expected"].get<std::string>();
                // Correct: the expected digits occur in the reply, case and surrounding space aside (spelled
                // out here rather than through the function under test).
                std::string low = response;
                std::transform(low.begin(), low.end(), low.begin(),
                               [](unsigned char c) { return std::tolower(c); });
                QVERIFY(!expected.empty() && expected.find_first_not_of("0123456789") == std::string::npos);
                QCOMPARE(r["correct"].get<bool>(), low.find(expected) != std::string::npos);
                QVERIFY(r["needle"].get<std::string>().find(expected) != std::string::npos);
                QVERIFY(r["durations"]["prefill_ms"].get<double>() > 0);
                QVERIFY(std::regex_match(r["timestamp"].get<std::string>(), iso));
                // Both methods saw the same document.
                if (needle_at_depth.count(depth))
                    QCOMPARE(r["needle"].get<std::string>(), needle_at_depth[depth]);
                needle_at_depth[depth] = r["needle"].get<std::string>();
                // SnapKV keeps kappa x L tokens, rounded down by at most one token: its footprint is kappa
                // within 1 / L, never above.
                if (m == "snapkv") {
                    const double fp = r["footprint_fraction"].get<double>(), kappa = o.settings.budget;
                    QVERIFY2(fp <= kappa + 1e-9 && fp >= kappa - 1.0 / 200 - 1e-9,
                             qPrintable(QString::number(fp)));
                }
                // What the method kept of the needle's value: everything for full, a share for SnapKV that
                // matches its per-layer numbers.
                const nlohmann::json& kept = r["needle_retention"]["needle"];
                QVERIFY2(kept.is_object(), qPrintable(qs(r.dump())));
                QVERIFY(kept["tokens"].get<int64_t>() >= 6);
                const auto per_layer = kept["per_layer"]["kept_fraction"].get<std::vector<double>>();
                QCOMPARE(per_layer.size(), static_cast<size_t>(session->model().config().n_layer));
                double mean = 0;
                for (double k : per_layer) mean += k / static_cast<double>(per_layer.size());
                QVERIFY(std::abs(mean - kept["kept_fraction"].get<double>()) < 1e-9);
                if (m == "full") {
                    QCOMPARE(kept["kept_fraction"].get<double>(), 1.0);
                    QCOMPARE(kept["rel_error"].get<double>(), 0.0);
                    QVERIFY(kept["salience_percentile"].is_null());
                } else {
                    QVERIFY(kept["kept_fraction"].get<double>() >= 0 &&
                            kept["kept_fraction"].get<double>() <= 1);
                    QVERIFY(kept["salience_percentile"].is_number());
                }
            }

        NiahSummary summary = summarize_niah(o);
        QCOMPARE(summary.cells.size(), size_t{4});
        for (const NiahCell& c : summary.cells) QCOMPARE(c.n, int64_t{1});
        write_niah_summary(summary, out);
        const nlohmann::json sj = read_json_file(out / "summary.json");
        for (const std::string& m : o.methods)
            for (const char* depth : {"0", "100"}) {
                const bool correct = read_json_file(
                    niah_record_path(out, m, o.settings.budget, 200, std::atof(depth), 0))["correct"];
                const std::string key = niah_series_key(m, o.settings.budget);
                QCOMPARE(sj["accuracy"][key]["200"][depth].get<double>(), correct ? 1.0 : 0.0);
            }
        // The summary's retention is the mean over the method's records, split by outcome.
        for (const std::string& m : o.methods) {
            double kept = 0;
            int64_t right = 0;
            for (double depth : o.depths) {
                const nlohmann::json r =
                    read_json_file(niah_record_path(out, m, o.settings.budget, 200, depth, 0));
                kept += r["needle_retention"]["needle"]["kept_fraction"].get<double>() / 2;
                right += r["correct"].get<bool>() ? 1 : 0;
            }
            const nlohmann::json& t = sj["needle_retention"][niah_series_key(m, o.settings.budget)]["needle"];
            QCOMPARE(t["all"]["records"].get<int64_t>(), int64_t{2});
            QCOMPARE(t["correct"]["records"].get<int64_t>(), right);
            QCOMPARE(t["wrong"]["records"].get<int64_t>(), 2 - right);
            QVERIFY(std::abs(t["all"]["kept_fraction"].get<double>() - kept) < 1e-9);
        }
        const std::string csv = read_text_file(out / "summary.csv");
        QVERIFY(csv.rfind("method,budget,context_length,depth_percent,n,correct,accuracy,ci_low,ci_high,"
                          "infeasible\n",
                          0) == 0);
        QCOMPARE(std::count(csv.begin(), csv.end(), '\n'), 5L);

        // Re-running the finished sweep computes nothing and leaves every record as it was.
        model_stages = 0;
        const NiahSweepStats second = run_niah_sweep(*session, o, {}, on_progress);
        QCOMPARE(second.computed, int64_t{0});
        QCOMPARE(second.skipped, int64_t{4});
        QCOMPARE(second.documents, int64_t{0});
        QCOMPARE(model_stages, int64_t{0});
        QVERIFY(read_records(out) == records);

        // Extending the grid computes only the new cells.
        NiahSweepOptions more = o;
        more.depths = {0, 50, 100};
        const NiahSweepStats third = run_niah_sweep(*session, more, {});
        QCOMPARE(third.computed, int64_t{2});
        QCOMPARE(third.skipped, int64_t{4});

        // Records of another sweep (different codec settings) are never mixed in; another budget is not
        // another sweep (its records sit beside these: see budget_list_records_and_summary).
        NiahSweepOptions other = o;
        other.settings.window = 24;
        EXPECT_ERROR(run_niah_sweep(*session, other, {}), "written by a different sweep", "settings");
        fs::remove_all(out);
    }

    // A sweep dealt to 4 shards writing into one folder gives the records and the summary of one process.
    void shards_together_equal_one_process() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const auto session = test::open_fixture_session();
        const fs::path one = varrate::test::temp_dir("niah-one"),
                       split = varrate::test::temp_dir("niah-split");
        NiahSweepOptions o = tiny_sweep(one);
        o.depths = {0, 50, 100};
        o.samples = 2;  // 6 documents
        QCOMPARE(run_niah_sweep(*session, o, {}).computed, int64_t{12});
        NiahSweepOptions part = o;
        part.out_dir = split;
        int64_t computed = 0;
        for (int64_t i = 0; i < 4; ++i) {
            part.shard = parse_shard(std::to_string(i) + "/4");
            const NiahSweepStats st = run_niah_sweep(*session, part, {});
            QCOMPARE(st.documents, i < 2 ? int64_t{2} : int64_t{1});  // 6 documents dealt round-robin
            computed += st.computed;
        }
        QCOMPARE(computed, int64_t{12});
        // The same records but for the clocks.
        auto strip = [](const std::string& text) {
            nlohmann::json j = nlohmann::json::parse(text);
            for (const char* k : {"durations", "timestamp"}) j.erase(k);
            return j;
        };
        const auto a = read_records(one), b = read_records(split);
        QCOMPARE(a.size(), size_t{12});
        QCOMPARE(b.size(), a.size());
        for (const auto& [path, text] : a) {
            QVERIFY2(b.count(path), path.c_str());
            QVERIFY2(strip(text) == strip(b.at(path)), path.c_str());
        }
        // The summary from the shared folder's sweep.json equals the one process's.
        QCOMPARE(read_text_file(one / kSweepFile), read_text_file(split / kSweepFile));
        const NiahSweepOptions back = read_niah_grid(split);
        QVERIFY(to_json(summarize_niah(back)) == to_json(summarize_niah(o)));
        // A shard resumes like a whole sweep.
        part.shard = parse_shard("1/4");
        QCOMPARE(run_niah_sweep(*session, part, {}).computed, int64_t{0});
        // Bad shards and folders are named.
        EXPECT_ERROR(parse_shard("4/4"), "--shard '4/4'", "0 .. count - 1");
        EXPECT_ERROR(parse_shard("1"), "--shard '1'", "no '/'");
        EXPECT_ERROR(parse_shard("a/2"), "'a' is not a whole number");
        EXPECT_ERROR(parse_shard("0/0"), "at least 1");
        EXPECT_ERROR(read_niah_grid(split / "records"), "no sweep file here");
        fs::remove_all(one);
        fs::remove_all(split);
    }

    // A budget list: one run_compare per document, `full` once (budget 1, records/full/), every other method
    // once per budget (records/<method>/k<budget>/), one summary series per method and budget with Wilson
    // intervals per cell and overall; a longer list computes only the new budget.
    void budget_list_records_and_summary() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const auto session = test::open_fixture_session();
        const fs::path out = varrate::test::temp_dir("niah-budgets");
        NiahSweepOptions o = tiny_sweep(out);
        o.depths = {50};
        o.samples = 2;
        o.budgets = {0.2, 0.5};
        QCOMPARE(niah_record_path(out, "snapkv", 0.5, 200, 50, 1),
                 out / "records/snapkv/k0.5/L200_D50_S1.json");
        QCOMPARE(niah_record_path(out, "full", 0.5, 200, 50, 1), out / "records/full/L200_D50_S1.json");
        const NiahSweepStats first = run_niah_sweep(*session, o, {});
        QCOMPARE(first.total, int64_t{6});  // 2 samples x (full + snapkv at 2 budgets)
        QCOMPARE(first.computed, int64_t{6});
        QCOMPARE(first.documents, int64_t{2});
        const auto records = read_records(out);
        QCOMPARE(records.size(), size_t{6});
        for (int64_t sample : {0, 1}) {
            const std::string full_name = fmt::format("records/full/L200_D50_S{}.json", sample);
            QVERIFY2(records.count(full_name), qPrintable(qs(full_name)));
            const nlohmann::json full = nlohmann::json::parse(records.at(full_name));
            QCOMPARE(full["budget"].get<double>(), 1.0);
            QCOMPARE(full["durations"]["methods_in_document"].get<int64_t>(), int64_t{3});
            double footprint[2] = {0, 0};
            for (int bi = 0; bi < 2; ++bi) {
                const double b = o.budgets[static_cast<size_t>(bi)];
                const std::string name = fmt::format("records/snapkv/k{:g}/L200_D50_S{}.json", b, sample);
                QVERIFY2(records.count(name), qPrintable(qs(name)));
                const nlohmann::json r = nlohmann::json::parse(records.at(name));
                QCOMPARE(r["budget"].get<double>(), b);
                QCOMPARE(r["needle"], full["needle"]);  // the same document for every method and budget
                QVERIFY(r["sweep"]["settings"].is_object() && !r["sweep"]["settings"].contains("budget"));
                QCOMPARE(r["sweep"]["needles"].get<std::string>(), std::string("fresh"));
                footprint[bi] = r["footprint_fraction"].get<double>();
                QVERIFY2(footprint[bi] <= b + 1e-9, qPrintable(qs(r.dump())));
            }
            QVERIFY(footprint[1] > footprint[0] + 0.2);
        }

        NiahSummary summary = summarize_niah(o);
        QCOMPARE(summary.series.size(), size_t{3});
        QCOMPARE(summary.series[0].key(), std::string("full"));
        QCOMPARE(summary.series[1].key(), std::string("snapkv/k0.2"));
        QCOMPARE(summary.series[2].key(), std::string("snapkv/k0.5"));
        QCOMPARE(summary.series[2].label(), std::string("snapkv, budget 0.5"));
        QCOMPARE(summary.cells.size(), size_t{3});
        write_niah_summary(summary, out);
        const nlohmann::json sj = read_json_file(out / "summary.json");
        QCOMPARE(sj["budgets"], nlohmann::json({0.2, 0.5}));
        QCOMPARE(sj["needles"].get<std::string>(), std::string("fresh"));
        const std::string csv = read_text_file(out / "summary.csv");
        for (size_t i = 0; i < 3; ++i) {
            const NiahCell& c = summary.cell(i, 0, 0);
            QCOMPARE(c.method, summary.series[i].method);
            QCOMPARE(c.budget, summary.series[i].budget);
            QCOMPARE(c.n, int64_t{2});
            const Interval ci = wilson_interval(c.correct, 2);
            const nlohmann::json& cj = sj["cells"][i];
            QCOMPARE(cj["budget"].get<double>(), c.budget);
            QCOMPARE(cj["ci_low"].get<double>(), ci.low);
            QCOMPARE(cj["ci_high"].get<double>(), ci.high);
            QVERIFY(cj["ci_low"].get<double>() <= cj["accuracy"].get<double>());
            const nlohmann::json& all = sj["overall"][summary.series[i].key()];
            QCOMPARE(all["n"].get<int64_t>(), int64_t{2});
            QCOMPARE(all["ci_high"].get<double>(), ci.high);
            const std::string line = fmt::format("{},{:g},200,50,2,{},{:.6g},{:.6g},{:.6g},0\n", c.method,
                                                 c.budget, c.correct, c.accuracy(), ci.low, ci.high);
            QVERIFY2(csv.find(line) != std::string::npos, qPrintable(qs(line + " not in\n" + csv)));
        }

        // One more budget: only its records are computed (one document each, snapkv alone in it).
        o.budgets = {0.2, 0.5, 0.3};
        const NiahSweepStats more = run_niah_sweep(*session, o, {});
        QCOMPARE(more.computed, int64_t{2});
        QCOMPARE(more.skipped, int64_t{6});
        QCOMPARE(more.documents, int64_t{2});
        QVERIFY(fs::exists(out / "records/snapkv/k0.3/L200_D50_S0.json"));
        for (const auto& [name, text] : records) QCOMPARE(read_text_file(out / name), text);
        QCOMPARE(summarize_niah(o).series.size(), size_t{4});

        o.budgets = {0.2, 0.2};
        EXPECT_ERROR(run_niah_sweep(*session, o, {}), "--budget", "0.2 is listed twice");
        o.budgets = {0.2, 0};
        EXPECT_ERROR(run_niah_sweep(*session, o, {}), "--budget", "must be a number in (0, 1]");
        fs::remove_all(out);
    }

    // The needle protocol is part of a sweep's identity: records written under one are not resumed under the
    // other, and records written before the protocols existed (no "needles" in their sweep) count as fixed.
    // KIVI's footprint is set by its bits: a grid with two budgets runs it once per document, writes one
    // series (records/kivi2/, no k<budget> folder, budget 1 in its records) and the summary labels it by the
    // mean footprint its records measured.
    void budget_less_method_runs_once() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const auto session = test::open_fixture_session();
        const fs::path out = varrate::test::temp_dir("niah-kivi");
        NiahSweepOptions o = tiny_sweep(out);
        o.depths = {50};
        o.samples = 2;
        o.budgets = {0.2, 0.5};
        o.methods = {"full", "snapkv", "kivi2", "pyramidkv"};
        const NiahSweepStats st = run_niah_sweep(*session, o, {});
        QCOMPARE(st.total, int64_t{12});  // 2 samples x (full + snapkv, pyramidkv at 2 budgets + kivi2 once)
        const auto records = read_records(out);
        QCOMPARE(records.size(), size_t{12});
        // PyramidKV at L 200 with a 16-token window: at kappa 0.2 its schedule is invalid (min = 40 / 20 = 2
        // below the window) and falls back to SnapKV's counts, and its records say so; at 0.5 it is valid at
        // the edge (max = L - w = 184, min = 2 x 100 - 184 = 16 = w); SnapKV's records never say it.
        for (const auto& [name, text] : records) {
            const nlohmann::json r = nlohmann::json::parse(text);
            QCOMPARE(r.value("schedule_fallback", false), name.find("pyramidkv/k0.2/") != std::string::npos);
        }
        double footprints = 0;
        for (int64_t sample : {0, 1}) {
            const std::string name = fmt::format("records/kivi2/L200_D50_S{}.json", sample);
            QVERIFY2(records.count(name), qPrintable(qs(name)));
            const nlohmann::json r = nlohmann::json::parse(records.at(name));
            QCOMPARE(r["budget"].get<double>(), 1.0);
            footprints += r["footprint_fraction"].get<double>();
        }
        for (const auto& [name, text] : records)
            QVERIFY2(name.find("kivi2/k") == std::string::npos, name.c_str());
        const NiahSummary summary = summarize_niah(o);
        std::vector<std::string> keys;
        for (const NiahSeries& ser : summary.series) keys.push_back(ser.key());
        QCOMPARE(keys, (std::vector<std::string>{"full", "snapkv/k0.2", "snapkv/k0.5", "kivi2",
                                                 "pyramidkv/k0.2", "pyramidkv/k0.5"}));
        QCOMPARE(summary.schedule_fallback, (std::vector<int64_t>{0, 0, 0, 0, 2, 0}));
        QVERIFY(std::abs(summary.footprint[3] - footprints / 2) < 1e-12);
        QVERIFY2(summary.footprint[3] > 0.05 && summary.footprint[3] < 1.0,
                 qPrintable(QString::number(summary.footprint[3])));
        QCOMPARE(summary.footprint[0], 1.0);  // full keeps everything
        const nlohmann::json sj = to_json(summary);
        QCOMPARE(sj["series"][3]["takes_budget"].get<bool>(), false);
        QCOMPARE(sj["series"][1]["takes_budget"].get<bool>(), true);
        QVERIFY(std::abs(sj["series"][3]["footprint"].get<double>() - footprints / 2) < 1e-12);
    }

    void needle_protocol_mismatch_is_refused() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const auto session = test::open_fixture_session();
        const fs::path out = varrate::test::temp_dir("niah-protocol");
        NiahSweepOptions fixed = tiny_sweep(out);
        fixed.methods = {"full"};
        fixed.depths = {50};
        fixed.doc.needles = NeedleProtocol::Fixed;
        QCOMPARE(run_niah_sweep(*session, fixed, {}).computed, int64_t{1});
        const fs::path path = niah_record_path(out, "full", 1, 200, 50, 0);
        nlohmann::json record = read_json_file(path);
        QCOMPARE(record["sweep"]["needles"].get<std::string>(), std::string("fixed"));
        NiahSweepOptions fresh = fixed;
        fresh.doc.needles = NeedleProtocol::Fresh;
        EXPECT_ERROR(run_niah_sweep(*session, fresh, {}), path.string(), "written with --needles fixed",
                     "asks for --needles fresh", "--needles fixed to resume");
        // An older record: no protocol recorded.
        record["sweep"].erase("needles");
        write_file_atomic(path, record.dump(2));
        const NiahSweepStats resumed = run_niah_sweep(*session, fixed, {});
        QCOMPARE(resumed.computed, int64_t{0});
        QCOMPARE(resumed.skipped, int64_t{1});
        EXPECT_ERROR(run_niah_sweep(*session, fresh, {}), "written with --needles fixed");
        QCOMPARE(summarize_niah(fixed).cells.at(0).n, int64_t{1});
        fs::remove_all(out);
    }

    // A directory of a single-budget sweep (records/<method>/L.._D.._S...json for every method, the budget in
    // the sweep's settings, no needle protocol): its records answer for their own budget, in summaries and
    // when the sweep is resumed or extended by another budget.
    void old_layout_records_are_read() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const auto session = test::open_fixture_session();
        const fs::path out = varrate::test::temp_dir("niah-old-layout");
        NiahSweepOptions o = tiny_sweep(out);
        o.depths = {50};
        o.doc.needles = NeedleProtocol::Fixed;
        QCOMPARE(run_niah_sweep(*session, o, {}).computed, int64_t{2});
        // Rewrite the records as the older sweeps wrote them.
        const fs::path now = niah_record_path(out, "snapkv", 0.2, 200, 50, 0);
        const fs::path old = niah_legacy_record_path(out, "snapkv", 200, 50, 0);
        QCOMPARE(old, out / "records/snapkv/L200_D50_S0.json");
        for (const fs::path& p : {now, niah_record_path(out, "full", 1, 200, 50, 0)}) {
            nlohmann::json r = read_json_file(p);
            r["sweep"].erase("needles");
            r["sweep"]["settings"]["budget"] = 0.2;
            write_file_atomic(p == now ? old : p, r.dump(2));
        }
        fs::remove_all(now.parent_path());
        QCOMPARE(find_niah_record(out, "snapkv", 0.2, 200, 50, 0).value_or(fs::path()), old);
        QVERIFY(!find_niah_record(out, "snapkv", 0.5, 200, 50, 0).has_value());  // another budget's
        QVERIFY(!find_niah_record(out, "snapkv", 0.2, 200, 50, 1).has_value());

        NiahSummary summary = summarize_niah(o);
        QCOMPARE(summary.cell(1, 0, 0).n, int64_t{1});
        QCOMPARE(summary.cell(1, 0, 0).budget, 0.2);
        QVERIFY(summary.retention.count("snapkv/k0.2"));
        const NiahSweepStats resumed = run_niah_sweep(*session, o, {});
        QCOMPARE(resumed.computed, int64_t{0});
        QCOMPARE(resumed.skipped, int64_t{2});
        QVERIFY(!fs::exists(now));

        // Another budget beside it: computed at the new path; the old record still answers for 0.2.
        o.budgets = {0.2, 0.5};
        const NiahSweepStats extended = run_niah_sweep(*session, o, {});
        QCOMPARE(extended.computed, int64_t{1});
        QCOMPARE(extended.skipped, int64_t{2});
        QVERIFY(fs::exists(niah_record_path(out, "snapkv", 0.5, 200, 50, 0)));
        summary = summarize_niah(o);
        QCOMPARE(summary.series.size(), size_t{3});
        QCOMPARE(summary.cell(1, 0, 0).n, int64_t{1});
        QCOMPARE(summary.cell(2, 0, 0).n, int64_t{1});
        QCOMPARE(summary.cell(2, 0, 0).budget, 0.5);
        fs::remove_all(out);
    }

    void query_aware_sweep() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const auto session = test::open_fixture_session();
        const fs::path out = varrate::test::temp_dir("niah-qa");
        NiahSweepOptions o = tiny_sweep(out);
        o.mode = CompressionMode::QueryAware;
        o.depths = {50};
        o.doc.distractors = 2;
        const NiahSweepStats stats = run_niah_sweep(*session, o, {});
        QCOMPARE(stats.computed, int64_t{2});
        for (const std::string& m : o.methods) {
            const nlohmann::json r = read_json_file(niah_record_path(out, m, o.settings.budget, 200, 50, 0));
            QCOMPARE(r["mode"].get<std::string>(), std::string("query-aware"));
            QCOMPARE(r["context_tokens"].get<int64_t>(), int64_t{200});
            // The question is inside the compressed context.
            const int64_t question_tokens = static_cast<int64_t>(
                build_prompt(session->tokenizer(), "x", r["question"].get<std::string>(), false)
                    .question_ids.size());
            // The answer prefix follows uncompressed; with the expected value it is the needle's sentence.
            QCOMPARE(r["compressed_tokens"].get<int64_t>(), 200 + question_tokens);
            QCOMPARE(r["needle"].get<std::string>(),
                     r["answer_prefix"].get<std::string>() + " " + r["expected"].get<std::string>() + ".");
            QCOMPARE(r["distractor_needles"].size(), size_t{2});
        }
        fs::remove_all(out);
    }

    // A length too short for the budget (SnapKV keeps int(48 * 0.2) = 9 tokens, fewer than its window of 16)
    // is recorded as infeasible and left out of the accuracy; the other methods and lengths still run.
    void infeasible_cell_is_recorded_not_fatal() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const auto session = test::open_fixture_session();
        const fs::path out = varrate::test::temp_dir("niah-infeasible");
        NiahSweepOptions o = tiny_sweep(out);
        o.lengths = {48, 200};
        o.depths = {50};
        const NiahSweepStats stats = run_niah_sweep(*session, o, {});
        QCOMPARE(stats.computed, int64_t{4});
        const nlohmann::json short_snapkv =
            read_json_file(niah_record_path(out, "snapkv", o.settings.budget, 48, 50, 0));
        QVERIFY2(short_snapkv["infeasible"].get<std::string>().find("smallest feasible kappa") !=
                     std::string::npos,
                 qPrintable(qs(short_snapkv.dump())));
        QVERIFY(!short_snapkv.contains("correct"));
        QVERIFY(read_json_file(niah_record_path(out, "full", 1.0, 48, 50, 0))["correct"].is_boolean());
        QVERIFY(read_json_file(niah_record_path(out, "snapkv", o.settings.budget, 200, 50, 0))["correct"]
                    .is_boolean());
        const NiahSummary summary = summarize_niah(o);
        const NiahCell& cell = summary.cell(1, 0, 0);
        QCOMPARE(cell.method, std::string("snapkv"));
        QCOMPARE(cell.n, int64_t{0});
        QCOMPARE(cell.infeasible, int64_t{1});
        QCOMPARE(summary.cell(1, 0, 1).n, int64_t{1});
        QCOMPARE(summary.cell(0, 0, 0).n, int64_t{1});
        QVERIFY(summary_csv(summary).find("snapkv,0.2,48,50,0,0,,,,1\n") != std::string::npos);
        // Re-running reuses the infeasible record like any other.
        QCOMPARE(run_niah_sweep(*session, o, {}).computed, int64_t{0});
        // A single comparison still reports the infeasible budget as an error.
        CompareRequest req;
        req.context = std::string(200, 'a');
        req.methods = {"snapkv"};
        req.settings = o.settings;
        req.settings.budget = 0.01;
        QVERIFY_THROWS_EXCEPTION(InfeasibleBudget, run_compare(*session, req));
        fs::remove_all(out);
    }

    void cancel_keeps_finished_records() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        const auto session = test::open_fixture_session();
        const fs::path out = varrate::test::temp_dir("niah-cancel");
        NiahSweepOptions o = tiny_sweep(out);
        o.methods = {"full"};
        o.depths = {0, 50, 100};
        std::atomic<bool> cancel{false};
        JobControl job;
        job.cancel = &cancel;
        // Raise the flag while the second document is being prefilled.
        auto on_progress = [&](const NiahProgress& p) {
            if (p.computed == 1 && !p.stage.empty() && p.stage != "generate") cancel = true;
        };
        QVERIFY_THROWS_EXCEPTION(Cancelled, run_niah_sweep(*session, o, job, on_progress));
        const auto kept = read_records(out);
        QCOMPARE(kept.size(), size_t{1});
        for (const auto& [name, text] : kept) QVERIFY(nlohmann::json::parse(text)["correct"].is_boolean());
        cancel = false;
        const NiahSweepStats resumed = run_niah_sweep(*session, o, job);
        QCOMPARE(resumed.skipped, int64_t{1});
        QCOMPARE(resumed.computed, int64_t{2});
        fs::remove_all(out);
    }

    void cli_haystack_file_summary_heatmap_resume() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        QVERIFY2(fs::exists(varrate::test::bin_dir() / "varrate"),
                 "the varrate executable is not built (the suites depend on it)");
        const fs::path out = varrate::test::temp_dir("niah-cli");
        const fs::path hay = out / "haystack.txt";
        std::ofstream(hay) << kHaystackText;
        const QStringList args = {"niah",
                                  "--model",
                                  QString::fromStdString(dir.string()),
                                  "--haystack-file",
                                  QString::fromStdString(hay.string()),
                                  "--lengths",
                                  "200",
                                  "--depths",
                                  "0,100",
                                  "--methods",
                                  "full,snapkv",
                                  "--window",
                                  "16",
                                  "--obs-window",
                                  "16",
                                  "--max-new-tokens",
                                  "12",
                                  "--threads",
                                  "2",
                                  "--out",
                                  QString::fromStdString((out / "run").string())};
        const CliResult r = run_varrate(args);
        QVERIFY2(r.exit_code == 0, qPrintable(r.err));
        QVERIFY2(r.out.contains("4 records: 4 computed, 0 reused"), qPrintable(r.out));
        const auto records = read_records(out / "run");
        QCOMPARE(records.size(), size_t{4});
        for (const auto& [name, text] : records) {
            const nlohmann::json j = nlohmann::json::parse(text);
            QCOMPARE(j["sweep"]["haystack"].get<std::string>(), std::string("haystack.txt"));
            QCOMPARE(j["context_tokens"].get<int64_t>(), int64_t{200});
        }
        const nlohmann::json sj = read_json_file(out / "run" / "summary.json");
        QCOMPARE(sj["cells"].size(), size_t{4});
        QCOMPARE(sj["methods"], nlohmann::json({"full", "snapkv"}));
        QVERIFY(fs::exists(out / "run" / "summary.csv"));
        // heatmap.png: a PNG of a plausible size (2 panels, 2 rows, 1 column).
        const std::string png = read_text_file(out / "run" / "heatmap.png");
        QVERIFY(png.size() > 1000);
        QCOMPARE(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
        auto be32 = [&](size_t at) {
            return (uint32_t(uint8_t(png[at])) << 24) | (uint32_t(uint8_t(png[at + 1])) << 16) |
                   (uint32_t(uint8_t(png[at + 2])) << 8) | uint32_t(uint8_t(png[at + 3]));
        };
        QVERIFY(be32(16) > 200 && be32(16) < 2000);  // width
        QVERIFY(be32(20) > 100 && be32(20) < 1000);  // height

        const CliResult again = run_varrate(args);
        QVERIFY2(again.exit_code == 0, qPrintable(again.err));
        QVERIFY2(again.out.contains("4 records: 0 computed, 4 reused"), qPrintable(again.out));
        QVERIFY(read_records(out / "run") == records);
        fs::remove_all(out);
    }

    // `varrate niah --budget 0.2,0.5 --needles fixed`: records per budget, the table with 95 % intervals, a
    // heatmap per method and budget; another protocol on the same directory is refused, a bad list too.
    void cli_budget_list_needles_and_intervals() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        QVERIFY2(fs::exists(varrate::test::bin_dir() / "varrate"),
                 "the varrate executable is not built (the suites depend on it)");
        const fs::path out = varrate::test::temp_dir("niah-cli-budgets");
        QStringList args = {"niah",
                            "--model",
                            QString::fromStdString(dir.string()),
                            "--lengths",
                            "200",
                            "--depths",
                            "50",
                            "--samples",
                            "2",
                            "--methods",
                            "full,snapkv",
                            "--budget",
                            "0.2, 0.5",
                            "--window",
                            "16",
                            "--obs-window",
                            "16",
                            "--max-new-tokens",
                            "8",
                            "--threads",
                            "2",
                            "--needles",
                            "fixed",
                            "--out",
                            QString::fromStdString(out.string())};
        const CliResult r = run_varrate(args);
        QVERIFY2(r.exit_code == 0, qPrintable(r.err));
        QVERIFY2(r.out.contains("6 records: 6 computed, 0 reused (2 documents)"), qPrintable(r.out));
        QVERIFY2(r.out.contains("needles fixed"), qPrintable(r.out));
        // "snapkv, budget 0.5: 1 of 2 correct (50.0%, 95% CI 9.5-90.5%)" and cells like "50% [9-91]".
        const QRegularExpression overall(
            R"(snapkv, budget 0\.5: (\d) of 2 correct \((\d+\.\d)%, 95% CI (\d+\.\d)-(\d+\.\d)%\))");
        const QRegularExpressionMatch m = overall.match(r.out);
        QVERIFY2(m.hasMatch(), qPrintable(r.out));
        const Interval ci = wilson_interval(m.captured(1).toLongLong(), 2);
        QCOMPARE(m.captured(3), QString::number(100 * ci.low, 'f', 1));
        QCOMPARE(m.captured(4), QString::number(100 * ci.high, 'f', 1));
        QVERIFY2(r.out.contains(QRegularExpression(R"(snapkv, budget 0\.2: )")) &&
                     r.out.contains(QRegularExpression(R"(\d+% \[\d+-\d+\])")),
                 qPrintable(r.out));
        QCOMPARE(read_records(out).size(), size_t{6});
        QVERIFY(fs::exists(out / "records/snapkv/k0.5/L200_D50_S1.json"));
        const std::string csv = read_text_file(out / "summary.csv");
        QVERIFY2(csv.find("\nsnapkv,0.5,200,50,2,") != std::string::npos, csv.c_str());
        QVERIFY(read_text_file(out / "heatmap.png").size() > 1000);

        // `varrate summarize` remakes the same summary from the folder (what a job array's last step runs); a
        // shard leaves the summary to it.
        const std::string summary = read_text_file(out / "summary.json");
        fs::remove(out / "summary.json");
        const CliResult merged = run_varrate({"summarize", QString::fromStdString(out.string())});
        QVERIFY2(merged.exit_code == 0, qPrintable(merged.err));
        QVERIFY2(merged.out.contains("snapkv, budget 0.5: " + m.captured(1) + " of 2 correct"),
                 qPrintable(merged.out));
        QCOMPARE(read_text_file(out / "summary.json"), summary);
        QStringList shard_args = args;
        shard_args << "--shard"
                   << "1/2";
        const CliResult shard = run_varrate(shard_args);
        QVERIFY2(shard.exit_code == 0, qPrintable(shard.err));
        QVERIFY2(shard.out.contains("shard 1/2: 3 records: 0 computed, 3 reused") &&
                     shard.out.contains("varrate summarize"),
                 qPrintable(shard.out));
        const CliResult none = run_varrate({"summarize", QString::fromStdString((out / "records").string())});
        QCOMPARE(none.exit_code, 1);
        QVERIFY2(none.err.contains("no sweep file here"), qPrintable(none.err));

        args[args.indexOf("fixed")] = "fresh";
        const CliResult other = run_varrate(args);
        QCOMPARE(other.exit_code, 1);
        QVERIFY2(other.err.contains("written with --needles fixed"), qPrintable(other.err));
        args[args.indexOf("0.2, 0.5")] = "0.2,abc";
        const CliResult bad = run_varrate(args);
        QCOMPARE(bad.exit_code, 2);
        QVERIFY2(bad.err.contains("--budget") && bad.err.contains("'abc'"), qPrintable(bad.err));
        fs::remove_all(out);
    }

    void cli_sigint_keeps_finished_records() {
        VARRATE_REQUIRE_FIXTURE(dir, "stories260k");
        QVERIFY2(fs::exists(varrate::test::bin_dir() / "varrate"),
                 "the varrate executable is not built (the suites depend on it)");
        const fs::path out = varrate::test::temp_dir("niah-sigint");
        QProcess p;
        p.start(QString::fromStdString((varrate::test::bin_dir() / "varrate").string()),
                {"niah", "--model", QString::fromStdString(dir.string()), "--lengths", "300,400", "--depths",
                 "0,10,20,30,40,50,60,70,80,90,100", "--samples", "20", "--methods", "full",
                 "--max-new-tokens", "24", "--threads", "1", "--out", QString::fromStdString(out.string())});
        QVERIFY(p.waitForStarted());
        // Wait for the first finished record, then interrupt as Ctrl-C would.
        for (int i = 0; i < 3000 && read_records(out).empty(); ++i) {
            if (p.state() == QProcess::NotRunning) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
        }
        QVERIFY2(p.state() == QProcess::Running, "the sweep ended before it could be interrupted");
        ::kill(static_cast<pid_t>(p.processId()), SIGINT);
        QVERIFY(p.waitForFinished(60000));
        QCOMPARE(p.exitStatus(), QProcess::NormalExit);
        QCOMPARE(p.exitCode(), 130);
        const QString err = QString::fromUtf8(p.readAllStandardError());
        QVERIFY2(err.contains("interrupted"), qPrintable(err));
        const auto kept = read_records(out);
        QVERIFY(!kept.empty() && kept.size() < 2 * 11 * 20);
        for (const auto& [name, text] : kept) {
            QVERIFY2(name.find(".tmp") == std::string::npos, qPrintable(qs("temporary file left: " + name)));
            QVERIFY(nlohmann::json::parse(text)["response"].is_string());
        }
        const nlohmann::json sj = read_json_file(out / "summary.json");
        int64_t n = 0;
        for (const auto& c : sj["cells"]) n += c["n"].get<int64_t>();
        QCOMPARE(n, static_cast<int64_t>(kept.size()));
        fs::remove_all(out);
    }
};

QTEST_GUILESS_MAIN(TestNiah)
#include "test_core_niah.moc"
