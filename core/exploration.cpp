#include "core/exploration.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/error.h"
#include "base/stopwatch.h"
#include "codec/registry.h"
#include "codec/settings_table.h"

namespace varrate {

namespace {

using Clock = SteadyClock;

}  // namespace

CaptureExploration::CaptureExploration(const Session& session, const std::vector<int64_t>& ids,
                                       const CodecSettings& settings, std::shared_ptr<const Basis> basis,
                                       bool attention_output, const JobControl& job,
                                       const ProbeRequest& probes)
    : session_(session), basis_(std::move(basis)) {
    auto capture = std::make_shared<PrefillCapture>(
        capture_prefill(session.model(), ids, settings, job, ForwardOptions().chunk_size, attention_output,
                        probes.question_in_prefix));
    if (probes.needs.any() || probes.question_in_prefix > 0) add_probes(session, *capture, probes, job);
    capture_ = std::move(capture);
    spdlog::debug("capture of {} tokens: prefill {:.1f} ms, {:.1f} MiB", ids.size(), capture_->prefill_ms,
                  static_cast<double>(capture_->bytes()) / (1024.0 * 1024.0));
}

CaptureExploration::CaptureExploration(const Session& session, std::shared_ptr<const PrefillCapture> capture,
                                       std::shared_ptr<const Basis> basis)
    : session_(session), basis_(std::move(basis)), capture_(std::move(capture)) {}

bool CaptureExploration::same_analysis(const CodecSettings& a, const CodecSettings& b) {
    return setting_difference(a, b, SettingTier::Analysis).empty();
}

void CaptureExploration::retain_analyses(const CodecSettings& settings) {
    // Analyses may derive from each other (shared tensors, not pointers), so any subset can go.
    analysed_.erase(std::remove_if(analysed_.begin(), analysed_.end(),
                                   [&](const auto& a) { return !same_analysis(a->settings, settings); }),
                    analysed_.end());
}

bool CaptureExploration::has_analysis(const std::string& method, const CodecSettings& settings) const {
    for (const auto& a : analysed_)
        if (a->method == method && same_analysis(a->settings, settings)) return true;
    return false;
}

CaptureExploration::Analysed& CaptureExploration::analysed(const std::string& method,
                                                           const CodecSettings& settings,
                                                           const JobControl& job) {
    for (const auto& a : analysed_)
        if (a->method == method && same_analysis(a->settings, settings)) return *a;
    auto a = std::make_unique<Analysed>();
    a->method = method;
    a->settings = settings;
    a->impl = make_method(method, settings, method_needs_basis(method) ? basis_ : nullptr);
    std::vector<const MethodAnalysis*> others;  // each method derives only from analyses it can use
    for (const auto& o : analysed_)
        if (o->analysis) others.push_back(o->analysis.get());
    try {
        a->analysis = std::make_unique<MethodAnalysis>(*a->impl, *capture_, job, others);
    } catch (const InfeasibleBudget& e) {
        a->infeasible = e.what();  // no budget can be met with these structural settings
    }
    analysed_.push_back(std::move(a));
    return *analysed_.back();
}

ExploredRun CaptureExploration::run(const std::string& method, const CodecSettings& settings,
                                    bool skip_infeasible, const JobControl& job) {
    ExploredRun out = allocate(method, settings, skip_infeasible, job);
    materialise(out);
    return out;
}

ExploredRun CaptureExploration::allocate(const std::string& method, const CodecSettings& settings,
                                         bool skip_infeasible, const JobControl& job) {
    ExploredRun out;
    out.method = method;
    out.settings = settings;
    Analysed& a = analysed(method, settings, job);
    try {
        if (!a.analysis) throw InfeasibleBudget(a.infeasible);
        out.analyse_ms = a.analysis->analyse_ms();
        const auto t0 = Clock::now();
        out.allocations = a.analysis->allocate(settings);
        for (size_t l = 0; l < out.allocations.size(); ++l) {
            LayerDiagnostics& d = out.layers.emplace_back(std::move(out.allocations[l].diagnostics));
            add_weighted_error(d, capture_->references[l]);
        }
        out.allocate_ms = ms_since(t0);
        out.analysis = a.analysis.get();
    } catch (const InfeasibleBudget& e) {
        if (!skip_infeasible) throw;
        out = ExploredRun{};
        out.method = method;
        out.settings = settings;
        out.infeasible = e.what();
    }
    return out;
}

void CaptureExploration::materialise(ExploredRun& r) const {
    if (!r.infeasible.empty() || !r.kv.empty() || !r.analysis) return;
    const auto t0 = Clock::now();
    r.kv = r.analysis->materialise(r.allocations, r.layers, &r.stores);
    // A self-calibrated basis belongs to this context alone: held with its cache when charged (accounted).
    r.resident_bytes = resident_bytes(r.kv, r.stores);
    for (const LayerDiagnostics& d : r.layers) r.resident_bytes += d.basis_bytes;
    r.materialise_ms = ms_since(t0);
    spdlog::debug("{} kappa {}: analyse {:.1f} ms (shared), allocate {:.1f} ms, materialise {:.1f} ms",
                  r.method, r.settings.budget, r.analyse_ms, r.allocate_ms, r.materialise_ms);
}

}  // namespace varrate
