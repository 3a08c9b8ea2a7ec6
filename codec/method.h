#pragma once
// One interface for every KV-cache compression method: a method receives one layer's end-of-prefill
// capture (pre-/post-RoPE keys, values, observation-window queries, RoPE tables), analyses it once,
// allocates any number of budgets on the analysis and materialises the layer's new cache for one of them.
// Methods are created by name through codec/registry.h.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "models/kv_cache.h"
#include "models/llama_model.h"

namespace varrate {

// Settings shared by every method; each method reads the ones it needs. Defaults are the paper's.
struct CodecSettings {
    double budget = 0.20;     // kappa: fraction of the full cache kept, in (0, 1]
    int64_t r_min = 16;       // rank floor of every coded token
    int64_t rank = 1024;      // R: basis rank and per-token rank cap (clamped to D)
    int64_t stride = 16;      // Delta: anchors at positions 0, Delta, 2*Delta, ... are stored exactly
    int64_t anchors = 4;      // c: a coded token is predicted by the mean of its c nearest anchors
    int64_t window = 64;      // w: the last w tokens are stored exactly
    int64_t obs_window = 64;  // w_obs: queries of the last w_obs tokens score salience (SnapKV window)
    int64_t pool_kernel = 5;  // SnapKV smoothing (average pool, padding kernel/2)
    // Bits per stored coefficient (VarRate/flat): 16 keeps them at cache precision (the unquantized codec);
    // 2, 3, 4 or 8 quantizes them in groups of 32 along each token's rank (codec/quantize.h), and the budget,
    // counted in bits, then holds more of them.
    int64_t coef_bits = 16;
    // ThinK (think, snap-think): the fraction of each KV head's key channels pruned (int(head_dim * ratio)).
    double key_channel_ratio = 0.5;
    // Per-layer budget profile (snapkv-per-layer, kvpress's PerLayerCompressionPress): layer l keeps kappa x
    // p_l / mean(p) of its tokens, so that the layers keep kappa on average; empty: kappa in every layer.
    std::vector<double> layer_profile;
    // DuoAttention (duo-attention): the first and last tokens a streaming head keeps (kvpress's on-the-fly
    // pattern: 128 and 256).
    int64_t streaming_sink = 128;
    int64_t streaming_recent = 256;
    // Selective attention through a VarRate/flat store (codec/compressed_layer.h): a decoding step rebuilds
    // the keys of only the coded tokens in the select_tokens / landmark_chunk chunks whose landmarks (the
    // post-RoPE mean key of landmark_chunk coded tokens, per KV head, stored and charged to the budget)
    // score highest. 0: no landmarks; every coded key is rebuilt every step (the exact path, the reference).
    int64_t select_tokens = 0;
    int64_t landmark_chunk = 16;
    bool paper_accounting =
        false;  // true: anchor indices are not charged to B (the paper; footprint > kappa)
    // Wait for the device at stage boundaries so stage times are real: a host read per stage on a GPU, so off
    // unless profiling (varrate bench and the app's "Precise stage timing" turn it on).
    bool precise_timing = false;
};

// Milliseconds spent in each stage of one layer's compression, by the step that runs it.
struct StageTiming {
    double anchor_search = 0;   // analyse(): joint vectors, nearest anchors, residuals and their norms
    double salience = 0;        // analyse(): window-attention salience (SnapKV: its scores and order)
    double water_filling = 0;   // allocate(): ranks or kept positions, diagnostics
    double projection = 0;      // allocate(): coefficients of each coded token up to its rank, its error
    double reconstruction = 0;  // materialise(): the layer's new cache
    double total() const { return anchor_search + salience + water_filling + projection + reconstruction; }
};

// What one layer's compression did. Counts are in cache scalars; per-token tensors are CPU tensors of
// length L (undefined when the method does not produce them, e.g. salience for "full" and "flat").
struct LayerDiagnostics {
    std::string method;
    int64_t layer = 0;
    int64_t n_tokens = 0;  // L
    int64_t dim = 0;       // D = 2 * n_kv_head * head_dim
    int64_t budget_B = 0;  // scalars available to coded tokens (SnapKV: kept tokens * D)
    int64_t sum_ranks = 0;
    int64_t n_exact = 0;  // stored exactly (anchors + window; SnapKV: kept tokens per KV head)
    int64_t n_coded = 0;
    int64_t min_rank = 0, max_rank = 0;  // over coded tokens (over all tokens without coded ones)
    double mean_rank = 0;
    double floor_share = 0;   // share of coded tokens at r_min
    int64_t index_bits = 0;   // bits of one anchor ordinal (packed; 0 = none)
    int64_t set_bits = 0;     // bits of one coded token's anchor set as one number (0: c ordinals stored)
    int64_t rank_bits = 0;    // bits of one coded token's rank (0: not stored, e.g. flat's uniform ranks)
    int64_t basis_bytes = 0;  // R x D of a self-calibrated basis at cache precision, in stored_bytes
                              // (0 with a calibrated basis file or paper accounting)
    int64_t stored_bytes = 0;
    int64_t full_bytes = 0;     // L * D * element size of the cache dtype
    double footprint = 0;       // stored_bytes / full_bytes: accounted, the runtime cache still holds L x D
    double mean_rel_error = 0;  // mean over all L tokens of ||z - z^|| / ||z|| (exact 0, evicted 1)
    // Of which what quantization lost (coefficients at b < 16 bits: ||c - c^|| over the kept ones; KIVI: its
    // keys' and values'), mean over L of that over ||z||; 0 unquantized. The rest is truncation.
    double mean_quant_error = 0;
    int64_t coef_bits = 0;  // bits per stored coefficient or quantized scalar (0: not applicable)
    // PyramidKV: its depth schedule was invalid at this L and kappa, so every layer kept SnapKV's uniform
    // count (kvpress's fallback): the run is SnapKV's, and says so.
    bool schedule_fallback = false;
    // Distortion that says what matters (core/capture.h's add_distortion; -1 when not measured):
    double weighted_rel_error =
        -1;  // ||z - z^|| / ||z|| weighted by VarRate's salience (where attention looks)
    double attn_output_error = -1;  // ||o - o^|| / ||o|| of the observation-window queries, mean over heads
    StageTiming timing;

