#pragma once
// One prefill serves every method, budget and codec setting. The prefill does not depend on the method (every
// layer's output is computed with full attention; compression only replaces what the cache keeps), so:
//   capture      one prefill of the ids keeps, per layer, what the methods read (pre- and post-RoPE keys,
//                values, the last w_obs queries of all heads, RoPE tables), plus the last logits;
//   analyse      each method's budget-independent work, once per capture (MethodAnalysis);
//   allocate     a budget's ranks or kept positions and diagnostics, in milliseconds;
//   materialise  the compressed cache to decode from, with its distortion measures.
// The same steps run inside a prefill for a single method (compress_in_prefill), which the equivalence
// tests hold against the capture.
#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "base/job.h"
#include "codec/method.h"
#include "models/kv_cache.h"
#include "models/llama_model.h"

namespace varrate {

// What a layer's compressed cache is measured against (add_distortion): computed once per layer and capture.
struct DistortionReference {
    at::Tensor weights;        // [L] fp64 CPU: VarRate's salience (where the observation window looks)
    at::Tensor window_output;  // [H, w, hd] fp32: the window queries' attention output over the full cache
    int64_t obs_window = 0;    // w
};
// `salience`: VarRate's salience of this capture when already computed (else computed here). Without
// `attention_output`, no window output: add_distortion then measures the weighted K/V error only.
DistortionReference distortion_reference(const LayerCapture& capture, int64_t obs_window, int64_t pool_kernel,
                                         const at::Tensor& salience = {}, bool attention_output = true);

struct PrefillCapture {
    std::vector<int64_t> ids;
    std::vector<LayerCapture> layers;
    at::Tensor last_logits;                       // [1, vocab] fp32 CPU: the prediction after the last id
    std::vector<DistortionReference> references;  // per layer
    int64_t next_position = 0;                    // where decoding continues
    int64_t obs_window = 0;                       // window queries kept: methods may use this many or fewer
    int64_t pool_kernel = 0;                      // of the distortion weights
    double prefill_ms = 0;
    // The extra passes some signals read (core/probe.h), when run; observed_ms: the all-queries pass.
    double question_ms = 0, repeat_ms = 0, observed_ms = 0;
    int64_t bytes() const;  // tensors held
};

// Bytes a capture of n_tokens holds (keys twice, values, window queries, RoPE tables), for the refusal.
int64_t capture_bytes_needed(const ModelConfig& config, int64_t n_tokens, int64_t obs_window,
                             at::ScalarType dtype);

// Peak bytes of the prefill's transient activations for one chunk of `chunk` queries over n_tokens keys
// (attention scores and probabilities in fp32, the projections and the MLP's hidden rows).
int64_t prefill_activation_bytes(const ModelConfig& config, int64_t n_tokens, int64_t chunk,
                                 at::ScalarType dtype);
// What a capturing prefill needs beyond the weights already resident: the capture plus one chunk's
// activations.
int64_t prefill_bytes_needed(const ModelConfig& config, int64_t n_tokens, int64_t obs_window,
                             at::ScalarType dtype, int64_t chunk);

// Throws an Error naming the bytes a capturing prefill of n_tokens needs (capture and activations per chunk)
// and those available (`available` < 0: unknown, never refused).
void check_capture_fits(const ModelConfig& config, const RuntimeOptions& runtime, int64_t n_tokens,
                        int64_t obs_window, int64_t available,
                        int64_t chunk_size = ForwardOptions().chunk_size);

// Prefills `ids` from an empty cache, keeping settings.obs_window window queries and weighting distortion by
// VarRate's salience with settings.pool_kernel (attention_output: also the window queries' attention output,
// which the attention-output error is measured against). Refuses with an Error naming the bytes needed and
// available when the capture cannot fit on the model's device. Progress and cancel are the prefill's.
// min_window_queries: keep at least that many of the last queries (Finch reads the question's, which may be
// longer than the observation window); the references still read the last obs_window of them.
PrefillCapture capture_prefill(const LlamaModel& model, const std::vector<int64_t>& ids,
                               const CodecSettings& settings, const JobControl& job = {},
                               int64_t chunk_size = ForwardOptions().chunk_size, bool attention_output = true,
                               int64_t min_window_queries = 0);

// The same capture measured with another observation window (at most the queries it kept) and pool kernel:
// its distortion references computed again from the kept layers, no prefill; tensors shared.
PrefillCapture with_references(const PrefillCapture& capture, int64_t obs_window, int64_t pool_kernel,
                               bool attention_output);
// How many window queries a capture kept (what an observation window may use without a new prefill).
int64_t kept_window_queries(const PrefillCapture& capture);

// A cache holding `layers` (one per model layer) that decodes from `next_position` (or where `method`, when
// given, continues: method_decode_position, e.g. after the kept entries of a method that renumbers them).
// With `stores` (one per layer, null for a dense one), a layer with a store begins with it (what decoding
// reads by default) rather than with its dense entries.
KVCache cache_from_layers(const LlamaModel& model, const std::vector<LayerKV>& layers, int64_t next_position,
                          const std::vector<std::shared_ptr<const LayerPrefix>>& stores = {},
                          const std::string& method = {});
// Bytes a compressed cache holds, measured from its tensors: each layer's store when it has one, else its
// dense keys and values (shared data such as a basis apart).
int64_t resident_bytes(const std::vector<LayerKV>& layers,
                       const std::vector<std::shared_ptr<const LayerPrefix>>& stores);

// The distortion measures of a layer's compressed cache, written into `d`: the salience-weighted K/V error
// and the attention-output error of the observation-window queries, ||o - o^|| / ||o|| averaged over heads
// and queries. `kept` [G, n] holds the positions of an evicting method's entries (undefined: the compressed
// cache has every position); `kept_valid` [G, n] bool, with a head-wise eviction's padded rows
// (LayerAllocation::kept_valid), marks the real ones: the padding is left out of attention, so each head
// attends to exactly the entries it kept. A cache that is the capture's own (full) is exact: 0 without
// computing.
void add_distortion(LayerDiagnostics& d, const LayerCapture& capture, const LayerKV& compressed,
                    const at::Tensor& kept, const DistortionReference& reference,
                    const at::Tensor& kept_valid = {});
// The salience-weighted K/V error alone: it needs only the allocation's per-token errors, so an allocation
// that is not materialised (yet) has it.
void add_weighted_error(LayerDiagnostics& d, const DistortionReference& reference);

// One method's analysis of every layer of a capture; allocate() and materialise() for any number of budgets.
class MethodAnalysis {
  public:
    // Analyses every layer (the budget-independent stages); throws what analyse() throws. A layer whose
    // analysis the method can derive from one in `others` (same capture: VarRate and flat share all but the
    // salience) is derived instead.
    MethodAnalysis(CompressionMethod& method, const PrefillCapture& capture, const JobControl& job = {},
                   const std::vector<const MethodAnalysis*>& others = {});
    // Every layer's allocation for `budget`; throws InfeasibleBudget when this capture cannot meet it.
    std::vector<LayerAllocation> allocate(const CodecSettings& budget) const;
    // The compressed layers of an allocation; fills each allocation's distortion measures and
    // reconstruction time.
    std::vector<LayerKV> materialise(std::vector<LayerAllocation>& allocations) const;
    // The same with the diagnostics apart from their allocations (one per layer), which get the distortion
    // measures and reconstruction time.
    // With `stores`, each layer's compressed store too (CompressionMethod::store; null for a dense layer).
    std::vector<LayerKV> materialise(const std::vector<LayerAllocation>& allocations,
                                     std::vector<LayerDiagnostics>& diagnostics,
                                     std::vector<std::shared_ptr<const LayerPrefix>>* stores = nullptr) const;
    // The stores decoding needs where the materialised layers do not stand for the compressed cache: a
    // head-wise eviction's (its KV heads keep different numbers of tokens, LayerAllocation::kept_valid; its
    // dense layers are padded), null for every other layer; empty when no layer needs one. Paths that decode
    // from the materialised layers (perplexity, rate-distortion answers) pass them to cache_from_layers.
    std::vector<std::shared_ptr<const LayerPrefix>> headwise_stores(
        const std::vector<LayerAllocation>& allocations) const;
    double analyse_ms() const { return analyse_ms_; }

