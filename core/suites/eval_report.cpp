// The summary of an evaluation folder (core/eval.h): means, paired statistics against the reference, and the
// same results in kvpress's evaluation layout.
#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/file_io.h"
#include "codec/registry.h"
#include "core/suites/eval.h"
#include "core/suites/niah_record.h"
#include "core/suites/sweep_files.h"

namespace varrate {

namespace {

// A series' scores by (task, length, sample); infeasible records apart.
struct SeriesScores {
    std::map<std::tuple<std::string, int64_t, int64_t>, double> score;
    std::map<std::pair<std::string, int64_t>, int64_t> infeasible;
    std::map<std::pair<std::string, int64_t>, int64_t> fallback;  // PyramidKV ran SnapKV's counts

    // Records of (task, length) matching `match` in `counts`, summed.
    template <typename Match>
    static int64_t total(const std::map<std::pair<std::string, int64_t>, int64_t>& counts, Match match) {
        int64_t n = 0;
        for (const auto& [key, v] : counts)
            if (match(key)) n += v;
        return n;
    }
};

EvalCell make_cell(const std::string& task, int64_t length, const std::string& method, double budget,
                   const std::vector<double>& own, const std::vector<double>& paired_own,
                   const std::vector<double>& paired_ref, bool is_reference, int64_t resamples) {
    EvalCell c;
    c.task = task;
    c.length = length;
    c.method = method;
    c.budget = budget;
    c.n = static_cast<int64_t>(own.size());
    for (double v : own) c.mean += v;
    if (c.n > 0) c.mean /= static_cast<double>(c.n);
    if (!is_reference) c.vs_reference = paired_comparison(paired_own, paired_ref, resamples);
    return c;
}

nlohmann::json cell_json(const EvalCell& c) {
    nlohmann::json j = {{"task", c.task.empty() ? "all" : c.task},
                        {"context_length", c.length},
                        {"method", c.method},
                        {"budget", c.budget},
                        {"n", c.n},
                        {"infeasible", c.infeasible},
                        {"mean", c.mean}};
    if (c.schedule_fallback > 0) j["schedule_fallback"] = c.schedule_fallback;
    if (c.vs_reference.n > 0)
        j["vs_reference"] = {{"n", c.vs_reference.n},
                             {"mean_difference", c.vs_reference.mean_difference},
                             {"ci_low", c.vs_reference.interval.low},
                             {"ci_high", c.vs_reference.interval.high},
                             {"wins", c.vs_reference.wins},
                             {"losses", c.vs_reference.losses},
                             {"sign_test_p", c.vs_reference.sign_test_p},
                             {"significant", c.vs_reference.significant()},
                             {"verdict", to_string(c.vs_reference.significance())}};
    return j;
}

// RFC 4180: a field with a comma, a quote or a line break is quoted, its quotes doubled.
std::string csv_field(const std::string& s) {
    if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
    std::string out = "\"";
    for (char ch : s) {
        if (ch == '"') out += '"';
        out += ch;
    }
    return out + "\"";
}

// A Python list literal of strings, as pandas shows a list column: ['a', 'b'].
std::string python_list(const std::vector<std::string>& items) {
    std::string out = "[";
    for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += ", ";
        out += '\'';
        for (char ch : items[i]) {
            if (ch == '\'' || ch == '\\') out += '\\';
            out += ch;
        }
        out += '\'';
    }
    return out + "]";
}

std::string yaml_string(const std::string& s) {
    std::string out = "'";
    for (char ch : s) {
        if (ch == '\'') out += '\'';
        out += ch;
    }
    return out + "'";
}

// kvpress's compression_ratio: 1 - kappa for a method set by its budget, 1 - the footprint it measured for
// one set by its own settings (KIVI's bits), 0 for the uncompressed reference (no_press).
double kvpress_ratio(const std::string& method, double budget_or_footprint) {
    return method_compresses(method) ? 1.0 - budget_or_footprint : 0.0;
}

}  // namespace

std::string kvpress_folder_name(const std::string& suite, const std::string& data_dir,
                                const std::string& model, int64_t max_context, const std::string& method,
                                double kept, CompressionMode mode) {
    // kvpress writes the model id with "/" as "--"; ours is a folder name, never with "/".
    const std::string press = method_compresses(method) ? method : "no_press";
    std::string name =
        fmt::format("{}__{}__{}__{}__{:.2f}", suite, data_dir, model, press, kvpress_ratio(method, kept));
    if (max_context > 0) name += fmt::format("__max_context{}", max_context);
    if (mode == CompressionMode::QueryAware) name += "__query_aware";
    return name;
}

