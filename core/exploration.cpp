#include "core/exploration.h"

#include <chrono>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "codec/registry.h"
#include "core/base/error.h"
#include "core/base/stopwatch.h"

namespace varrate {

namespace {

using Clock = SteadyClock;

}  // namespace

CaptureExploration::CaptureExploration(const Session& session, const std::vector<int64_t>& ids,
                                       const CodecSettings& settings, std::shared_ptr<const Basis> basis,
                                       bool attention_output, const JobControl& job)
    : session_(session),
      basis_(std::move(basis)),
      capture_(capture_prefill(session.model(), ids, settings, job, ForwardOptions().chunk_size,
                               attention_output)) {
    spdlog::debug("capture of {} tokens: prefill {:.1f} ms, {:.1f} MiB", ids.size(), capture_.prefill_ms,
                  static_cast<double>(capture_.bytes()) / (1024.0 * 1024.0));
}

CaptureExploration::Analysed& CaptureExploration::analysed(const std::string& method,
                                                           const CodecSettings& settings,
                                                           const JobControl& job) {
    for (const auto& a : analysed_)
        if (a->method == method && structural_difference(a->settings, settings).empty() &&
            a->settings.rank == settings.rank && a->settings.paper_accounting == settings.paper_accounting)
            return *a;
    auto a = std::make_unique<Analysed>();
    a->method = method;
    a->settings = settings;
    a->impl = make_method(method, settings, method_needs_basis(method) ? basis_ : nullptr);
    std::vector<const MethodAnalysis*> others;  // each method derives only from analyses it can use
    for (const auto& o : analysed_)
        if (o->analysis) others.push_back(o->analysis.get());
    try {
        a->analysis = std::make_unique<MethodAnalysis>(*a->impl, capture_, job, others);
    } catch (const InfeasibleBudget& e) {
        a->infeasible = e.what();  // no budget can be met with these structural settings
    }
    analysed_.push_back(std::move(a));
    return *analysed_.back();
}

ExploredRun CaptureExploration::run(const std::string& method, const CodecSettings& settings,
                                    bool skip_infeasible, const JobControl& job) {
    ExploredRun out;
    out.method = method;
    out.settings = settings;
    Analysed& a = analysed(method, settings, job);
    try {
        if (!a.analysis) throw InfeasibleBudget(a.infeasible);
        out.analyse_ms = a.analysis->analyse_ms();
        const auto t0 = Clock::now();
        std::vector<LayerAllocation> alloc = a.analysis->allocate(settings);
        out.allocate_ms = ms_since(t0);
        const auto t1 = Clock::now();
        out.kv = a.analysis->materialise(alloc);
        out.materialise_ms = ms_since(t1);
        for (LayerAllocation& l : alloc) out.layers.push_back(std::move(l.diagnostics));
        spdlog::debug("{} kappa {}: analyse {:.1f} ms (shared), allocate {:.1f} ms, materialise {:.1f} ms",
                      method, settings.budget, out.analyse_ms, out.allocate_ms, out.materialise_ms);
    } catch (const InfeasibleBudget& e) {
        if (!skip_infeasible) throw;
        out = ExploredRun{};
        out.method = method;
        out.settings = settings;
        out.infeasible = e.what();
    }
    return out;
}

}  // namespace varrate
