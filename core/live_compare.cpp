// LiveCompare: run_compare's plan and slots kept alive over captures that stay in memory; each update
// re-allocates, materialisation and answers wait until they are asked for.
#include "core/live_compare.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "base/error.h"
#include "base/stopwatch.h"
#include "codec/registry.h"
#include "codec/settings_table.h"
#include "core/capture.h"
#include "core/compare_internal.h"
#include "core/exploration.h"

namespace varrate {

using namespace compare_detail;

struct LiveCompare::State {
    const Session& s;
    CompareRequest req;
    ComparePlan plan;
    std::vector<RunSlot> slots;
    std::vector<std::unique_ptr<CaptureExploration>> explored;  // per capture
    std::vector<std::vector<ExploredRun>> runs;                 // [capture][slot]
    bool stale = true, materialised = false;
    int64_t captures = 0;

    // New captures of the request; the current ones stay until they are swapped in.
    std::vector<std::unique_ptr<CaptureExploration>> capture(const JobControl& job) {
        std::vector<std::unique_ptr<CaptureExploration>> out;
        for (size_t ci = 0; ci < plan.n_captures(req); ++ci) {
            out.push_back(std::make_unique<CaptureExploration>(s, plan.compressed_ids(req, ci), req.settings,
                                                               plan.basis, req.attention_output_error, job,
                                                               probe_request(req, plan, ci)));
            ++captures;
        }
        return out;
    }

    // Every slot of the current request allocated on the captures (analyses made once and kept by them).
    void allocate(const JobControl& job) {
        slots = make_slots(req, plan);
        runs.assign(explored.size(), std::vector<ExploredRun>(slots.size()));
        const int64_t n_steps = static_cast<int64_t>(explored.size() * slots.size());
        int64_t step = 0;
        for (size_t ci = 0; ci < explored.size(); ++ci) {
            const PrefillCapture& capture = explored[ci]->capture();
            for (size_t k = 0; k < slots.size(); ++k) {
                RunSlot& slot = slots[k];
                if (!slot.run.infeasible.empty()) continue;
                check_cancel(job);
                const std::string& method = req.methods[slot.method];
                if (!explored[ci]->has_analysis(method, slot.settings))
                    job.report("analyse " + method, step, n_steps);
                runs[ci][k] = explored[ci]->allocate(method, slot.settings, req.skip_infeasible, job);
                record_explored(slot, runs[ci][k], capture, ci == 0);
                ++step;
            }
        }
        stale = !req.questions.empty();
        materialised = false;
    }

