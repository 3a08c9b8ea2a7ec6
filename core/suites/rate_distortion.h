#pragma once
// Rate-distortion curves: every method's distortion and accuracy over a grid of budgets kappa, on a set of
// documents (one context file, or generated needle documents). Per document one prefill capture serves
// every method and budget (core/capture.h): each method analyses it once, each kappa is an allocation plus
// a materialisation (for the attention-output error), and answers are decoded only at the grid points named
// in answer_at, so decoding is the only per-point cost that grows with the answer length. A kappa that a
// document cannot meet is recorded as infeasible for that point.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "codec/method.h"
#include "codec/registry.h"
#include "codec/settings_table.h"
#include "core/compare.h"
#include "core/session.h"
#include "core/suites/niah_document.h"
#include "core/suites/stats.h"

namespace varrate {

// One document of a curve: a context and its questions (each with an optional expected answer and answer
// prefix, as in CompareRequest). NIAH documents also say where they came from.
struct RdDocument {
    std::string id;  // "file", or "L1024-d50-s3" for generated ones
    std::string context;
    std::vector<std::string> questions, answers, answer_prefixes;
    int64_t context_length = 0;  // generated: the requested length in tokens (0 for a file)
    double depth_percent = -1;   // generated: the needle's depth (-1 for a file)
    int64_t sample = -1;         // generated: the sample index (-1 for a file)
};

// The points answers are decoded at (the budget grid is codec/settings_table.h's default_budget_grid).
std::vector<double> default_rd_answer_at();  // 0.05 0.1 0.2

struct RdRequest {
    std::vector<std::string> methods =
        default_method_names();                              // `full` is the reference point (kappa 1, once)
    std::vector<double> kappas = default_budget_grid();      // each in (0, 1], distinct
    std::vector<double> answer_at = default_rd_answer_at();  // each one of kappas; may be empty
    CompressionMode mode = CompressionMode::QueryAgnostic;
    CodecSettings settings;  // structural settings; the budget is each kappa in turn
    std::vector<RdDocument> documents;
    int64_t max_new_tokens = 32;
    bool chat = false;
};

// Needle documents for a curve: every (length, depth, sample) of the grid from one generator, in that
// nesting order, with the question, expected value and RULER answer prefix of each.
std::vector<RdDocument> niah_rd_documents(const Tokenizer& tokenizer, const NiahDocOptions& options,
                                          const std::vector<int64_t>& lengths,
                                          const std::vector<double>& depths, int64_t samples);

// One layer's distortion at one point (core/capture.h's measures; accounted footprint).
struct RdLayer {
    double footprint = 0, mean_rel_error = 0, weighted_rel_error = 0, attn_output_error = 0;
    double mean_rank = 0;
};

// One capture at one (method, kappa): one per document, one per question in query-aware mode.
struct RdSample {
    std::string document;    // RdDocument::id
    int64_t tokens = 0;      // compressed tokens (context, plus the question in query-aware mode)
    std::string infeasible;  // why this kappa cannot be met here; "" when measured
    double footprint = 0;    // stored / full bytes over all layers (basis_bytes included)
    int64_t basis_bytes = 0;
    std::vector<RdLayer> layers;
    std::vector<std::string> answers;  // at answer points: one per question of this capture
    std::vector<int> correct;          // 1/0 per answer when expected answers were given
};

// One point of a curve: a method at a kappa, aggregated over its samples.
struct RdPoint {
    std::string method;
    double kappa = 0;           // 1 for `full`
    bool answer_point = false;  // answers were decoded here
    std::vector<RdSample> samples;
    int64_t documents = 0, infeasible = 0;  // samples measured / infeasible
    // Means over layers and measured samples; -1 when no sample was measured.
    double footprint = -1, mean_rel_error = -1, weighted_rel_error = -1, attn_output_error = -1;
    std::vector<RdLayer> layers;        // per-layer means over measured samples
    int64_t answered = 0, correct = 0;  // answers with an expected answer, and the right ones
    Interval ci;                        // Wilson 95 % of correct / answered
    double accuracy() const { return answered > 0 ? static_cast<double>(correct) / answered : -1; }
};

// Milliseconds spent per stage over the whole run.
struct RdTiming {
    double prefill = 0, basis = 0, analyse = 0, allocate = 0, materialise = 0, decode = 0, total = 0;
};

struct RdResult {
    std::vector<RdPoint> points;           // method-major in request order, kappas ascending; `full` once
    std::vector<int64_t> document_tokens;  // context tokens of each document (build_prompt's context part)
    std::string basis_source;              // file, or "self-calibrated"
    std::vector<std::string> warnings;     // e.g. positions beyond the model's
    RdTiming timing;
    const RdPoint* find(const std::string& method, double kappa) const;  // null when absent
};

// Throws Error for a bad request (no documents or methods, a kappa outside (0, 1], an answer point off the
// grid, mismatched answers), Cancelled when job.cancel is raised.
RdResult run_rate_distortion(const Session& session, const RdRequest& req, const JobControl& job = {});

// rd.json: the request's settings, the documents, the points (aggregates, per-layer arrays, samples).
nlohmann::json to_json(const RdResult& r, const RdRequest& req);
// rd.csv: method,kappa,footprint,mean_rel_error,weighted_rel_error,attn_output_error,documents,infeasible,
// answered,correct,accuracy,ci_low,ci_high; one row per point. Distortion columns are empty where no
// sample was measured, the answer columns where no answer was decoded.
std::string rd_csv(const RdResult& r);

}  // namespace varrate