    at::Tensor salience;       // [L] fp32, raw window-attention salience
    at::Tensor salience_norm;  // [L] fp32, min-max normalised over the coded set, 0 elsewhere
    at::Tensor rank;           // [L] int64, D for exact tokens, 0 for evicted ones
    at::Tensor exact;          // [L] bool, stored exactly (SnapKV: kept by every KV head)
    at::Tensor rel_error;      // [L] fp32, ||z - z^|| / ||z|| in the pre-RoPE joint space
    at::Tensor kept;           // [n_kv_head, L] bool, eviction methods only (per KV head)
};

struct LayerResult {
    LayerKV kv;  // keys post-RoPE [n_kv_head, n_tok, head_dim], input dtype and device
    LayerDiagnostics diagnostics;
};

// What analyse() computed for one layer: everything that does not depend on the budget (kappa, r_min, R),
// so that one analysis serves every budget. Each method derives its own.
struct LayerAnalysis {
    virtual ~LayerAnalysis() = default;
    int64_t layer = 0;
    int64_t n_tokens = 0;  // L
    StageTiming timing;    // the budget-independent stages
};

// A run of coded tokens (consecutive in LayerAllocation::rank_order) that VarRate/flat project on, and
// reconstruct from, the leading `width` basis rows with one GEMM each: every token of the run has a rank
// <= width.
struct RankGroup {
    int64_t tokens = 0;
    int64_t width = 0;
    at::Tensor coefficients;  // [tokens, width] fp32 as stored (cache precision or dequantized), zero past
                              // each token's rank
    // Quantized coefficients (coef_bits < 16): codes [tokens, ceil(width / 32) * 32] uint8 and the scale and
    // minimum [tokens, ceil(width / 32)] fp16 of each group of 32.
    at::Tensor codes, group_scale, group_min;
};

// One budget's choice on an analysed layer: diagnostics (counts, accounted footprint, per-token rank and
// error) plus what materialise() needs.
struct LayerAllocation {
    LayerDiagnostics diagnostics;
    at::Tensor coded_ranks;  // [n_coded] int64 on the compute device (VarRate/flat)
    at::Tensor
        rank_order;  // [n_coded] int64 on the device: coded ordinals by decreasing width (VarRate/flat)
    std::vector<RankGroup> rank_groups;  // consecutive runs of rank_order, widths decreasing (VarRate/flat)
    at::Tensor kept;  // [n_kv_head, kept] int64 ascending positions on the compute device (eviction methods)
    // Head-wise eviction (codec/headwise_eviction.h; the heads keep different numbers): [n_kv_head, kept]
    // bool, false where `kept`'s row is padding (each row is padded to the longest). Undefined otherwise.
    at::Tensor kept_valid;
    // Channel pruning (ThinK): [n_kv_head, n_kept] int64 ascending, the key channels every token keeps.
    at::Tensor kept_channels;
    int64_t coef_bits = 16;  // what the coefficients were stored with (CodecSettings::coef_bits)
    // VarRate/flat selective attention (CodecSettings::select_tokens): landmark chunk charged, 0 for none.
    int64_t select_tokens = 0, landmark_chunk = 0;
};

// Every method in three steps, so that one prefill capture serves every method and budget:
//   analyse     budget-independent, once per capture and structural setting (stride, c, window, w_obs, pool);
//   allocate    a budget's ranks or kept positions and its diagnostics: milliseconds, no reconstruction;
//   materialise the layer's cache for decoding.
// compress() runs the three with the settings the method was made with.
class CompressionMethod {
  public:
    virtual ~CompressionMethod() = default;
    virtual std::string name() const = 0;
    // The settings the method was made with (R possibly clamped to D).
    virtual const CodecSettings& settings() const = 0;
    // Throws Error for malformed captures or settings that no budget can meet.
    virtual std::shared_ptr<const LayerAnalysis> analyse(const LayerCapture& capture) = 0;
    // Reads budget, r_min, rank and paper_accounting of `budget`; its structural settings must be the
    // method's. Throws InfeasibleBudget when this L cannot meet the budget.
    virtual LayerAllocation allocate(const LayerAnalysis& analysis, const CodecSettings& budget) = 0;
    virtual LayerKV materialise(const LayerCapture& capture, const LayerAnalysis& analysis,
                                const LayerAllocation& allocation) = 0;
    // The budget of each layer when the method shares kappa out unevenly from all the layers' analyses
    // (KVzip: one selection across layers), each passed to that layer's allocate() as its budget; empty (the
    // default): every layer gets `budget`'s kappa. The layers' total must stay within the method's
    // accounting.
    virtual std::vector<double> layer_budgets(const std::vector<std::shared_ptr<const LayerAnalysis>>& layers,
                                              const CodecSettings& budget) {
        (void)layers;
        (void)budget;
        return {};
    }
    // The layer held compressed at the size its budget accounts for (a KV-cache prefix that decoding attends
    // through), or null when the method keeps a dense layer (materialise(): eviction shrinks it already).
    virtual std::shared_ptr<const LayerPrefix> store(const LayerCapture& capture,
                                                     const LayerAnalysis& analysis,
                                                     const LayerAllocation& allocation) {
        (void)capture;
        (void)analysis;
        (void)allocation;
        return nullptr;
    }
    // This method's analysis of `capture` built from another method's analysis of it when most of the work is
    // the same (VarRate and flat share anchors, residuals and coefficients); null when it cannot be.
    virtual std::shared_ptr<const LayerAnalysis> derive(const LayerCapture& capture,
                                                        const LayerAnalysis& other) {
        (void)capture;
        (void)other;
        return nullptr;
    }