EvalSummary summarize_eval(const EvalSweepOptions& o) {
    EvalSummary s;
    s.suite = o.longbench() ? "longbench" : "ruler";
    s.mode = to_string(o.mode);
    s.reference = o.reference;
    s.tasks = o.tasks;
    s.methods = o.methods;
    s.budgets = eval_budgets(o);
    s.lengths = o.lengths;
    s.samples = o.samples;
    s.bootstrap_resamples = o.bootstrap_resamples;

    struct Key {
        std::string method;
        double budget;
    };
    std::vector<Key> series;
    for (const std::string& m : o.methods) {
        if (!method_takes_budget(m)) {
            series.push_back({m, 1.0});
            continue;
        }
        for (double b : s.budgets) series.push_back({m, b});
    }
    std::vector<SeriesScores> scores(series.size());
    for (size_t k = 0; k < series.size(); ++k)
        for (const std::string& task : o.tasks)
            for (int64_t length : o.lengths)
                for (int64_t sample = 0; sample < o.samples; ++sample) {
                    const auto path =
                        eval_record_path(o.out_dir, series[k].method, series[k].budget, task, length, sample);
                    if (!std::filesystem::exists(path)) continue;
                    const EvalRecord r = eval_record_from_json(read_json_file(path), path.string());
                    if (s.model.empty()) s.model = r.model;
                    if (s.identity.is_null()) s.identity = r.sweep;
                    if (r.score)
                        scores[k].score[{task, length, sample}] = *r.score;
                    else
                        ++scores[k].infeasible[{task, length}];
                    if (r.schedule_fallback) ++scores[k].fallback[{task, length}];
                }
    size_t ref = 0;
    while (ref < series.size() && series[ref].method != o.reference) ++ref;
    if (ref == series.size())
        throw Error("summarize_eval: the reference '" + o.reference + "' is not in the grid");
    // The reference at its first budget when it has several (a compressed reference).
    const SeriesScores& reference = scores[ref];

    for (const std::string& task : o.tasks)
        for (int64_t length : o.lengths)
            for (size_t k = 0; k < series.size(); ++k) {
                std::vector<double> own, a, b;
                for (int64_t sample = 0; sample < o.samples; ++sample) {
                    const auto it = scores[k].score.find({task, length, sample});
                    if (it == scores[k].score.end()) continue;
                    own.push_back(it->second);
                    const auto r = reference.score.find({task, length, sample});
                    if (r == reference.score.end()) continue;
                    a.push_back(it->second);
                    b.push_back(r->second);
                }
                EvalCell c = make_cell(task, length, series[k].method, series[k].budget, own, a, b, k == ref,
                                       o.bootstrap_resamples);
                const auto same = [&](const std::pair<std::string, int64_t>& key) {
                    return key == std::make_pair(task, length);
                };
                c.infeasible = SeriesScores::total(scores[k].infeasible, same);
                c.schedule_fallback = SeriesScores::total(scores[k].fallback, same);
                s.cells.push_back(std::move(c));
            }
    for (int64_t length : o.lengths)
        for (size_t k = 0; k < series.size(); ++k) {
            std::vector<double> own, a, b;
            for (const auto& [key, v] : scores[k].score) {
                if (std::get<1>(key) != length) continue;
                own.push_back(v);
                const auto r = reference.score.find(key);
                if (r == reference.score.end()) continue;
                a.push_back(v);
                b.push_back(r->second);
            }
            EvalCell c = make_cell("", length, series[k].method, series[k].budget, own, a, b, k == ref,
                                   o.bootstrap_resamples);
            const auto at_length = [&](const std::pair<std::string, int64_t>& key) {
                return key.second == length;
            };
            c.infeasible = SeriesScores::total(scores[k].infeasible, at_length);
            c.schedule_fallback = SeriesScores::total(scores[k].fallback, at_length);
            s.by_length.push_back(std::move(c));
        }
    for (size_t k = 0; k < series.size(); ++k) {
        std::vector<double> own, a, b;
        for (const auto& [key, v] : scores[k].score) {
            own.push_back(v);
            const auto r = reference.score.find(key);
            if (r == reference.score.end()) continue;
            a.push_back(v);
            b.push_back(r->second);
        }
        EvalCell c =
            make_cell("", 0, series[k].method, series[k].budget, own, a, b, k == ref, o.bootstrap_resamples);
        const auto every = [](const std::pair<std::string, int64_t>&) { return true; };
        c.infeasible = SeriesScores::total(scores[k].infeasible, every);
        c.schedule_fallback = SeriesScores::total(scores[k].fallback, every);
        s.overall.push_back(std::move(c));
    }
    return s;
}

