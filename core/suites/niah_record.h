#pragma once
// One NIAH result: what `varrate niah` writes per (method, budget, length, depth, sample) under records/,
// what the summary reads back, and what scripts/niah-failures.py reads. Written and parsed here only, and
// so are the paths of the records (niah_record_path and the older layout's fallback).
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace varrate {

struct NiahRecord {
    std::string model;  // the model directory's name
    std::string method;
    double budget = 0;
    std::string mode;  // "query-aware" | "query-agnostic"
    int64_t context_length = 0;
    double depth_percent = 0;
    int64_t sample = 0;
    std::string needle, question, answer_prefix, expected, response;
    std::optional<bool> correct;  // absent for an infeasible cell
    std::string infeasible;       // why the budget could not be met at this length; "" when run
    std::vector<std::string> distractor_needles;
    int64_t context_tokens = 0;
    int64_t compressed_tokens = 0;  // the context, plus the question in query-aware mode
    int64_t haystack_tokens = 0;
    int64_t needle_token_offset = 0;
    double footprint_fraction = 0;
    bool schedule_fallback = false;  // PyramidKV ran SnapKV's uniform counts (written only when true)
    // {"needle": NeedleRetention json | null, "distractors": ...} (core/needle_probe.h); null when infeasible
    nlohmann::json needle_retention;
    bool self_calibrated = false;
    double prefill_ms = 0, compress_ms = 0, document_ms = 0;
    int64_t methods_in_document = 0;
    std::string timestamp;  // UTC, ISO 8601
    nlohmann::json sweep;  // the sweep's identity (model fingerprint, settings, seed, ...): see core/niah.cpp
};

nlohmann::json to_json(const NiahRecord& r);
// Throws Error "<where>: ..." for a record that is not an object, lacks the sweep identity, or has a field of
// the wrong type; a run record must say whether it was correct.
NiahRecord niah_record_from_json(const nlohmann::json& j, const std::string& where);
NiahRecord read_niah_record(const std::filesystem::path& path);

// The records subdirectory of a method at a budget, relative to out_dir/records: "<method>" for `full`,
// "<method>/k<budget as %g>" for the others ("varrate/k0.1"). Summaries use it as the series' key.
std::string niah_series_key(const std::string& method, double budget);
// out_dir/records/<series key>/L<length>_D<depth>_S<sample>.json: records/full/L.._D.._S...json, and
// records/varrate/k0.1/L.._D.._S...json for a compressed method (`budget` is ignored for `full`).
std::filesystem::path niah_record_path(const std::filesystem::path& out_dir, const std::string& method,
                                       double budget, int64_t length, double depth_percent, int64_t sample);
// Where a record was before budget lists (one budget per directory): records/<method>/L.._D.._S...json
// for every method.
std::filesystem::path niah_legacy_record_path(const std::filesystem::path& out_dir, const std::string& method,
                                              int64_t length, double depth_percent, int64_t sample);
// The record of (method, budget, length, depth, sample) in out_dir: niah_record_path when it exists, else,
// for a compressed method, a record at the legacy path whose budget is `budget` (so that the directories of
// single-budget sweeps are summarised and resumed as before); nullopt when there is neither. Throws Error
// for a legacy record that cannot be read.
std::optional<std::filesystem::path> find_niah_record(const std::filesystem::path& out_dir,
                                                      const std::string& method, double budget,
                                                      int64_t length, double depth_percent, int64_t sample);
// Whether two budgets are the same (a budget read back from JSON equals the one written, within rounding).
bool same_budget(double a, double b);
// How depths are written in file names, summaries and tables: "%g" (50, 12.5).
std::string niah_depth_label(double depth_percent);

}  // namespace varrate