    // The compressed caches of every run, and the attention-output errors they give, into the slots.
    void materialise(const JobControl& job) {
        if (materialised) return;
        const int64_t n_steps = static_cast<int64_t>(explored.size() * slots.size());
        int64_t step = 0;
        for (size_t ci = 0; ci < explored.size(); ++ci)
            for (size_t k = 0; k < slots.size(); ++k) {
                ExploredRun& r = runs[ci][k];
                check_cancel(job);
                job.report("materialise " + r.method, step++, n_steps);
                if (!r.infeasible.empty() || r.materialised() || !slots[k].run.infeasible.empty()) continue;
                explored[ci]->materialise(r);
                slots[k].run.compress_ms += r.materialise_ms;
                if (ci == 0) {
                    slots[k].run.layers = r.layers;  // with the attention-output errors now
                    slots[k].run.resident_bytes = r.resident_bytes;
                }
            }
        materialised = true;
    }
};

LiveCompare::LiveCompare(const Session& session, const CompareRequest& req, const JobControl& job)
    : st_(std::make_unique<State>(State{session, req, plan_compare(session, req, job), {}, {}, {}})) {
    st_->explored = st_->capture(job);
    st_->allocate(job);
}

LiveCompare::~LiveCompare() = default;

namespace {

// A basis fitted on the context depends on what it was fitted on: the coded tokens' residuals (stride,
// anchors, window) and how many rows were kept (min(R, D)). The observation window and the pool kernel do
// not enter it.
bool basis_refit(const ComparePlan& plan, const CodecSettings& from, const CodecSettings& to) {
    if (!plan.basis || !plan.basis->info().self_calibrated) return false;
    const BasisInfo& info = plan.basis->info();
    for (const CodecSettingSpec& spec : codec_setting_specs())
        if (spec.shapes_basis && !same_setting(spec, from, to)) return true;
    return std::min(to.rank, info.dim) > info.rank;
}

}  // namespace

// The distortion references depend on the observation window and the pool kernel: another of either
// measures the kept captures again (no prefill).
bool new_references(const PrefillCapture& capture, const CodecSettings& to) {
    return capture.obs_window != to.obs_window || capture.pool_kernel != to.pool_kernel;
}

LiveUpdateCost LiveCompare::update_cost(const CodecSettings& settings) const {
    const State& st = *st_;
    const PrefillCapture& capture = st.explored.front()->capture();
    if (settings.obs_window > kept_window_queries(capture)) return LiveUpdateCost::Capture;
    if (basis_refit(st.plan, st.req.settings, settings)) return LiveUpdateCost::Refit;
    if (new_references(capture, settings)) return LiveUpdateCost::Analyse;
    for (const std::string& method : st.req.methods)
        if (!st.explored.front()->has_analysis(method, settings)) return LiveUpdateCost::Analyse;
    return LiveUpdateCost::Allocate;
}

void LiveCompare::update(const CodecSettings& settings, const std::vector<double>& budgets,
                         const JobControl& job) {
    State& st = *st_;
    const std::vector<double> checked = request_budgets(budgets, settings);  // before anything changes
    const PrefillCapture& kept = st.explored.front()->capture();
    const bool refit = basis_refit(st.plan, st.req.settings, settings);
    const bool recapture = settings.obs_window > kept_window_queries(kept);
    const bool remeasure = new_references(kept, settings);
    // A cancelled or failed update leaves the comparison as it was: what it replaces is kept until it is
    // done.
    const CompareRequest old_req = st.req;
    const ComparePlan old_plan = st.plan;
    std::vector<RunSlot> old_slots = st.slots;
    std::vector<std::vector<ExploredRun>> old_runs = st.runs;
    const bool old_stale = st.stale, old_materialised = st.materialised;
    std::vector<std::unique_ptr<CaptureExploration>> fresh;
    try {
        st.req.settings = settings;
        st.req.budgets = budgets;
        st.plan.budgets = checked;
        if (refit) st.plan.basis = st.s.basis_for(st.plan.parts[0].context_ids, settings, job);
        if (recapture) {
            fresh = st.capture(job);
        } else if (refit || remeasure) {
            // The same captures (measured again when the references change) with the current basis: no
            // prefill.
            for (const auto& e : st.explored) {
                check_cancel(job);
                std::shared_ptr<const PrefillCapture> capture = e->shared_capture();
                if (remeasure)
                    capture = std::make_shared<const PrefillCapture>(with_references(
                        *capture, settings.obs_window, settings.pool_kernel, st.req.attention_output_error));
                fresh.push_back(std::make_unique<CaptureExploration>(st.s, capture, st.plan.basis));
            }
        } else {
            st.allocate(job);
        }
    } catch (...) {
        st.req = old_req;
        st.plan = old_plan;
        st.slots = std::move(old_slots);
        st.runs = std::move(old_runs);
        st.stale = old_stale;
        st.materialised = old_materialised;
        throw;
    }
    old_runs.clear();  // they refer to analyses that go now
    if (!fresh.empty()) {
        // The new explorations replace the old ones: allocate on them to the end (a cancel here would leave
        // runs of neither).
        st.runs.clear();
        st.explored = std::move(fresh);
        JobControl uncancellable;
        uncancellable.progress = job.progress;
        st.allocate(uncancellable);
    } else {
        for (auto& e : st.explored) e->retain_analyses(settings);
    }
}

void LiveCompare::materialise(const JobControl& job) {
    st_->materialise(job);
}

void LiveCompare::decode(const JobControl& job) {
    State& st = *st_;
    st.materialise(job);
    for (RunSlot& slot : st.slots) slot.run.answer_ids.clear();
    for (size_t ci = 0; ci < st.explored.size() && !st.req.questions.empty(); ++ci) {
        const PrefillCapture& capture = st.explored[ci]->capture();
        std::vector<PendingAnswers> pending;
        for (size_t k = 0; k < st.slots.size(); ++k)
            if (st.slots[k].run.infeasible.empty())
                pending.push_back({&st.slots[k],
                                   cache_from_layers(st.s.model(), st.runs[ci][k].kv, capture.next_position,
                                                     st.runs[ci][k].stores, st.slots[k].run.method),
                                   capture.last_logits});
        const int64_t only_q = st.req.mode == CompressionMode::QueryAware ? static_cast<int64_t>(ci) : -1;
        answer_pending(st.s, pending, st.plan.parts, st.req, only_q, job);
    }
    st.stale = false;
}

bool LiveCompare::answers_stale() const {
    return st_->stale;
}

bool LiveCompare::materialised() const {
    return st_->materialised;
}

const CompareRequest& LiveCompare::request() const {
    return st_->req;
}

CompareResult LiveCompare::result() const {
    std::vector<RunSlot> slots = st_->slots;
    if (st_->stale)
        for (RunSlot& slot : slots) slot.run.answer_ids.clear();
    CompareResult r = finish_result(st_->s, st_->req, st_->plan, std::move(slots));
    r.capture_bytes = 0;
    for (const auto& e : st_->explored) r.capture_bytes = std::max(r.capture_bytes, e->capture().bytes());
    return r;
}

int64_t LiveCompare::captures() const {
    return st_->captures;
}

int64_t LiveCompare::held_bytes() const {
    int64_t n = 0;
    for (const auto& e : st_->explored) n += e->capture().bytes();
    return n;
}

namespace {

double mean_over_layers(const std::vector<LayerDiagnostics>& layers, double LayerDiagnostics::*field) {
    double sum = 0;
    int n = 0;
    for (const LayerDiagnostics& d : layers) {
        if (d.*field < 0) return -1;  // a layer not measured: the mean would mislead
        sum += d.*field;
        ++n;
    }
    return n > 0 ? sum / n : -1;
}

}  // namespace

std::vector<RatePoint> LiveCompare::rate_distortion(const std::vector<double>& kappas, bool attention_output,
                                                    const JobControl& job) {
    State& st = *st_;
    CaptureExploration& explored = *st.explored.front();
    const std::vector<double> grid = request_budgets(kappas, st.req.settings);
    std::vector<RatePoint> out;
    const int64_t n_steps = static_cast<int64_t>(st.req.methods.size() * grid.size());
    int64_t step = 0;
    for (const std::string& method : st.req.methods) {
        for (double kappa : grid) {
            check_cancel(job);
            job.report("rate-distortion " + method, step++, n_steps);
            CodecSettings settings = st.req.settings;
            settings.budget = method_takes_budget(method) ? kappa : 1.0;
            ExploredRun r = explored.allocate(method, settings, /*skip_infeasible=*/true, job);
            if (attention_output) explored.materialise(r);
            RatePoint p;
            p.method = method;
            p.kappa = settings.budget;
            p.infeasible = r.infeasible;
            if (r.infeasible.empty()) {
                MethodRun run;
                run.layers = std::move(r.layers);
                add_footprint(run);
                p.footprint = run.footprint_fraction;
                p.kv_error = mean_over_layers(run.layers, &LayerDiagnostics::mean_rel_error);
                p.weighted_error = mean_over_layers(run.layers, &LayerDiagnostics::weighted_rel_error);
                p.attn_output_error = mean_over_layers(run.layers, &LayerDiagnostics::attn_output_error);
            }
            out.push_back(std::move(p));
            if (!method_takes_budget(method)) break;
        }
    }
    return out;
}

}  // namespace varrate