nlohmann::json to_json(const EvalSummary& s) {
    nlohmann::json cells = nlohmann::json::array(), overall = nlohmann::json::array(),
                   by_length = nlohmann::json::array();
    for (const EvalCell& c : s.cells) cells.push_back(cell_json(c));
    for (const EvalCell& c : s.overall) overall.push_back(cell_json(c));
    for (const EvalCell& c : s.by_length) by_length.push_back(cell_json(c));
    return {
        {"model", s.model},
        {"suite", s.suite},
        {"mode", s.mode},
        {"reference", s.reference},
        {"tasks", s.tasks},
        {"lengths", s.lengths},
        {"methods", s.methods},
        {"budgets", s.budgets},
        {"samples", s.samples},
        {"statistics",
         fmt::format(
             "mean score (0-100); difference to {} paired by sample: percentile bootstrap 95 % interval "
             "({} resamples, seeded) and exact two-sided sign test; significant where the interval excludes "
             "0 and p < 0.05, 'n too small' below {} pairs; each cell is tested alone, not corrected for "
             "multiple comparisons",
             s.reference, s.bootstrap_resamples, kMinPairsForSignificance)},
        {"identity", s.identity},
        {"cells", cells},
        {"overall", overall},
        {"by_length", by_length}};
}

std::string eval_summary_csv(const EvalSummary& s) {
    std::string out =
        "task,context_length,method,budget,n,mean,diff_vs_reference,ci_low,ci_high,wins,losses,sign_test_p,"
        "infeasible,pairs,verdict\n";
    auto row = [&](const EvalCell& c) {
        const PairedComparison& p = c.vs_reference;
        out += fmt::format("{},{},{},{:g},{},{}", c.task.empty() ? "all" : c.task, c.length, c.method,
                           c.budget, c.n, c.n > 0 ? fmt::format("{:.4f}", c.mean) : "");
        out += p.n > 0 ? fmt::format(",{:.4f},{:.4f},{:.4f},{},{},{:.6g}", p.mean_difference, p.interval.low,
                                     p.interval.high, p.wins, p.losses, p.sign_test_p)
                       : std::string(",,,,,,");
        out += fmt::format(",{}", c.infeasible);
        out += p.n > 0 ? fmt::format(",{},{}\n", p.n, to_string(p.significance())) : std::string(",,\n");
    };
    for (const EvalCell& c : s.cells) row(c);
    for (const EvalCell& c : s.overall) row(c);
    return out;
}

