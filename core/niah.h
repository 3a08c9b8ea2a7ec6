#pragma once
// Needle-in-a-haystack sweeps over the documents of core/niah_document.h: every method on the same document
// per (length, depth, sample), one NiahRecord (core/niah_record.h) per (method, length, depth, sample)
// written atomically, finished records skipped when re-run, and an accuracy summary. A budget that a length
// cannot meet is recorded as "infeasible" for that cell and left out of the accuracy.
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
#include "core/needle_probe.h"
#include "core/niah_document.h"
#include "core/niah_record.h"
#include "core/session.h"

namespace varrate {

struct NiahSweepOptions {
    std::vector<int64_t> lengths;                       // context lengths in the model's tokens
    std::vector<double> depths;                         // needle depth percent, 0..100
    int64_t samples = 1;                                // documents per (length, depth)
    std::vector<std::string> methods = method_names();  // every registered method
    CodecSettings settings;
    CompressionMode mode = CompressionMode::QueryAgnostic;
    NiahDocOptions doc;
    std::string haystack_name = "procedural";  // recorded: the haystack file, or "procedural"
    int64_t max_new_tokens = 32;
    std::filesystem::path out_dir;
};

struct NiahProgress {
    int64_t done = 0, total = 0;  // records (method x length x depth x sample), skipped ones included
    int64_t computed = 0, skipped = 0;
    double elapsed_s = 0, eta_s = -1;  // eta < 0: not known yet
    std::string cell;                  // e.g. "L=1024 depth=50% sample=0"
    std::string stage;                 // inside the current document ("" between documents)
    int64_t stage_done = 0, stage_total = 0;
};
using NiahProgressFn = std::function<void(const NiahProgress&)>;

struct NiahSweepStats {
    int64_t total = 0, computed = 0, skipped = 0, documents = 0;  // documents: run_compare calls
};

// Throws Error for bad options or for records in out_dir written by a different sweep (other model,
// settings, mode, seed or haystack), Cancelled when job.cancel is raised (finished records stay).
NiahSweepStats run_niah_sweep(const Session& session, const NiahSweepOptions& options,
                              const JobControl& job = {}, const NiahProgressFn& on_progress = {});

struct NiahCell {
    std::string method;
    int64_t context_length = 0;
    double depth_percent = 0;
    int64_t n = 0, correct = 0;
    int64_t infeasible = 0;  // records whose budget this length cannot meet: not in n
    double accuracy() const { return n > 0 ? static_cast<double>(correct) / static_cast<double>(n) : -1; }
};

// What a method kept of the asked needle's value, over the records whose answer was right or wrong, and of
// the distractors' values (see core/needle_probe.h).
struct NiahRetention {
    RetentionTally needle_correct, needle_wrong, distractors;
};

struct NiahSummary {
    std::string model, mode;
    double budget = 0;
    std::vector<std::string> methods;
    std::vector<int64_t> lengths;
    std::vector<double> depths;
    int64_t samples = 0;
    std::vector<NiahCell> cells;                     // methods x depths x lengths, row-major in that order
    std::map<std::string, NiahRetention> retention;  // by method
    const NiahCell& cell(size_t method, size_t depth, size_t length) const;
};

// Accuracy over the records of the options' grid found in out_dir (missing records count as n = 0).
NiahSummary summarize_niah(const NiahSweepOptions& options);
nlohmann::json to_json(const NiahSummary& s);
// method,context_length,depth_percent,n,correct,accuracy,infeasible (accuracy empty when n = 0).
std::string summary_csv(const NiahSummary& s);
// out_dir/summary.json and out_dir/summary.csv.
void write_niah_summary(const NiahSummary& s, const std::filesystem::path& out_dir);

}  // namespace varrate
