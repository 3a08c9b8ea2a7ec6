#pragma once
// The resumable sweep loop that the NIAH and eval suites share. A sweep is documents in a fixed order (which
// the shards of a job array deal out) times series (a method at a budget). The runner reuses every record
// already in the folder whose sweep identity matches (and refuses, naming the record, one that does not),
// writes sweep.json, then runs one compare per document for the series it still misses and writes each
// record atomically as soon as it is measured: a killed or cancelled sweep resumes where it stopped.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/job.h"
#include "core/compare.h"
#include "core/suites/shard.h"
#include "core/suites/sweep_files.h"

namespace varrate {

class Session;

// One series: a method at a budget (1 for a method that takes none).
struct SweepSeries {
    std::string method;
    double budget = 1;
};
// Every method at every budget; a method without a budget once, at 1.
std::vector<SweepSeries> sweep_series(const std::vector<std::string>& methods,
                                      const std::vector<double>& budgets);

// One document of a sweep, made by its suite.
class SweepDocument {
  public:
    virtual ~SweepDocument() = default;
    // The document's compare request: context, questions, answers, prompt parts, stop ids, max_new_tokens,
    // chat. The runner sets the methods and budgets (the missing series'), the codec settings, the mode, and
    // that an infeasible budget is a record, not an error.
    virtual CompareRequest request() = 0;
    // The record of one run of the document, as its suite writes it.
    virtual nlohmann::json record(const MethodRun& run, const CompareResult& result, double document_ms) = 0;
};

// What a suite tells the runner.
struct SweepSuite {
    std::string name;  // the job's progress stage: "niah", "eval"
    std::filesystem::path out_dir;
    nlohmann::json grid, identity;  // sweep.json's
    std::vector<SweepSeries> series;
    int64_t documents = 0;  // in the sweep's order
    Shard shard;
    CodecSettings settings;
    CompressionMode mode = CompressionMode::QueryAgnostic;
    std::function<bool(int64_t)> exists;        // empty: every document exists
    std::function<std::string(int64_t)> label;  // "L=1024 depth=50% sample=0"
    std::function<std::filesystem::path(int64_t, const SweepSeries&)> record_path;  // where a record goes
    // An existing record of (document, series), when there is one: by default record_path when it exists (a
    // suite may also look where an older layout put it).
    std::function<std::optional<std::filesystem::path>(int64_t, const SweepSeries&)> find_record;
    // Throws Error naming `path` when the record there was written by a different sweep.
    std::function<void(const std::filesystem::path& path)> check_record;
    std::function<std::unique_ptr<SweepDocument>(int64_t)> make_document;
};

struct SweepStats {
    int64_t total = 0, computed = 0, skipped = 0, documents = 0;  // documents: compare runs
};

// Throws Error for a folder that cannot be written or holds another sweep's records; Cancelled when
// job.cancel is raised (finished records stay).
SweepStats run_sweep(const Session& session, const SweepSuite& suite, const JobControl& job,
                     const SweepProgressFn& on_progress);

// Fills what every sweep record says of its run, whatever the suite (NIAH's and eval's records both have
// these fields): model, method, budget, mode, compressed tokens, footprint, schedule fallback, timings,
// timestamp and the sweep's identity.
template <class Record>
void fill_run_fields(Record& r, const Session& session, const MethodRun& run, CompressionMode mode,
                     double document_ms, const nlohmann::json& identity) {
    r.model = model_name(session);
    r.method = run.method;
    r.budget = run.budget;
    r.mode = to_string(mode);
    r.compressed_tokens = static_cast<int64_t>(run.context_ids.size());  // + the question if query-aware
    r.footprint_fraction = run.footprint_fraction;
    r.schedule_fallback = run.schedule_fallback();
    r.prefill_ms = run.prefill_ms;
    r.compress_ms = run.compress_ms;
    r.document_ms = document_ms;
    r.timestamp = utc_timestamp();
    r.sweep = identity;
}

// The usual check_record: each identity field of the record's "sweep" equals `identity`'s.
void check_record_identity(const nlohmann::json& record_sweep, const nlohmann::json& identity,
                           const std::filesystem::path& path);

}  // namespace varrate