void write_eval_summary(const EvalSummary& s, const EvalSweepOptions& o) {
    write_file_atomic(o.out_dir / "summary.json", to_json(s).dump(2) + "\n");
    write_file_atomic(o.out_dir / "summary.csv", eval_summary_csv(s));

    // kvpress's layout (evaluation/evaluate.py): one folder per run with config.yaml, metrics.json and
    // predictions.csv (kvpress's columns first, then the sample's coordinates and score). A RULER run is one
    // length (kvpress's data_dir) with every task in it, metrics {task: {"string_match": mean rounded to 2}};
    // a LongBench run is one dataset (its data_dir) at one truncation length, metrics its score rounded to 2.
    struct Series {
        std::string method;
        double budget;
    };
    std::vector<Series> series;
    for (const EvalCell& c : s.overall) series.push_back({c.method, c.budget});
    const bool lb = o.longbench();
    for (int64_t length : o.lengths)
        for (const Series& ser : series)
            for (size_t ti = 0; ti < (lb ? o.tasks.size() : 1); ++ti) {
                const std::vector<std::string> tasks = lb ? std::vector<std::string>{o.tasks[ti]} : o.tasks;
                const std::string data_dir = lb ? o.tasks[ti] : std::to_string(length);
                // The series' scored records at this length, task by task, sample by sample: read once for
                // the footprint and the predictions.
                struct Scored {
                    std::string task;
                    int64_t sample = 0;
                    EvalRecord record;
                };
                std::vector<Scored> scored;
                for (const std::string& task : tasks)
                    for (int64_t sample = 0; sample < o.samples; ++sample) {
                        const auto path =
                            eval_record_path(o.out_dir, ser.method, ser.budget, task, length, sample);
                        if (!std::filesystem::exists(path)) continue;
                        EvalRecord r = eval_record_from_json(read_json_file(path), path.string());
                        if (r.score) scored.push_back({task, sample, std::move(r)});
                    }
                // A method set by its own settings is named by the footprint its records measured here.
                double kept = ser.budget;
                if (!method_takes_budget(ser.method) && method_compresses(ser.method) && !scored.empty()) {
                    double sum = 0;
                    for (const Scored& x : scored) sum += x.record.footprint_fraction;
                    kept = sum / static_cast<double>(scored.size());
                }
                const std::filesystem::path dir =
                    o.out_dir / "kvpress" /
                    kvpress_folder_name(s.suite, data_dir, s.model, lb ? length : 0, ser.method, kept,
                                        o.mode);
                std::error_code ec;
                std::filesystem::create_directories(dir, ec);
                if (ec) throw Error(dir.string() + ": cannot create the folder: " + ec.message());
                const double ratio = kvpress_ratio(ser.method, kept);
                std::string yaml;
                yaml += "dataset: " + s.suite + "\n";
                yaml += "data_dir: " + yaml_string(data_dir) + "\n";
                yaml += "model: " + yaml_string(s.model) + "\n";
                yaml +=
                    "press_name: " + yaml_string(method_compresses(ser.method) ? ser.method : "no_press") +
                    "\n";
                yaml += fmt::format("compression_ratio: {:g}\n", ratio);
                yaml += "fraction: 1.0\n";
                yaml += o.max_new_tokens > 0 ? fmt::format("max_new_tokens: {}\n", o.max_new_tokens)
                                             : "max_new_tokens: null\n";
                yaml += lb ? fmt::format("max_context_length: {}\n", length) : "max_context_length: null\n";
                yaml += fmt::format("query_aware: {}\n",
                                    o.mode == CompressionMode::QueryAware ? "true" : "false");
                yaml += fmt::format("seed: {}\n",
                                    s.identity.is_object() ? s.identity.value("seed", uint64_t{0}) : 0);
                yaml += fmt::format("varrate_method: {}\n", yaml_string(ser.method));
                yaml += fmt::format("varrate_budget: {:g}\n", ser.budget);
                yaml += "varrate_identity: " + yaml_string(s.identity.dump()) + "\n";
                write_file_atomic(dir / "config.yaml", yaml);

                nlohmann::json metrics = lb ? nlohmann::json() : nlohmann::json::object();
                std::string csv = lb ? "question,answer_prefix,answers,task,max_new_tokens,predicted_answer,"
                                       "compression_ratio,_id,context_length,sample,score\n"
                                     : "question,answer_prefix,answer,task,max_new_tokens,predicted_answer,"
                                       "compression_ratio,context_length,sample,score\n";
                for (const std::string& task : tasks) {
                    for (const EvalCell& t : s.cells)
                        if (t.task == task && t.length == length && t.method == ser.method &&
                            same_budget(t.budget, ser.budget) && t.n > 0) {
                            const double rounded = std::round(t.mean * 100.0) / 100.0;
                            if (lb)
                                metrics = rounded;
                            else
                                metrics[task] = {{"string_match", rounded}};
                        }
                    for (const Scored& x : scored) {
                        if (x.task != task) continue;
                        const EvalRecord& r = x.record;
                        const int64_t sample = x.sample;
                        csv += fmt::format("{},{},{},{},{},{},{:g},", csv_field(r.question),
                                           csv_field(r.answer_prefix), csv_field(python_list(r.answers)),
                                           task, r.max_new_tokens, csv_field(r.prediction), ratio);
                        if (lb) csv += csv_field(r.sample_id) + ",";
                        csv += fmt::format("{},{},{:g}\n", length, sample, *r.score);
                    }
                }
                write_file_atomic(dir / "metrics.json", metrics.dump(4) + "\n");
                write_file_atomic(dir / "predictions.csv", csv);
            }
}

}  // namespace varrate
