#pragma once
// kvpress's ScorerPress: a method that scores every (KV head, token) of a layer and keeps, per KV head, the
// int(L * kappa) highest-scoring tokens (equal scores to the earlier position), in original order; the
// cache physically shrinks to [n_kv_head, kept, head_dim]. A scorer eviction is this class and its score
// function (and, when the press has one, its own kept count): the analysis, the selection, the
// diagnostics and the gather are shared.
#include "base/stopwatch.h"
#include "codec/method.h"

namespace varrate {

class ScorerEviction : public CompressionMethod {
  public:
    ScorerEviction(const CodecSettings& settings, std::string name)
        : settings_(settings), name_(std::move(name)) {}
    std::string name() const override { return name_; }
    const CodecSettings& settings() const override { return settings_; }
    std::shared_ptr<const LayerAnalysis> analyse(const LayerCapture& capture) override;
    LayerAllocation allocate(const LayerAnalysis& analysis, const CodecSettings& budget) override;
    LayerKV materialise(const LayerCapture& capture, const LayerAnalysis& analysis,
                        const LayerAllocation& allocation) override;
    // The press's scores of the layer (what it keeps by; also what varrate@<press> water-fills ranks by).
    at::Tensor token_scores(const LayerCapture& capture) const { return scores(capture); }  // [G, L]

  protected:
    // [n_kv_head, L] scores on the capture's device, any floating dtype: higher is kept first.
    virtual at::Tensor scores(const LayerCapture& capture) const = 0;
    // Tokens each KV head keeps at kappa: int(L * kappa); throws InfeasibleBudget (naming the smallest
    // feasible kappa) when that is 0. A press with a floor of its own overrides it.
    virtual int64_t kept_tokens(int64_t n_tokens, double kappa) const;
    // int(L * kappa), after checking that kappa is in (0, 1].
    int64_t kappa_tokens(int64_t n_tokens, double kappa) const;

    CodecSettings settings_;
    std::string name_;
};

// Positions by descending score, equal scores to the earlier position (a stable sort, on every device):
// scores [G, L] any floating dtype -> [G, L] int64.
at::Tensor descending_order(const at::Tensor& scores);
// The allocation that keeps, per KV head, the first `kept` positions of `order` [G, L] (ascending in the
// result), with the eviction's diagnostics (kv_sq: eviction_kv_sq) and the analysis's timing plus the
// allocation's since `started`.
LayerAllocation keep_first_in_order(const LayerAnalysis& analysis, const std::string& method,
                                    const at::Tensor& order, int64_t kept, const at::Tensor& kv_sq,
                                    int64_t head_dim, int64_t element_size, SteadyClock::time_point started);

// The smallest kappa (to 1e-4) at which int(L * kappa) exceeds `floor` tokens.
double smallest_kappa_keeping_more_than(int64_t floor, int64_t n_tokens);

}  // namespace varrate
