#pragma once
// One NIAH result: what `varrate niah` writes per (method, length, depth, sample) under records/, what the
// summary reads back, and what scripts/niah-failures.py reads. Written and parsed here only.
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

// out_dir/records/<method>/L<length>_D<depth>_S<sample>.json
std::filesystem::path niah_record_path(const std::filesystem::path& out_dir, const std::string& method,
                                       int64_t length, double depth_percent, int64_t sample);
// How depths are written in file names, summaries and tables: "%g" (50, 12.5).
std::string niah_depth_label(double depth_percent);

}  // namespace varrate
