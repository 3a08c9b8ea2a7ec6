#pragma once
// Needle-in-a-haystack sweeps over the documents of core/niah_document.h: every method at every budget of the
// list on the same document per (length, depth, sample) (one run_compare per document; `full` once, at
// budget 1), one NiahRecord (core/niah_record.h) per (method, budget, length, depth, sample) written
// atomically, finished records skipped when re-run, and an accuracy summary with Wilson 95 % intervals
// (core/stats.h) per cell and per method x budget. A budget that a length cannot meet is recorded as
// "infeasible" for that cell and left out of the accuracy. The needle protocol (fresh or fixed, see
// NeedleProtocol) is part of the sweep's identity: records of the other protocol are never mixed in.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "codec/method.h"
#include "core/compare.h"
#include "core/session.h"
#include "core/suites/needle_probe.h"
#include "core/suites/niah_document.h"
#include "core/suites/niah_record.h"
#include "core/suites/shard.h"
#include "core/suites/stats.h"
#include "core/suites/sweep_files.h"
#include "core/suites/sweep_runner.h"

namespace varrate {

struct NiahSweepOptions {
    std::vector<int64_t> lengths;                               // context lengths in the model's tokens
    std::vector<double> depths;                                 // needle depth percent, 0..100
    int64_t samples = 1;                                        // documents per (length, depth)
    std::vector<std::string> methods = default_method_names();  // full, varrate, flat, snapkv
    CodecSettings settings;
    std::vector<double> budgets;  // the compressed methods' budgets, each in (0, 1]; empty: {settings.budget}
    CompressionMode mode = CompressionMode::QueryAgnostic;
    NiahDocOptions doc;
    std::string haystack_name = "procedural";  // recorded: the haystack file, or "procedural"
    int64_t max_new_tokens = 32;
    std::filesystem::path out_dir;
    // Only this part of the documents (core/shard.h); the records of the others are left to other processes.
    Shard shard;
};

// The budget list a sweep runs: options.budgets, or {options.settings.budget} when it is empty.
std::vector<double> niah_budgets(const NiahSweepOptions& options);

using NiahProgress = SweepProgress;
using NiahProgressFn = std::function<void(const NiahProgress&)>;

using NiahSweepStats = SweepStats;

// The grid of out_dir/sweep.json (core/sweep_files.h): methods, budgets, lengths, depths, samples, mode and
// needle protocol, of kind "niah"; every run writes it, `varrate summarize` reads it back.
nlohmann::json niah_grid_json(const NiahSweepOptions& options);
// The options a summary of `out_dir` needs, from its sweep.json. Throws Error naming the file when it is
// missing, not a NIAH sweep, or malformed.
NiahSweepOptions read_niah_grid(const std::filesystem::path& out_dir);

// Throws Error for bad options or for records in out_dir written by a different sweep (other model,
// settings, mode, seed, needle protocol or haystack; the budget is not part of it: each budget has its own
// records), Cancelled when job.cancel is raised (finished records stay).
NiahSweepStats run_niah_sweep(const Session& session, const NiahSweepOptions& options,
                              const JobControl& job = {}, const NiahProgressFn& on_progress = {});

struct NiahCell {
    std::string method;
    double budget = 1;  // 1 for `full`
    int64_t context_length = 0;
    double depth_percent = 0;
    int64_t n = 0, correct = 0;
    int64_t infeasible = 0;  // records whose budget this length cannot meet: not in n
    double accuracy() const { return n > 0 ? static_cast<double>(correct) / static_cast<double>(n) : -1; }
    // Wilson 95 % interval of the accuracy; {0, 1} when n = 0.
    Interval interval() const { return wilson_interval(correct, n); }
};

// One heatmap of a summary: a method at one budget of the list (`full` once, at budget 1).
struct NiahSeries {
    std::string method;
    double budget = 1;
    std::string key() const { return niah_series_key(method, budget); }  // "full", "varrate/k0.1"
    std::string label() const;                                           // "full", "varrate κ=0.1"
};

// What a method kept of the asked needle's value, over the records whose answer was right or wrong, and of
// the distractors' values (see core/needle_probe.h).
struct NiahRetention {
    RetentionTally needle_correct, needle_wrong, distractors;
};

struct NiahSummary {
    std::string model, mode;
    std::string needles;  // the needle protocol: "fresh" | "fixed"
    std::vector<std::string> methods;
    std::vector<double> budgets;     // the compressed methods' budget list
    std::vector<NiahSeries> series;  // methods x budgets in that order; full and KIVI once (budget 1)
    std::vector<int64_t> lengths;
    std::vector<double> depths;
    int64_t samples = 0;
    std::vector<NiahCell> cells;                     // series x depths x lengths, row-major in that order
    std::map<std::string, NiahRetention> retention;  // by series key ("full", "varrate/k0.1")
    // Per series, the mean footprint its feasible records measured (0 when none): what labels a method set by
    // its own settings (KIVI), which runs once whatever the budget list.
    std::vector<double> footprint;
    // Per series, its records whose PyramidKV depth schedule fell back to SnapKV's uniform counts.
    std::vector<int64_t> schedule_fallback;
    const NiahCell& cell(size_t series, size_t depth, size_t length) const;
    // A series' cells pooled (every length and depth): n, correct and infeasible summed; its interval is
    // the Wilson interval of the pooled counts.
    NiahCell overall(size_t series) const;
};

// The heatmaps of a sweep: each method at each budget of `budgets`, `full` once at budget 1.
std::vector<NiahSeries> niah_series(const std::vector<std::string>& methods,
                                    const std::vector<double>& budgets);

// Accuracy over the records of the options' grid found in out_dir (missing records count as n = 0); records
// of the layout before budget lists are read where the new path has none (find_niah_record).
NiahSummary summarize_niah(const NiahSweepOptions& options);
nlohmann::json to_json(const NiahSummary& s);
// method,budget,context_length,depth_percent,n,correct,accuracy,ci_low,ci_high,infeasible (accuracy and the
// interval empty when n = 0).
std::string summary_csv(const NiahSummary& s);
// out_dir/summary.json and out_dir/summary.csv.
void write_niah_summary(const NiahSummary& s, const std::filesystem::path& out_dir);

}  // namespace varrate