  private:
    CompressionMethod& method_;
    const PrefillCapture& capture_;
    std::vector<std::shared_ptr<const LayerAnalysis>> layers_;
    double analyse_ms_ = 0;
};

// What the separate path does at each layer's end of prefill: analyse, allocate and materialise at the
// method's own settings, then the distortion measures. `kv` replaces the layer's cache. A head-wise eviction
// (its KV heads keep different numbers of tokens) has no dense cache to replace it with: refused with an
// Error naming the shared-capture path instead.
struct InPrefillLayer {
    LayerKV kv;
    LayerDiagnostics diagnostics;
};
InPrefillLayer compress_layer_in_prefill(CompressionMethod& method, const LayerCapture& capture,
                                         bool attention_output = true);

// The separate path: one prefill of `ids` into `cache` with the method as its end-of-prefill observer
// (compress_layer_in_prefill, layer by layer). Returns the last logits; `layers` gets the diagnostics,
// distortion included.
struct InPrefillResult {
    at::Tensor logits;
    std::vector<LayerDiagnostics> layers;
    double prefill_ms = 0, compress_ms = 0;
};
InPrefillResult compress_in_prefill(const LlamaModel& model, CompressionMethod& method,
                                    const std::vector<int64_t>& ids, KVCache& cache,
                                    const JobControl& job = {}, bool attention_output = true);

}  // namespace varrate