    // True when this method's allocation signal is the observation window's pooled attention (SnapKV's
    // salience with the method's obs_window and pool_kernel), the same tensor a capture computes as its
    // distortion weight: the capture then passes it in (analyse_with_window_salience) instead of the method
    // computing it again, and uses the method's own as the weight.
    virtual bool uses_window_salience() const { return false; }
    // analyse() given that window salience [L]; only called when uses_window_salience().
    virtual std::shared_ptr<const LayerAnalysis> analyse_with_window_salience(const LayerCapture& capture,
                                                                              const at::Tensor& salience) {
        (void)salience;
        return analyse(capture);
    }

    LayerResult compress(const LayerCapture& capture);
};

// The structural settings (those analyse() depends on) of a and b differ: names the first that does.
std::string structural_difference(const CodecSettings& a, const CodecSettings& b);

// "[2, 64, 16]" for a tensor's shape, "undefined" for none: for error messages.
std::string shape_str(const at::Tensor& t);
// Bytes per element of a cache dtype (fp32 4, bf16/fp16 2).
int64_t element_size(at::ScalarType t);
// Checks the capture's shapes; returns {n_kv_head, L, head_dim}. `who` names the method in errors.
struct CaptureShape {
    int64_t n_kv_head, n_tokens, head_dim;
};
CaptureShape check_capture(const LayerCapture& c, const std::string& who, bool needs_pre_rope);
// Waits for queued device work when timing needs it (CUDA); no-op on the CPU.
void sync_for_timing(const at::Tensor& t, bool enabled);

}  // namespace varrate
