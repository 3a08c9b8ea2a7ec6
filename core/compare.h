#pragma once
// Side-by-side runs of compression methods on one document: answers, footprints, timings and
// per-layer/per-token diagnostics (query-aware and query-agnostic, kvpress's conventions), and perplexity
// over a compressed prefix.
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "codec/method.h"
#include "codec/registry.h"
#include "core/prompt.h"
#include "core/session.h"

namespace varrate {

enum class CompressionMode { QueryAware, QueryAgnostic };
std::string to_string(CompressionMode m);
CompressionMode parse_mode(const std::string& s);  // "query-aware" | "query-agnostic"

struct CompareRequest {
    std::string context;
    std::vector<std::string> questions;
    std::vector<std::string> answers;  // expected answers (optional; same count as questions when given)
    // The start of each reply, given to the model after the question (optional; same count as questions when
    // given; "" for none); see build_prompt.
    std::vector<std::string> answer_prefixes;
    // Prompts already split (one per question, or one when there are none) for task suites with their own
    // templates and truncation (LongBench); when given, context, answer_prefixes and chat are not used to
    // build them (questions and answers still name and score them).
    std::vector<PromptParts> prompt_parts;
    std::vector<std::string> methods = default_method_names();  // full, varrate, flat, snapkv
    CodecSettings settings;
    // Budgets to run every compressing method at (settings.budget replaced by each); empty:
    // {settings.budget}. CompareResult.runs holds one MethodRun per (method, budget), method-major, in this
    // order inside a method; `full` once, at budget 1, whatever the list.
    std::vector<double> budgets;
    CompressionMode mode = CompressionMode::QueryAware;
    // true: one prefill capture (per question in query-aware mode) serves every method and budget
    // (core/capture.h); false: one prefill per method, budget (and question), the method compressing inside
    // it. Both give the same answers, ranks and footprints.
    bool shared_capture = true;
    // Measure each layer's attention-output error (add_distortion): a window attention over every compressed
    // cache, which sweeps that do not report it (NIAH) skip.
    bool attention_output_error = true;
    int64_t max_new_tokens = 32;
    // Tokens that end an answer besides the model's EOS (the token is kept): LongBench's samsum stops at a
    // newline, as its pred.py does.
    std::vector<int64_t> stop_ids;
    bool chat = false;
    // A method whose budget this context cannot meet (InfeasibleBudget) gets a run with `infeasible` set
    // instead of stopping the comparison.
    bool skip_infeasible = false;
};

struct MethodRun {
    std::string method;
    double budget = 0;
    // Accounted: stored bytes / full-cache bytes over all layers, i.e. what the method's budget counts.
    // stored_bytes includes basis_bytes.
    double footprint_fraction = 0;
    int64_t stored_bytes = 0, full_bytes = 0;
    // Resident: the bytes the compressed cache the answers were decoded from holds, measured from its
    // tensors (VarRate/flat: the compressed store, which adds each coded token's rank and the exact rows'
    // positions to the accounted bytes; a self-calibrated basis when charged, a shared one apart). 0 when not
    // materialised (or the separate path, which decodes from the dense reconstruction).
    int64_t resident_bytes = 0;
    double resident_fraction() const {
        return full_bytes > 0 ? static_cast<double>(resident_bytes) / static_cast<double>(full_bytes) : 0.0;
    }
    int64_t basis_bytes = 0;       // self-calibrated basis charged, over all layers (see basis_accounting)
    std::string basis_accounting;  // see basis_accounting()
    std::vector<std::string> answers;
    std::vector<std::vector<int64_t>> answer_ids;
    std::vector<int> correct;  // 1/0 per question when answers were given
    double prefill_ms = 0;     // model time of the prefill(s), codec excluded (shared: the capture's)
    double compress_ms = 0;    // time inside the codec: analysis + allocation + materialisation
    double analyse_ms = 0;     // of which the budget-independent analysis (shared by a method's budgets)
    bool self_calibrated = false;
    std::vector<int64_t> context_ids;      // what the (first) compression saw
    std::vector<LayerDiagnostics> layers;  // of the (first) compression
    std::string infeasible;                // why the budget could not be met (skip_infeasible); "" when run
    // Any layer's LayerDiagnostics::schedule_fallback: PyramidKV kept SnapKV's uniform counts.
    bool schedule_fallback() const;
};

struct CompareResult {
    std::vector<MethodRun> runs;        // per (method, budget), method-major in request order; `full` once
    std::string basis_source;           // file, or "self-calibrated"
    int64_t capture_bytes = 0;          // the largest prefill capture held (0 without a shared capture)
    std::vector<std::string> warnings;  // e.g. positions beyond the model's (positions_warning)
};

// How a method's basis enters its footprint: "basis charged" (fitted on the context itself: a
// per-sequence oracle, charged like any stored scalar), "basis not charged" (the same under paper
// accounting), "basis file" (calibrated once on other texts, shared, not charged) or "no basis".
std::string basis_accounting(const std::string& method, bool self_calibrated, const CodecSettings& s);

// The budgets a request runs (req.budgets, else settings.budget), each checked to lie in (0, 1].
std::vector<double> request_budgets(const std::vector<double>& budgets, const CodecSettings& settings);

CompareResult run_compare(const Session& session, const CompareRequest& req, const JobControl& job = {});

// The greedy answer ids to one question from each compressed cache, whose prefill ended with last_logits[k]:
// query-agnostic, the question part and the answer prefix are forwarded first (positions after the
// context); query-aware, only the answer prefix (the question is inside the compressed part). The first
// cache's answer is decoded first and is the draft the others check (generate_greedy_batch); they are decoded
// together in batches of at most kAnswerBatchBytes of padded cache. The caches are left as they were. The one
// answer path of compare, NIAH and rd.
constexpr int64_t kAnswerBatchBytes = int64_t(512) << 20;
std::vector<std::vector<int64_t>> decode_answers(const Session& session,
                                                 const std::vector<const KVCache*>& caches,
                                                 const std::vector<at::Tensor>& last_logits,
                                                 const PromptParts& parts, CompressionMode mode,
                                                 int64_t max_new_tokens, const JobControl& job = {},
                                                 const std::vector<int64_t>& extra_stop_ids = {});
// decode_answers of one cache.
std::vector<int64_t> decode_answer(const Session& session, const KVCache& cache,
                                   const at::Tensor& last_logits, const PromptParts& parts,
                                   CompressionMode mode, int64_t max_new_tokens, const JobControl& job = {});

// The one JSON form of a method's run: the fields of `varrate compare --json`'s methods[]; per_token adds the
// context ids and every layer's per-token diagnostics (session files).
nlohmann::json to_json(const MethodRun& run, bool per_token = false);
// Inverse of to_json(run, true). Throws Error "<where>: ..." on a malformed object.
MethodRun method_run_from_json(const nlohmann::json& j, const std::string& where);

// One object per method with the fields of `varrate compare --json`.
nlohmann::json to_json(const CompareResult& r, const CompareRequest& req);
// CSV: method, layer, position, token_id, token_text, salience, rank, exact, rel_error (one row per method,
// layer, position of the first compression).
std::string rank_log_csv(const CompareResult& r, const Tokenizer& tokenizer);

struct PplRequest {
    std::vector<int64_t> ids;                                   // the whole scored text
    int64_t prefix_tokens = 0;                                  // compressed part
    std::vector<std::string> methods = default_method_names();  // full, varrate, flat, snapkv
    CodecSettings settings;
    std::vector<double> budgets;  // empty: {settings.budget}; `full` runs once
    // A text longer than the model's max_position_embeddings is refused (an Error naming
    // --allow-beyond-positions) unless this is set: a perplexity there measures untrained positions.
    bool allow_beyond_positions = false;
};

struct PplRun {
    std::string method;
    double budget = 0;
    double ppl = 0, nll = 0;  // over tokens prefix_tokens..end
    int64_t scored_tokens = 0;
    double footprint_fraction = 0;  // accounted, basis_bytes included
    int64_t basis_bytes = 0;
    std::string basis_accounting;
    bool self_calibrated = false;
};

// Compresses the first prefix_tokens' cache, then scores the rest with teacher forcing over it (paper A.1).
// One prefill capture of the prefix serves every method and budget; one run per (method, budget).
std::vector<PplRun> run_perplexity(const Session& session, const PplRequest& req, const JobControl& job = {});

// Containment match: the expected answer (trimmed, case-insensitive) occurs in the response.
bool answer_matches(const std::string& response, const std::string& expected);

}  // namespace varrate
