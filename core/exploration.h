#pragma once
// One prefill capture explored: each method's analysis is kept, so any number of (method, settings) allocate
// and materialise on the capture without another prefill. run_compare uses one per capture (then drops it);
// an interactive front end keeps it, so that a kappa, r_min or R change re-allocates in milliseconds and a
// structural change (stride, c, w, pool kernel) re-analyses only.
#include <memory>
#include <string>
#include <vector>

#include "codec/basis.h"
#include "codec/method.h"
#include "core/capture.h"
#include "core/probe.h"
#include "core/session.h"

namespace varrate {

// What one (method, settings) gave on a capture.
struct ExploredRun {
    std::string method;
    CodecSettings settings;
    // Per layer. The salience-weighted error is there once allocated; the attention-output error (-1 until
    // then) and the reconstruction time once materialised.
    std::vector<LayerDiagnostics> layers;
    std::vector<LayerKV> kv;  // the compressed layers (cache_from_layers decodes from them); empty until
                              // materialised
    // Per layer, the compressed store decoding reads (VarRate/flat; null for a dense layer); with kv when
    // materialised.
    std::vector<std::shared_ptr<const LayerPrefix>> stores;
    int64_t resident_bytes = 0;  // what the materialised cache holds (stores, or dense layers), measured
    std::string infeasible;      // why this capture cannot meet the budget; "" when it ran
    double analyse_ms = 0;       // of the (shared) analysis this run used
    double allocate_ms = 0, materialise_ms = 0;

    bool materialised() const { return infeasible.empty() && !kv.empty(); }

  private:
    friend class CaptureExploration;
    const MethodAnalysis* analysis = nullptr;  // owned by the exploration that allocated this run
    std::vector<LayerAllocation> allocations;  // what materialise() needs (diagnostics moved to `layers`)
};

class CaptureExploration {
  public:
    // Prefills `ids` keeping every layer (capture_prefill with `settings`' observation window and pool
    // kernel; attention_output: also what the attention-output error is measured against). `basis` serves
    // the methods that need one.
    // `probes`: the extra passes the methods to be run read (core/probe.h), run once after the prefill.
    CaptureExploration(const Session& session, const std::vector<int64_t>& ids, const CodecSettings& settings,
                       std::shared_ptr<const Basis> basis, bool attention_output, const JobControl& job = {},
                       const ProbeRequest& probes = {});
    // Another basis on an existing capture (no prefill): a basis fitted on the context again.
    CaptureExploration(const Session& session, std::shared_ptr<const PrefillCapture> capture,
                       std::shared_ptr<const Basis> basis);
    CaptureExploration(const CaptureExploration&) = delete;  // analyses refer to the capture
    CaptureExploration& operator=(const CaptureExploration&) = delete;

    const PrefillCapture& capture() const { return *capture_; }
    const std::shared_ptr<const PrefillCapture>& shared_capture() const { return capture_; }

    // Allocates and materialises `method` at `settings` (budget, r_min, R and structural settings). The
    // method's analysis is made once per structural setting and R and kept (flat and VarRate derive theirs
    // from each other's). A budget this capture cannot meet sets `infeasible` when skip_infeasible, else
    // throws InfeasibleBudget; an observation window longer than the capture's throws Error.
    ExploredRun run(const std::string& method, const CodecSettings& settings, bool skip_infeasible,
                    const JobControl& job = {});
    // run() in two steps: allocate() gives every layer's ranks or kept positions and their diagnostics
    // (milliseconds once the analysis exists: an interactive control calls it on every step), materialise()
    // the compressed layers and the attention-output error, when the cache is needed (answers).
    ExploredRun allocate(const std::string& method, const CodecSettings& settings, bool skip_infeasible,
                         const JobControl& job = {});
    void materialise(ExploredRun& run) const;  // no-op when infeasible or already materialised
    // Drops the analyses made for structural settings (or R) other than `settings`' to bound memory; runs
    // allocated on a dropped analysis must not be materialised afterwards.
    void retain_analyses(const CodecSettings& settings);
    // Whether `method` has an analysis for `settings`' structural settings and R.
    bool has_analysis(const std::string& method, const CodecSettings& settings) const;

  private:
    struct Analysed {
        std::string method;
        CodecSettings settings;
        std::unique_ptr<CompressionMethod> impl;
        std::unique_ptr<MethodAnalysis> analysis;  // null when infeasible
        std::string infeasible;
    };
    Analysed& analysed(const std::string& method, const CodecSettings& settings, const JobControl& job);
    static bool same_analysis(const CodecSettings& a, const CodecSettings& b);

    const Session& session_;
    std::shared_ptr<const Basis> basis_;
    std::shared_ptr<const PrefillCapture> capture_;  // shared by explorations with other bases
    std::vector<std::unique_ptr<Analysed>> analysed_;
};

}  // namespace varrate
