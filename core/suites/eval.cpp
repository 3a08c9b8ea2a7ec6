#include "core/suites/eval.h"

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
#include "codec/settings_table.h"
#include "core/prompt.h"
#include "core/suites/budget_list.h"
#include "core/suites/longbench_metrics.h"
#include "core/suites/niah_record.h"
#include "core/suites/sweep_files.h"
#include "core/suites/sweep_runner.h"

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
    check_budget_list(eval_budgets(o));
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

std::vector<SweepSeries> eval_series(const EvalSweepOptions& o) {
    return sweep_series(o.methods, eval_budgets(o));
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

namespace {

// One eval document: a RULER sample or a LongBench line, asked once and scored by its metric.
class EvalSweepDocument : public SweepDocument {
  public:
    EvalSweepDocument(const Session& session, const EvalSweepOptions& o, const nlohmann::json& identity,
                      bool longbench, std::string task, int64_t length, int64_t sample)
        : session_(session),
          o_(o),
          identity_(identity),
          longbench_(longbench),
          task_(std::move(task)),
          length_(length),
          sample_index_(sample) {}

    // The sample: RULER's generated text, or a LongBench line with its dataset's template and truncation.
    struct Sample {
        std::string question, answer_prefix, metric, id;
        std::vector<std::string> answers;
        int64_t max_new_tokens = 0, prompt_tokens = 0, context_tokens = 0;
        std::function<double(const std::vector<int64_t>&, const std::string&)> score;
    } sample;
    CompareRequest req;

    CompareRequest request() override {
        CompareRequest r = req;
        r.questions = {sample.question};
        r.max_new_tokens = o_.max_new_tokens > 0 ? o_.max_new_tokens : sample.max_new_tokens;
        r.chat = o_.ruler.chat;
        return r;
    }

    nlohmann::json record(const MethodRun& run, const CompareResult& result, double document_ms) override {
        (void)result;
        EvalRecord r;
        fill_run_fields(r, session_, run, o_.mode, document_ms, identity_);
        r.task = task_;
        r.length = length_;
        r.sample = sample_index_;
        r.metric = sample.metric;
        r.sample_id = sample.id;
        r.question = sample.question;
        r.answer_prefix = sample.answer_prefix;
        r.answers = sample.answers;
        r.prediction = run.answers.empty() ? "" : run.answers[0];
        if (run.infeasible.empty()) {
            const std::vector<int64_t> ids =
                run.answer_ids.empty() ? std::vector<int64_t>() : run.answer_ids[0];
            if (longbench_)
                r.prediction = longbench_decode(session_.tokenizer(), ids);  // what LongBench scores
            r.score = sample.score(ids, r.prediction);
        } else {
            r.infeasible = run.infeasible;
        }
        r.max_new_tokens = o_.max_new_tokens > 0 ? o_.max_new_tokens : sample.max_new_tokens;
        r.prompt_tokens = sample.prompt_tokens;
        r.context_tokens = sample.context_tokens;
        return to_json(r);
    }

  private:
    const Session& session_;
    const EvalSweepOptions& o_;
    const nlohmann::json& identity_;
    bool longbench_;
    std::string task_;
    int64_t length_, sample_index_;
};

}  // namespace

EvalSweepStats run_eval_sweep(const Session& session, const EvalSweepOptions& options, const JobControl& job,
                              const EvalProgressFn& on_progress) {
    const EvalSweepOptions o = resolve_eval_suite(options);
    validate(o);
    std::optional<LongBenchSuite> longbench;
    if (o.longbench()) longbench = load_longbench_suite(o);
    const nlohmann::json identity = sweep_identity(session, o);

    // Documents in the order tasks x lengths x samples.
    const int64_t n_lengths = static_cast<int64_t>(o.lengths.size());
    struct Doc {
        const std::string& task;
        int64_t length, sample;
    };
    const auto doc_of = [&](int64_t d) {
        return Doc{o.tasks[static_cast<size_t>(d / (n_lengths * o.samples))],
                   o.lengths[static_cast<size_t>((d / o.samples) % n_lengths)], d % o.samples};
    };
    SweepSuite suite;
    suite.name = "eval";
    suite.out_dir = o.out_dir;
    suite.grid = eval_grid_json(o);
    suite.identity = identity;
    suite.series = eval_series(o);
    suite.documents = static_cast<int64_t>(o.tasks.size()) * n_lengths * o.samples;
    suite.shard = o.shard;
    suite.settings = o.settings;
    suite.mode = o.mode;
    suite.exists = [&](int64_t d) {  // a LongBench dataset may hold fewer samples than the longest one
        const Doc doc = doc_of(d);
        return !longbench || doc.sample < static_cast<int64_t>(longbench->samples.at(doc.task).size());
    };
    suite.label = [&](int64_t d) {
        const Doc doc = doc_of(d);
        return fmt::format("{} L={} sample={}", doc.task, doc.length, doc.sample);
    };
    suite.record_path = [&](int64_t d, const SweepSeries& s) {
        const Doc doc = doc_of(d);
        return eval_record_path(o.out_dir, s.method, s.budget, doc.task, doc.length, doc.sample);
    };
    suite.check_record = [&](const std::filesystem::path& path) {
        check_record_identity(eval_record_from_json(read_json_file(path), path.string()).sweep, identity,
                              path);
    };
    RulerGenerator generator(session.tokenizer(), o.ruler);  // RULER only; cheap until it generates
    // A length too short for a task is refused before any work, not when the sweep reaches it: the first
    // sample of every task and length is generated now. What decides is the prompt with the smallest haystack
    // (the task's template and the sample's keys), alike across samples to a few tokens: a length within
    // those few tokens of the limit can still stop at a later sample.
    if (!longbench)
        for (const std::string& task : o.tasks)
            for (int64_t length : o.lengths) generator.generate(task, length, 0);
    suite.make_document = [&](int64_t d) -> std::unique_ptr<SweepDocument> {
        const Doc doc = doc_of(d);
        auto out = std::make_unique<EvalSweepDocument>(session, o, identity, longbench.has_value(), doc.task,
                                                       doc.length, doc.sample);
        auto& sample = out->sample;
        auto& req = out->req;
        // The sample: RULER's generated text, or a LongBench line with its dataset's template and truncation.
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
        return out;
    };
    return run_sweep(session, suite, job, on_progress);
}

}  // namespace varrate
