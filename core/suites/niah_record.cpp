#include "core/suites/niah_record.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "base/error.h"
#include "base/file_io.h"
#include "base/json_field.h"
#include "codec/registry.h"

namespace varrate {

nlohmann::json to_json(const NiahRecord& r) {
    nlohmann::json j;
    j["model"] = r.model;
    j["method"] = r.method;
    j["budget"] = r.budget;
    j["mode"] = r.mode;
    j["context_length"] = r.context_length;
    j["depth_percent"] = r.depth_percent;
    j["sample"] = r.sample;
    j["needle"] = r.needle;
    j["question"] = r.question;
    j["answer_prefix"] = r.answer_prefix;
    j["expected"] = r.expected;
    j["response"] = r.response;
    if (r.correct) j["correct"] = *r.correct;
    if (!r.infeasible.empty()) j["infeasible"] = r.infeasible;  // not counted in the accuracy
    j["distractor_needles"] = r.distractor_needles;
    j["context_tokens"] = r.context_tokens;
    j["compressed_tokens"] = r.compressed_tokens;
    j["haystack_tokens"] = r.haystack_tokens;
    j["needle_token_offset"] = r.needle_token_offset;
    j["footprint_fraction"] = r.footprint_fraction;
    if (r.schedule_fallback) j["schedule_fallback"] = true;
    if (!r.needle_retention.is_null()) j["needle_retention"] = r.needle_retention;
    j["self_calibrated"] = r.self_calibrated;
    j["durations"] = {{"prefill_ms", r.prefill_ms},
                      {"compress_ms", r.compress_ms},
                      {"document_ms", r.document_ms},
                      {"methods_in_document", r.methods_in_document}};
    j["timestamp"] = r.timestamp;
    j["sweep"] = r.sweep;
    return j;
}

NiahRecord niah_record_from_json(const nlohmann::json& j, const std::string& where) {
    if (!j.is_object() || !j.contains("sweep") || !j["sweep"].is_object())
        throw Error(where + ": not a needle-in-a-haystack record (no \"sweep\" object)");
    NiahRecord r;
    r.model = json_field<std::string>(j, "model", where, "");
    r.method = json_field<std::string>(j, "method", where, "");
    r.budget = json_field<double>(j, "budget", where, 0);
    r.mode = json_field<std::string>(j, "mode", where, "");
    r.context_length = json_field<int64_t>(j, "context_length", where, 0);
    r.depth_percent = json_field<double>(j, "depth_percent", where, 0);
    r.sample = json_field<int64_t>(j, "sample", where, 0);
    r.needle = json_field<std::string>(j, "needle", where, "");
    r.question = json_field<std::string>(j, "question", where, "");
    r.answer_prefix = json_field<std::string>(j, "answer_prefix", where, "");
    r.expected = json_field<std::string>(j, "expected", where, "");
    r.response = json_field<std::string>(j, "response", where, "");
    r.infeasible = json_field<std::string>(j, "infeasible", where, "");
    if (j.contains("correct")) {
        if (!j["correct"].is_boolean()) throw Error(where + ": \"correct\" is not a boolean");
        r.correct = j["correct"].get<bool>();
    }
    if (r.infeasible.empty() && !r.correct) throw Error(where + ": record has no boolean \"correct\"");
    r.distractor_needles = json_field<std::vector<std::string>>(j, "distractor_needles", where, {});
    r.context_tokens = json_field<int64_t>(j, "context_tokens", where, 0);
    r.compressed_tokens = json_field<int64_t>(j, "compressed_tokens", where, 0);
    r.haystack_tokens = json_field<int64_t>(j, "haystack_tokens", where, 0);
    r.needle_token_offset = json_field<int64_t>(j, "needle_token_offset", where, 0);
    r.footprint_fraction = json_field<double>(j, "footprint_fraction", where, 0);
    r.schedule_fallback = json_field<bool>(j, "schedule_fallback", where, false);
    if (j.contains("needle_retention") && j["needle_retention"].is_object())
        r.needle_retention = j["needle_retention"];
    r.self_calibrated = json_field<bool>(j, "self_calibrated", where, false);
    if (j.contains("durations")) {
        const nlohmann::json& d = j["durations"];
        const std::string w = where + " durations";
        r.prefill_ms = json_field<double>(d, "prefill_ms", w, 0);
        r.compress_ms = json_field<double>(d, "compress_ms", w, 0);
        r.document_ms = json_field<double>(d, "document_ms", w, 0);
        r.methods_in_document = json_field<int64_t>(d, "methods_in_document", w, 0);
    }
    r.timestamp = json_field<std::string>(j, "timestamp", where, "");
    r.sweep = j["sweep"];
    return r;
}

NiahRecord read_niah_record(const std::filesystem::path& path) {
    return niah_record_from_json(read_json_file(path), path.string());
}

std::string niah_depth_label(double depth_percent) {
    return fmt::format("{:g}", depth_percent);
}

std::string niah_series_key(const std::string& method, double budget) {
    return method_takes_budget(method) ? fmt::format("{}/k{:g}", method, budget) : method;
}

namespace {

std::string record_file_name(int64_t length, double depth_percent, int64_t sample) {
    return fmt::format("L{}_D{}_S{}.json", length, niah_depth_label(depth_percent), sample);
}

}  // namespace

std::filesystem::path niah_record_path(const std::filesystem::path& out_dir, const std::string& method,
                                       double budget, int64_t length, double depth_percent, int64_t sample) {
    return out_dir / "records" / niah_series_key(method, budget) /
           record_file_name(length, depth_percent, sample);
}

std::filesystem::path niah_legacy_record_path(const std::filesystem::path& out_dir, const std::string& method,
                                              int64_t length, double depth_percent, int64_t sample) {
    return out_dir / "records" / method / record_file_name(length, depth_percent, sample);
}

std::optional<std::filesystem::path> find_niah_record(const std::filesystem::path& out_dir,
                                                      const std::string& method, double budget,
                                                      int64_t length, double depth_percent, int64_t sample) {
    std::filesystem::path path = niah_record_path(out_dir, method, budget, length, depth_percent, sample);
    if (std::filesystem::exists(path)) return path;
    if (!method_takes_budget(method)) return std::nullopt;  // full, KIVI: both layouts are the same path
    path = niah_legacy_record_path(out_dir, method, length, depth_percent, sample);
    if (!std::filesystem::exists(path)) return std::nullopt;
    // A single-budget sweep's record: it answers for its own budget only.
    if (!same_budget(read_niah_record(path).budget, budget)) return std::nullopt;
    return path;
}

bool same_budget(double a, double b) {
    return std::abs(a - b) <= 1e-12 * std::max(1.0, std::abs(b));
}

}  // namespace varrate
