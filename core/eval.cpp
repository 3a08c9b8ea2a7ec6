#include "core/eval.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/file_io.h"
#include "base/hash.h"
#include "base/json_field.h"
#include "codec/codec_json.h"
#include "codec/registry.h"
#include "core/longbench_metrics.h"
#include "core/niah_record.h"
#include "core/prompt.h"
#include "core/sweep_files.h"

namespace varrate {

// ---- records ----------------------------------------------------------------------------------------

nlohmann::json to_json(const EvalRecord& r) {
    nlohmann::json j;
    j["model"] = r.model;
    j["task"] = r.task;
    j["context_length"] = r.length;
    j["sample"] = r.sample;
    if (!r.sample_id.empty()) j["sample_id"] = r.sample_id;
    j["method"] = r.method;
    j["budget"] = r.budget;
    j["mode"] = r.mode;
    j["metric"] = r.metric;
    j["question"] = r.question;
    j["answer_prefix"] = r.answer_prefix;
    j["answers"] = r.answers;
    j["prediction"] = r.prediction;
    if (r.score) j["score"] = *r.score;
    if (!r.infeasible.empty()) j["infeasible"] = r.infeasible;
    j["max_new_tokens"] = r.max_new_tokens;
    j["prompt_tokens"] = r.prompt_tokens;
    j["context_tokens"] = r.context_tokens;
    j["compressed_tokens"] = r.compressed_tokens;
    j["footprint_fraction"] = r.footprint_fraction;
    if (r.schedule_fallback) j["schedule_fallback"] = true;
    j["durations"] = {
        {"prefill_ms", r.prefill_ms}, {"compress_ms", r.compress_ms}, {"document_ms", r.document_ms}};
    j["timestamp"] = r.timestamp;
    j["sweep"] = r.sweep;
    return j;
}

EvalRecord eval_record_from_json(const nlohmann::json& j, const std::string& where) {
    if (!j.is_object() || !j.contains("sweep") || !j["sweep"].is_object() || !j.contains("task"))
        throw Error(where + ": not an evaluation record (no \"task\" and \"sweep\")");
    EvalRecord r;
    r.model = json_field<std::string>(j, "model", where, "");
    r.task = json_field<std::string>(j, "task", where, "");
    r.length = json_field<int64_t>(j, "context_length", where, 0);
    r.sample = json_field<int64_t>(j, "sample", where, 0);
    r.sample_id = json_field<std::string>(j, "sample_id", where, "");
    r.method = json_field<std::string>(j, "method", where, "");
    r.budget = json_field<double>(j, "budget", where, 1);
    r.mode = json_field<std::string>(j, "mode", where, "");
    r.metric = json_field<std::string>(j, "metric", where, "");
    r.question = json_field<std::string>(j, "question", where, "");
    r.answer_prefix = json_field<std::string>(j, "answer_prefix", where, "");
    r.answers = json_field<std::vector<std::string>>(j, "answers", where, {});
    r.prediction = json_field<std::string>(j, "prediction", where, "");
    if (j.contains("score") && !j["score"].is_null()) r.score = json_field<double>(j, "score", where, 0);
    r.infeasible = json_field<std::string>(j, "infeasible", where, "");
    if (!r.score && r.infeasible.empty()) throw Error(where + ": a record that ran must have a \"score\"");
    r.max_new_tokens = json_field<int64_t>(j, "max_new_tokens", where, 0);
    r.prompt_tokens = json_field<int64_t>(j, "prompt_tokens", where, 0);
    r.context_tokens = json_field<int64_t>(j, "context_tokens", where, 0);
    r.compressed_tokens = json_field<int64_t>(j, "compressed_tokens", where, 0);
    r.footprint_fraction = json_field<double>(j, "footprint_fraction", where, 0);
    r.schedule_fallback = json_field<bool>(j, "schedule_fallback", where, false);
    const nlohmann::json d = json_field<nlohmann::json>(j, "durations", where, nlohmann::json::object());
    r.prefill_ms = json_field<double>(d, "prefill_ms", where, 0);
    r.compress_ms = json_field<double>(d, "compress_ms", where, 0);
    r.document_ms = json_field<double>(d, "document_ms", where, 0);
    r.timestamp = json_field<std::string>(j, "timestamp", where, "");
    r.sweep = j["sweep"];
    return r;
}

std::filesystem::path eval_record_path(const std::filesystem::path& out_dir, const std::string& method,
                                       double budget, const std::string& task, int64_t length,
                                       int64_t sample) {
    return out_dir / "records" / niah_series_key(method, budget) / task /
           fmt::format("L{}_S{}.json", length, sample);
}

// ---- sweep ------------------------------------------------------------------------------------------

std::vector<double> eval_budgets(const EvalSweepOptions& o) {
    return o.budgets.empty() ? std::vector<double>{o.settings.budget} : o.budgets;
}

namespace {

using Clock = std::chrono::steady_clock;

void validate(const EvalSweepOptions& o) {
    if (o.tasks.empty()) throw Error("--tasks: no task given");
    if (!o.longbench())
        for (const std::string& t : o.tasks) ruler_metric(t);  // throws naming the known tasks
    if (o.lengths.empty()) throw Error("--lengths: no context length given");
    for (int64_t l : o.lengths)
        if (l < 1) throw Error(fmt::format("--lengths: {} is not a positive token count", l));
    if (o.samples < 1) throw Error("--samples must be at least 1");
    if (o.methods.empty()) throw Error("--methods: no method named");
    for (const auto& m : o.methods) method_needs_basis(m);  // throws for an unknown name
    if (std::find(o.methods.begin(), o.methods.end(), o.reference) == o.methods.end())
        throw Error(
            fmt::format("--reference: '{}' is not one of --methods (the paired statistics compare every "
                        "method with it)",
                        o.reference));
    const std::vector<double> budgets = eval_budgets(o);
    for (size_t i = 0; i < budgets.size(); ++i) {
        if (!(budgets[i] > 0 && budgets[i] <= 1))
            throw Error(fmt::format("--budget: {} is not a fraction of the cache in (0, 1]", budgets[i]));
        for (size_t j = 0; j < i; ++j)
            if (same_budget(budgets[j], budgets[i]))
                throw Error(fmt::format("--budget: {:g} is listed twice", budgets[i]));
    }
    if (o.out_dir.empty()) throw Error("--out: no output directory given");
    if (o.max_new_tokens < 0) throw Error("--max-new-tokens must not be negative");
    if (o.bootstrap_resamples < kMinBootstrapResamples)
        throw Error(fmt::format("--bootstrap {} is below {} resamples: the interval's ends would be noise",
                                o.bootstrap_resamples, kMinBootstrapResamples));
}

std::string config_path(const EvalSweepOptions& o) {
    if (!o.longbench_config.empty()) return o.longbench_config;
    const std::string found = find_longbench_config();
    if (found.empty())
        throw Error(
            "LongBench's prompts: no eval/longbench.json in the data folders; give --longbench-config");
    return found;
}

// What the LongBench samples and prompts are: their files' bytes, in order ("" for RULER).
std::string longbench_hash(const EvalSweepOptions& o) {
    if (!o.longbench()) return "";
    uint64_t h = kFingerprintSeed;
    for (const auto& f : o.longbench_files) h = fnv1a(read_text_file(f), h);
    h = fnv1a(read_text_file(config_path(o)), h);
    return fmt::format("{:016x}", h);
}

nlohmann::json sweep_identity(const Session& s, const EvalSweepOptions& o) {
    return {{"kind", "eval"},
            {"model_fingerprint", s.fingerprint()},
            {"mode", to_string(o.mode)},
            {"settings", identity_settings(to_json(o.settings))},
            {"basis", s.basis() ? s.basis_source() : "self-calibrated"},
            {"seed", o.ruler.seed},
            {"chat", o.ruler.chat},
            {"haystack", o.haystack_name},
            {"haystack_hash", fmt::format("{:016x}", fnv1a(o.ruler.essay_text, kFingerprintSeed))},
            {"max_new_tokens", o.max_new_tokens},
            {"suite", o.longbench() ? "longbench" : "ruler"},
            {"longbench_hash", longbench_hash(o)}};
}

struct Series {
    std::string method;
    double budget;
};

std::vector<Series> eval_series(const EvalSweepOptions& o) {
    std::vector<Series> out;
    for (const std::string& m : o.methods) {
        if (!method_takes_budget(m)) {
            out.push_back({m, 1.0});
            continue;
        }
        for (double b : eval_budgets(o)) out.push_back({m, b});
    }
    return out;
}

}  // namespace

nlohmann::json eval_grid_json(const EvalSweepOptions& o) {
    std::vector<std::string> files;
    for (const auto& f : o.longbench_files) files.push_back(f.string());
    return {{"kind", "eval"},
            {"suite", o.longbench() ? "longbench" : "ruler"},
            {"longbench_files", files},
            {"longbench_config", o.longbench() ? config_path(o) : ""},
            {"tasks", o.tasks},
            {"lengths", o.lengths},
            {"samples", o.samples},
            {"methods", o.methods},
            {"budgets", eval_budgets(o)},
            {"mode", to_string(o.mode)},
            {"reference", o.reference},
            {"bootstrap_resamples", o.bootstrap_resamples}};
}

EvalSweepOptions read_eval_grid(const std::filesystem::path& out_dir) {
    const nlohmann::json grid = read_sweep_file(out_dir)["grid"];
    const std::string where = (out_dir / kSweepFile).string();
    if (grid["kind"] != "eval")
        throw Error(where + ": the sweep file of a " + grid["kind"].dump() + " sweep, not an evaluation");
    EvalSweepOptions o;
    try {
        o.tasks = json_required<std::vector<std::string>>(grid, "tasks", where + ": grid");
        o.lengths = json_required<std::vector<int64_t>>(grid, "lengths", where + ": grid");
        o.samples = json_required<int64_t>(grid, "samples", where + ": grid");
        o.methods = json_required<std::vector<std::string>>(grid, "methods", where + ": grid");
        o.budgets = json_required<std::vector<double>>(grid, "budgets", where + ": grid");
        o.mode = parse_mode(json_required<std::string>(grid, "mode", where + ": grid"));
        o.reference = json_required<std::string>(grid, "reference", where + ": grid");
        o.bootstrap_resamples = json_required<int64_t>(grid, "bootstrap_resamples", where + ": grid");
        for (const auto& f :
             json_required<std::vector<std::string>>(grid, "longbench_files", where + ": grid"))
            o.longbench_files.push_back(f);
        o.longbench_config = json_required<std::string>(grid, "longbench_config", where + ": grid");
    } catch (const nlohmann::json::exception& e) {
        throw Error(where + ": grid: " + e.what());
    }
    o.out_dir = out_dir;
    validate(o);
    return o;
}

namespace {

// A LongBench suite: the config and each dataset's samples in file order.
struct LongBenchSuite {
    LongBenchConfig config;
    std::vector<std::string> datasets;  // in order of first appearance
    std::map<std::string, std::vector<LongBenchSample>> samples;
};

LongBenchSuite load_longbench_suite(const EvalSweepOptions& o) {
    LongBenchSuite suite;
    suite.config = load_longbench_config(config_path(o));
    for (const auto& file : o.longbench_files)
        for (LongBenchSample& s : read_longbench_jsonl(file)) {
            suite.config.dataset(s.dataset);  // throws naming the known datasets
            auto& list = suite.samples[s.dataset];
            if (list.empty()) suite.datasets.push_back(s.dataset);
            list.push_back(std::move(s));
        }
    return suite;
}

}  // namespace

EvalSweepOptions resolve_eval_suite(const EvalSweepOptions& options) {
    if (!options.longbench()) return options;
    EvalSweepOptions o = options;
    const LongBenchSuite suite = load_longbench_suite(o);
    std::vector<std::string> tasks;
    for (const std::string& t : options.tasks)
        if (!suite.samples.count(t))
            throw Error(fmt::format("--tasks: no sample of '{}' in the LongBench files (they hold: {})", t,
                                    fmt::join(suite.datasets, ", ")));
    for (const std::string& d : suite.datasets)
        if (options.tasks.empty() || std::count(options.tasks.begin(), options.tasks.end(), d))
            tasks.push_back(d);
    o.tasks = tasks;
    o.samples = 0;
    for (const std::string& t : tasks) o.samples = std::max<int64_t>(o.samples, suite.samples.at(t).size());
    return o;
}

EvalSweepStats run_eval_sweep(const Session& session, const EvalSweepOptions& options, const JobControl& job,
                              const EvalProgressFn& on_progress) {
    const EvalSweepOptions o = resolve_eval_suite(options);
    validate(o);
    std::optional<LongBenchSuite> longbench;
    if (o.longbench()) longbench = load_longbench_suite(o);
    auto exists = [&](const std::string& task, int64_t sample) {
        return !longbench || sample < static_cast<int64_t>(longbench->samples.at(task).size());
    };
    const std::vector<Series> series = eval_series(o);
    std::error_code ec;
    std::filesystem::create_directories(o.out_dir / "records", ec);
    if (ec) throw Error(o.out_dir.string() + ": cannot create the records directory: " + ec.message());
    // A run killed while writing left temporaries beside its records (write_file_atomic): never records.
    if (const int stale = remove_stale_temporaries(o.out_dir))
        spdlog::info("removed {} temporary file(s) an interrupted run left in {}", stale, o.out_dir.string());
    const nlohmann::json identity = sweep_identity(session, o);

    struct Doc {
        std::string task;
        int64_t length, sample;
        std::vector<Series> missing;
    };
    EvalSweepStats stats;
    std::vector<Doc> docs;
    int64_t index = -1;  // the documents' order, which the shards deal out
    for (const std::string& task : o.tasks)
        for (int64_t length : o.lengths)
            for (int64_t sample = 0; sample < o.samples; ++sample) {
                if (!exists(task, sample) || !o.shard.owns(++index)) continue;
                Doc doc{task, length, sample, {}};
                for (const Series& s : series) {
                    ++stats.total;
                    const auto path = eval_record_path(o.out_dir, s.method, s.budget, task, length, sample);
                    if (!std::filesystem::exists(path)) {
                        doc.missing.push_back(s);
                        continue;
                    }
                    const EvalRecord r = eval_record_from_json(read_json_file(path), path.string());
                    for (const auto& [key, value] : identity.items())
                        if (!r.sweep.contains(key) || r.sweep[key] != value)
                            throw Error(fmt::format(
                                "{}: written by a different sweep ({} was {}, now {}); use "
                                "another --out or remove the old records",
                                path.string(), key, r.sweep.contains(key) ? r.sweep[key].dump() : "absent",
                                value.dump()));
                    ++stats.skipped;
                }
                if (!doc.missing.empty()) docs.push_back(std::move(doc));
            }
    write_sweep_file(o.out_dir, eval_grid_json(o), identity);

    EvalProgress progress;
    progress.total = stats.total;
    progress.skipped = progress.done = stats.skipped;
    const auto t_start = Clock::now();
    auto report = [&]() {
        progress.estimate(std::chrono::duration<double>(Clock::now() - t_start).count());
        if (on_progress) on_progress(progress);
    };
    report();

    RulerGenerator generator(session.tokenizer(), o.ruler);  // RULER only; cheap until it generates
    const std::string model = model_name(session);
    for (const Doc& doc : docs) {
        check_cancel(job);
        progress.cell = fmt::format("{} L={} sample={}", doc.task, doc.length, doc.sample);
        progress.stage = "generate";
        progress.stage_done = progress.stage_total = 0;
        report();
        // The sample: RULER's generated text, or a LongBench line with its dataset's template and truncation.
        struct {
            std::string question, answer_prefix, metric, id;
            std::vector<std::string> answers;
            int64_t max_new_tokens = 0, prompt_tokens = 0, context_tokens = 0;
            std::function<double(const std::vector<int64_t>&, const std::string&)> score;
        } sample;
        CompareRequest req;
        if (longbench) {
            const LongBenchSample& ls = longbench->samples.at(doc.task)[static_cast<size_t>(doc.sample)];
            const LongBenchDataset& ds = longbench->config.dataset(doc.task);
            const LongBenchPrompt prompt =
                build_longbench_prompt(session.tokenizer(), ds, ls, doc.length, o.ruler.chat);
            req.prompt_parts = {prompt.parts};
            sample.question = ls.input;
            sample.answers = ls.answers;
            sample.metric = to_string(ds.metric);
            sample.id = ls.id;
            sample.max_new_tokens = ds.max_new_tokens;
            if (ds.stop_at_newline) {
                // pred.py's eos_token_id=[eos, tokenizer.encode("\n", add_special_tokens=False)[-1]].
                const std::vector<int64_t> nl = session.tokenizer().encode("\n", false);
                if (!nl.empty()) req.stop_ids = {nl.back()};
            }
            sample.context_tokens = static_cast<int64_t>(prompt.parts.context_ids.size());
            sample.prompt_tokens =
                sample.context_tokens + static_cast<int64_t>(prompt.parts.question_ids.size());
            sample.score = [&session, &ds, &ls](const std::vector<int64_t>& ids, const std::string&) {
                return 100.0 * longbench_sample_score(ds.metric, ds.first_line_only,
                                                      longbench_decode(session.tokenizer(), ids), ls.answers,
                                                      ls.all_classes);
            };
        } else {
            const RulerSample rs = generator.generate(doc.task, doc.length, doc.sample);
            req.context = rs.context;
            req.answer_prefixes = {rs.answer_prefix};
            sample.question = rs.question;
            sample.answer_prefix = rs.answer_prefix;
            sample.answers = rs.outputs;
            sample.metric = to_string(rs.metric);
            sample.max_new_tokens = rs.max_new_tokens;
            sample.prompt_tokens = rs.prompt_tokens;
            sample.context_tokens = static_cast<int64_t>(
                build_prompt(session.tokenizer(), rs.context, rs.question, o.ruler.chat, rs.answer_prefix)
                    .context_ids.size());
            sample.score = [rs](const std::vector<int64_t>&, const std::string& text) {
                return ruler_score(rs, text);
            };
        }
        req.questions = {sample.question};
        req.methods.clear();
        for (const Series& s : doc.missing) {
            if (std::find(req.methods.begin(), req.methods.end(), s.method) == req.methods.end())
                req.methods.push_back(s.method);
            if (method_takes_budget(s.method) &&
                std::none_of(req.budgets.begin(), req.budgets.end(),
                             [&](double b) { return same_budget(b, s.budget); }))
                req.budgets.push_back(s.budget);
        }
        req.settings = o.settings;
        req.mode = o.mode;
        req.max_new_tokens = o.max_new_tokens > 0 ? o.max_new_tokens : sample.max_new_tokens;
        req.chat = o.ruler.chat;
        req.skip_infeasible = true;
        req.attention_output_error = false;
        JobControl inner;
        inner.cancel = job.cancel;
        inner.progress = [&](const std::string& stage, int64_t done, int64_t total) {
            progress.stage = stage;
            progress.stage_done = done;
            progress.stage_total = total;
            report();
        };
        const auto t0 = Clock::now();
        const CompareResult result = run_compare(session, req, inner);
        const double document_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        ++stats.documents;
        for (const MethodRun& run : result.runs) {
            const bool wanted = std::any_of(doc.missing.begin(), doc.missing.end(), [&](const Series& s) {
                return s.method == run.method && same_budget(s.budget, run.budget);
            });
            if (!wanted) continue;
            EvalRecord r;
            r.model = model;
            r.task = doc.task;
            r.length = doc.length;
            r.sample = doc.sample;
            r.method = run.method;
            r.budget = run.budget;
            r.mode = to_string(o.mode);
            r.metric = sample.metric;
            r.sample_id = sample.id;
            r.question = sample.question;
            r.answer_prefix = sample.answer_prefix;
            r.answers = sample.answers;
            r.prediction = run.answers.empty() ? "" : run.answers[0];
            if (run.infeasible.empty()) {
                const std::vector<int64_t> ids =
                    run.answer_ids.empty() ? std::vector<int64_t>() : run.answer_ids[0];
                if (longbench)
                    r.prediction = longbench_decode(session.tokenizer(), ids);  // what LongBench scores
                r.score = sample.score(ids, r.prediction);
            } else {
                r.infeasible = run.infeasible;
            }
            r.max_new_tokens = req.max_new_tokens;
            r.prompt_tokens = sample.prompt_tokens;
            r.context_tokens = sample.context_tokens;
            r.compressed_tokens = static_cast<int64_t>(run.context_ids.size());  // + the question if aware
            r.footprint_fraction = run.footprint_fraction;
            r.schedule_fallback = run.schedule_fallback();
            r.prefill_ms = run.prefill_ms;
            r.compress_ms = run.compress_ms;
            r.document_ms = document_ms;
            r.timestamp = utc_timestamp();
            r.sweep = identity;
            const auto path =
                eval_record_path(o.out_dir, run.method, run.budget, doc.task, doc.length, doc.sample);
            std::filesystem::create_directories(path.parent_path(), ec);
            if (ec)
                throw Error(path.parent_path().string() +
                            ": cannot create the records directory: " + ec.message());
            write_file_atomic(path, to_json(r).dump(2) + "\n");
            ++stats.computed;
            ++progress.computed;
            ++progress.done;
        }
        progress.stage.clear();
        progress.stage_done = progress.stage_total = 0;
        report();
        if (job.progress) job.progress("eval", progress.done, progress.total);
    }
    return stats;
}

}  // namespace varrate
