#pragma once
// Task-suite evaluation (`varrate eval`): RULER-style tasks (core/ruler_tasks.h) x context lengths x samples,
// every method at every budget on the same sample (one run_compare per sample: one prefill capture serves all
// of them), one EvalRecord per (task, length, sample, method, budget) written atomically and reused when the
// sweep is run again, a summary with each method's mean score, a paired bootstrap interval and a sign test of
// its difference to a reference method (core/stats.h), and the results also written as kvpress's evaluation
// writes them (one folder per dataset, length, model, press and compression ratio), so that its leaderboard
// tooling and pandas read them unchanged. The documents are dealt to shards (core/shard.h) for job arrays;
// summarize_eval reads whatever records the shards left in the folder.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "codec/method.h"
#include "codec/registry.h"
#include "core/compare.h"
#include "core/session.h"
#include "core/suites/longbench.h"
#include "core/suites/ruler_tasks.h"
#include "core/suites/shard.h"
#include "core/suites/stats.h"
#include "core/suites/sweep_files.h"
#include "core/suites/sweep_runner.h"

namespace varrate {

struct EvalSweepOptions {
    std::vector<std::string> tasks;  // RULER task names
    std::vector<int64_t> lengths;    // target lengths: prompt + tokens to generate (RULER's fitting)
    int64_t samples = 1;             // per (task, length), each drawing its own keys, values and needles
    std::vector<std::string> methods = default_method_names();
    CodecSettings settings;
    std::vector<double> budgets;  // empty: {settings.budget}
    CompressionMode mode = CompressionMode::QueryAgnostic;
    RulerOptions ruler;                        // seed, chat, essay haystack
    std::string haystack_name = "procedural";  // recorded: the essay file, or "procedural"
    int64_t max_new_tokens = 0;                // 0: each task's own (RULER's)
    std::filesystem::path out_dir;
    Shard shard;
    // The method every other one is compared with, sample by sample (the uncompressed reference, "full").
    std::string reference = reference_method_name();
    int64_t bootstrap_resamples = kBootstrapResamples;
    // LongBench instead of RULER: the samples of these LongBench-format JSONL files (core/longbench.h), the
    // tasks being their "dataset"s (all of them, or those of `tasks` when given), each prompt truncated from
    // the middle to every `lengths` value (LongBench's max prompt length), scored with the dataset's metric
    // (x 100). Prompts and generation lengths from longbench_config ("" = the shipped eval/longbench.json).
    std::vector<std::filesystem::path> longbench_files;
    std::string longbench_config;
    bool longbench() const { return !longbench_files.empty(); }
};

// The options with the suite's tasks and sample counts filled in: for LongBench, the datasets found in the
// files (in order of first appearance, filtered by `tasks` when given) and the largest dataset's sample count
// (smaller datasets simply have fewer records); RULER options are returned as they are. Throws Error for a
// bad file, an unknown dataset, or a task that no file has.
EvalSweepOptions resolve_eval_suite(const EvalSweepOptions& options);

std::vector<double> eval_budgets(const EvalSweepOptions& options);  // options.budgets or {settings.budget}

struct EvalRecord {
    std::string model, task, method, mode, metric;
    double budget = 1;      // 1 for `full`
    std::string sample_id;  // LongBench's _id; "" for RULER
    int64_t length = 0, sample = 0;
    std::string question, answer_prefix, prediction;
    std::vector<std::string> answers;  // the references
    std::optional<double> score;       // 0..100; absent when infeasible
    std::string infeasible;            // why the budget could not be met; "" when run
    int64_t max_new_tokens = 0, prompt_tokens = 0, context_tokens = 0, compressed_tokens = 0;
    double footprint_fraction = 0;
    bool schedule_fallback = false;  // PyramidKV ran SnapKV's uniform counts (written only when true)
    double prefill_ms = 0, compress_ms = 0, document_ms = 0;
    std::string timestamp;
    nlohmann::json sweep;  // the sweep's identity
};
nlohmann::json to_json(const EvalRecord& r);
EvalRecord eval_record_from_json(const nlohmann::json& j, const std::string& where);  // throws Error
// out_dir/records/<series key>/<task>/L<length>_S<sample>.json (series key as NIAH's: "full",
// "varrate/k0.1").
std::filesystem::path eval_record_path(const std::filesystem::path& out_dir, const std::string& method,
                                       double budget, const std::string& task, int64_t length,
                                       int64_t sample);

using EvalProgress = SweepProgress;
using EvalProgressFn = std::function<void(const EvalProgress&)>;

using EvalSweepStats = SweepStats;

// Throws Error for bad options and for a folder holding another sweep; Cancelled when job.cancel is raised
// (finished records stay).
EvalSweepStats run_eval_sweep(const Session& session, const EvalSweepOptions& options,
                              const JobControl& job = {}, const EvalProgressFn& on_progress = {});

// One method at one budget over a set of samples, against the reference on the same samples.
struct EvalCell {
    std::string task;    // "" for the overall row (every task and length pooled)
    int64_t length = 0;  // 0 for the overall row
    std::string method;
    double budget = 1;
    int64_t n = 0, infeasible = 0;
    int64_t schedule_fallback = 0;  // records whose PyramidKV schedule fell back to SnapKV's counts
    double mean = 0;                // mean score, 0..100
    // Paired with the reference over the samples both have (the reference's own row: empty, n 0).
    PairedComparison vs_reference;
};

struct EvalSummary {
    std::string model, mode, reference;
    std::string suite;  // "ruler" | "longbench"
    std::vector<std::string> tasks, methods;
    std::vector<double> budgets;
    std::vector<int64_t> lengths;
    int64_t samples = 0, bootstrap_resamples = 0;
    std::vector<EvalCell> cells;      // task x length x series, in that order
    std::vector<EvalCell> overall;    // per series: every task and length pooled
    std::vector<EvalCell> by_length;  // length x series: every task pooled at one length (task "")
    nlohmann::json identity;          // of the sweep (settings, seed, ...), from its records
};

// The grid's records found in out_dir (missing ones are left out of n); `options` as resolve_eval_suite
// returns them.
EvalSummary summarize_eval(const EvalSweepOptions& options);
nlohmann::json to_json(const EvalSummary& s);
// task,length,method,budget,n,mean,diff_vs_reference,ci_low,ci_high,wins,losses,sign_test_p,infeasible; the
// overall rows have task "all" and length 0.
std::string eval_summary_csv(const EvalSummary& s);
// summary.json, summary.csv and the kvpress-layout folders under out_dir/kvpress/ (eval_kvpress_folders).
void write_eval_summary(const EvalSummary& s, const EvalSweepOptions& options);
// kvpress's folder name of one run: RULER ruler__<length>__<model>__<press>__<1 - budget, 2 decimals>
// [__query_aware] (kvpress's data_dir is the length); LongBench
// longbench__<dataset>__<model>__<press>__<ratio>
// __max_context<length>[__query_aware] (its data_dir is the dataset). `full` is kvpress's no_press at 0.00;
// the ratio is 1 - kept: kept is kappa, or for a method set by its own settings (KIVI) its measured
// footprint.
std::string kvpress_folder_name(const std::string& suite, const std::string& data_dir,
                                const std::string& model, int64_t max_context, const std::string& method,
                                double kept, CompressionMode mode);

// sweep.json of an eval folder (grid of kind "eval" + identity) and its reading back, as core/niah.h's.
nlohmann::json eval_grid_json(const EvalSweepOptions& options);
EvalSweepOptions read_eval_grid(const std::filesystem::path& out_dir);

}  // namespace varrate
