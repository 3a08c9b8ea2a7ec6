#pragma once
// What run_compare and LiveCompare share: a request turned into a plan, one slot per (method, budget), and
// the steps that fill a slot and finish a result. Internal to core/ (compare.cpp, live_compare.cpp).
#include <memory>
#include <string>
#include <vector>

#include "core/compare.h"
#include "core/exploration.h"

namespace varrate::compare_detail {

// One (method, budget) of a comparison and where its results go.
struct RunSlot {
    size_t method = 0;  // index into req.methods
    double budget = 1.0;
    CodecSettings settings;  // req.settings with this budget
    MethodRun run;
};

// A compressed cache waiting for its answers, and the logits its compression ended on.
struct PendingAnswers {
    RunSlot* slot = nullptr;
    KVCache cache;
    at::Tensor last_logits;
};

// A request checked and turned into what its runs need: the token ids of every question, the budgets and the
// basis. One slot per (method, budget) comes from make_slots.
struct ComparePlan {
    std::vector<std::string> questions;  // at least one ("" without questions: compress only)
    std::vector<PromptParts> parts;      // per question; the context part is shared
    std::vector<double> budgets;
    std::shared_ptr<const Basis> basis;
    CompareResult skeleton;  // warnings and basis source

    size_t n_captures(const CompareRequest& req) const {
        return req.mode == CompressionMode::QueryAgnostic ? 1 : questions.size();
    }
    // What capture ci prefills: the context, and in query-aware mode question ci too.
    std::vector<int64_t> compressed_ids(const CompareRequest& req, size_t ci) const {
        std::vector<int64_t> ids = parts[ci].context_ids;
        if (req.mode == CompressionMode::QueryAware)
            ids.insert(ids.end(), parts[ci].question_ids.begin(), parts[ci].question_ids.end());
        return ids;
    }
};

// The extra passes capture ci needs for req.methods (core/probe.h). The question pass reads the first
// question of the capture (query-agnostic: question 1 for every question).
ProbeRequest probe_request(const CompareRequest& req, const ComparePlan& plan, size_t ci);

ComparePlan plan_compare(const Session& s, const CompareRequest& req, const JobControl& job);
// One slot per (method, budget); `full` once.
std::vector<RunSlot> make_slots(const CompareRequest& req, const ComparePlan& plan);
// Answers every question from every pending cache (query-aware: question `only_q` only), decoding the
// caches of one capture together (decode_answers), and empties `pending`.
void answer_pending(const Session& s, std::vector<PendingAnswers>& pending,
                    const std::vector<PromptParts>& parts, const CompareRequest& req, int64_t only_q,
                    const JobControl& job);
// Footprint of a run from its layers (basis bytes included).
void add_footprint(MethodRun& run);
// The slot's run replaced by an infeasible one saying why.
void mark_infeasible(RunSlot& slot, const std::string& why);
// What an explored run adds to its slot: its timings, and for the first capture its diagnostics (copied: the
// run keeps them). Returns false when the run was infeasible (the slot then says why).
bool record_explored(RunSlot& slot, const ExploredRun& r, const PrefillCapture& capture, bool first_capture);
// The runs of `slots` as a result: answers as text (and whether they are right), footprints.
CompareResult finish_result(const Session& s, const CompareRequest& req, const ComparePlan& plan,
                            std::vector<RunSlot> slots);

}  // namespace varrate::compare_detail
