#pragma once
// A comparison kept alive for interactive exploration (the app's live controls). Its captures (one; one per
// question in query-aware mode) and every method's analyses stay in memory, so update() re-allocates every
// run at a new budget, r_min or R in milliseconds — ranks, per-token errors, footprints, the
// salience-weighted error — and re-analyses at new structural settings, without a prefill. What needs the
// compressed caches (answers, the attention-output error) follows in decode() or materialise(), when the user
// rests. A prefill runs again only when the observation window grows past what was captured or a basis fitted
// on the context must be fitted again (stride, anchors, window changed, or R above the rows fitted), whose
// calibration prefills the context (the capture is kept).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/compare.h"

namespace varrate {

// One method at one kappa on the kept capture (rate_distortion()).
struct RatePoint {
    std::string method;
    double kappa = 0;      // 1 for `full`
    double footprint = 0;  // accounted stored / full bytes over all layers (basis bytes included)
    // Means over layers; -1 when not measured (attention-output error: only when asked for).
    double kv_error = -1, weighted_error = -1, attn_output_error = -1;
    std::string infeasible;  // why this kappa cannot be met; "" when measured
};

// What update() has to redo for new settings.
enum class LiveUpdateCost {
    Allocate,  // budget, r_min (or structural settings analysed before): milliseconds
    Analyse,   // new structural settings or R: every method analyses the capture again
    Refit,     // a basis fitted on the context again (stride, anchors, window, a larger R): its calibration
               // prefill, then new analyses on the kept capture
    Capture,   // a longer observation window: a new capture (prefill)
};

class LiveCompare {
  public:
    // Captures, analyses and allocates `req` (no answers yet: decode()).
    LiveCompare(const Session& session, const CompareRequest& req, const JobControl& job = {});
    ~LiveCompare();
    LiveCompare(const LiveCompare&) = delete;
    LiveCompare& operator=(const LiveCompare&) = delete;

    LiveUpdateCost update_cost(const CodecSettings& settings) const;
    // Every run re-allocated at `settings` and `budgets` (request_budgets' rules). Answers go stale and the
    // compressed caches are dropped until decode() or materialise(). Analyses of other structural settings
    // are dropped (returning to them analyses again).
    void update(const CodecSettings& settings, const std::vector<double>& budgets,
                const JobControl& job = {});
    // The compressed caches and every layer's attention-output error.
    void materialise(const JobControl& job = {});
    // materialise(), then every question's answers from every cache (decoded together).
    void decode(const JobControl& job = {});
    bool answers_stale() const;
    bool materialised() const;

    const CompareRequest& request() const;
    CompareResult result() const;  // run_compare's result for the current request; answers as of decode()
    int64_t captures() const;      // prefill captures made so far
    int64_t held_bytes() const;    // what the captures hold (keys, values, window queries, references)

    // Every compressing method of the request at each kappa (the other settings as they are now), and
    // `full` once, on the first capture (query-aware: the first question's): footprint and K/V errors from
    // allocations alone; with attention_output each point is also materialised for its attention-output error
    // (a reconstruction per point). Leaves the current runs as they are.
    std::vector<RatePoint> rate_distortion(const std::vector<double>& kappas, bool attention_output,
                                           const JobControl& job = {});

  private:
    struct State;
    std::unique_ptr<State> st_;
};

}  // namespace varrate
