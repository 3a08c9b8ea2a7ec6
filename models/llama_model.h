#pragma once
// Llama-family decoder (Llama 2/3/3.x, Mistral, Qwen2/2.5, Qwen3, SmolLM2) in LibTorch, readable in one
// sitting: embeddings, RMSNorm, RoPE (HF rotate_half layout), grouped-query attention, SwiGLU MLP, tied or
// separate lm_head, Qwen2 q/k/v biases, Qwen3 per-head q/k RMSNorm. One code path for CPU and CUDA.
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "base/job.h"
#include "models/device.h"
#include "models/kv_cache.h"
#include "models/model_config.h"
#include "models/op_profile.h"
#include "models/rope.h"

namespace varrate {

class BatchKVCache;

class SafetensorsArchive;

// What the end-of-prefill observer sees for one layer, as soon as the context prefill has completed that
// layer's cache (during the last chunk's pass through the layer, as kvpress hooks do).
struct LayerCapture {
    int64_t layer = 0;
    int64_t n_layers = 0;       // layers of the model (PyramidKV's depth schedule)
    at::Tensor keys_pre_rope;   // [n_kv_head, L, head_dim], the keys before RoPE (Qwen3: after k_norm)
    at::Tensor keys;            // [n_kv_head, L, head_dim], post-RoPE (what the cache holds)
    at::Tensor values;          // [n_kv_head, L, head_dim]
    at::Tensor window_queries;  // [n_head, w_obs, head_dim], post-RoPE queries of the last w_obs tokens
    // The layer's output projection weight [hidden, n_head * head_dim] (the model's own tensor, not a copy):
    // what each head's values become in the residual stream (CriticalKV weighs tokens by it).
    at::Tensor o_proj;
    at::Tensor rope_cos;  // [L, head_dim], the tables that rotated positions 0..L-1
    at::Tensor rope_sin;  // [L, head_dim]
    at::Tensor
        rope_inv_freq;  // [head_dim / 2] fp32, the frequencies behind the tables (rope scaling applied)
    // Statistics of the pre-RoPE queries (Qwen3: after q_norm) of positions >= kQueryStatsSkip, all heads:
    // what Expected Attention models future queries with.
    at::Tensor query_mean;  // [n_head, head_dim] fp32
    at::Tensor query_cov;   // [n_head, head_dim, head_dim] fp32, centred, divided by the count
    // The mean pre-RoPE query of every position of the prefill, the first ones included (DuoAttention's
    // head scores, as kvpress's mean over a text): [n_head, head_dim] fp32.
    at::Tensor query_mean_all;
    // Filled by extra passes over the captured prefix (core/probe.h) for the signals that read them;
    // undefined otherwise.
    at::Tensor question_attention;  // [n_head, L] fp32: mean attention weight of the question's queries
    at::Tensor repeat_scores;       // [n_kv_head, L] fp32: KVzip's context-reconstruction scores
    at::Tensor observed_attention;  // [n_head, L] fp32: each position's attention weight summed over every
                                    // prefill query that sees it, over how many do (H2O's observed attention)
    // [n_head, L] fp32: Compactor's non-causal attention. Positions [kNonCausalBegin, L - kNonCausalEnd) in
    // chunks of kNonCausalChunk from the first; each key's softmax weight (unscaled logits, zero-padded last
    // chunk) summed over every query of its chunk, before and after it. 0 outside the span.
    at::Tensor noncausal_attention;
    // How many of the last ids are the question, when the compressed prefix ends with it (query-aware mode)
    // and the caller says so (core/probe.h); 0 otherwise. Finch's window is the question.
    int64_t question_tokens = 0;
    // The ids of positions 0..L-1 ([L] int64 on the compute device), when the observed prefill began on an
    // empty cache (the runtime does not know the ids of entries from an earlier call); undefined otherwise.
    at::Tensor token_ids;
};

// The first positions' queries are left out of the query statistics (attention-sink outliers; kvpress's
// Expected Attention n_sink).
constexpr int64_t kQueryStatsSkip = 4;
// The span and chunks of LayerCapture::noncausal_attention: kvpress's CompactorPress defaults (sinks 8 and 4,
// which it always keeps, chunks of 256).
constexpr int64_t kNonCausalBegin = 8;
constexpr int64_t kNonCausalEnd = 4;
constexpr int64_t kNonCausalChunk = 256;

// Returns a replacement for the layer's cache (shorter for eviction, same length for reconstruction), or
// nullopt to keep it. Called once per layer, in layer order, on the thread running the forward pass.
using LayerObserver = std::function<std::optional<LayerKV>(const LayerCapture&)>;

struct ForwardOptions {
    int64_t chunk_size = 512;                   // prefill chunk length (bounded attention memory)
    bool all_logits = false;                    // logits for every input position, else only the last
    LayerObserver observer;                     // end-of-prefill hook (optional)
    int64_t observer_window = 64;               // w_obs: queries handed to the observer
    const std::atomic<bool>* cancel = nullptr;  // checked between layers and chunks; throws Cancelled
    ProgressFn progress;
    OpProfile* profile = nullptr;  // per-op times added here when set (waits for the device per op)
};

class LlamaModel {
  public:
    // Loads config.json (+ generation_config.json) and the safetensors weights of `model_dir`, validates
    // names and shapes, and converts the weights once to options.dtype on options.device.
    static std::unique_ptr<LlamaModel> load(const std::filesystem::path& model_dir,
                                            const RuntimeOptions& options, const ProgressFn& progress = {});
    // Same, from an already parsed config and opened archive (tests, make-model).
    static std::unique_ptr<LlamaModel> from_archive(const ModelConfig& config,
                                                    const SafetensorsArchive& archive,
                                                    const RuntimeOptions& options);

    const ModelConfig& config() const { return config_; }
    const RuntimeOptions& options() const { return options_; }

    KVCache new_cache() const;

    // Runs `ids` at positions cache.next_position()... and appends their K/V to `cache`. Returns fp32 logits
    // on the CPU: [n, vocab] with all_logits, else [1, vocab] for the last position. Long inputs are
    // processed in chunks of opt.chunk_size; with an observer, the last chunk is at least observer_window
    // long.
    at::Tensor forward(const std::vector<int64_t>& ids, KVCache& cache, const ForwardOptions& opt = {}) const;
    // forward() without the host: `ids` [n] int64 on the model's device, logits fp32 on the device. The ids
    // are not range-checked (reading them would sync): the decode loop feeds the ids its argmax took from
    // this model's logits. Nothing is read back to the host (models/host_read.h counts what is).
    at::Tensor forward_on_device(const at::Tensor& ids, KVCache& cache, const ForwardOptions& opt = {}) const;

    // Runs one more step of every row of a batch cache: ids[b] (all rows the same length m) at row b's next
    // positions, appending their K/V. Returns fp32 CPU logits [B, n_logits, vocab] of each row's last
    // n_logits tokens. Each row attends to its own entries only, so its logits are those forward() gives over
    // its cache, up to rounding.
    at::Tensor forward_batch(const std::vector<std::vector<int64_t>>& ids, BatchKVCache& cache,
                             int64_t n_logits = 1, const std::atomic<bool>* cancel = nullptr) const;

    // Calls of forward() (prefills, and generate_greedy's steps) and of forward_batch() so far: a front end
    // checks with them that a setting change ran no prefill.
    int64_t forward_calls() const { return forward_calls_.load(); }
    int64_t forward_batch_calls() const { return forward_batch_calls_.load(); }

    // RoPE cos/sin for positions [begin, end): each [end-begin, head_dim], runtime dtype and device.
    std::pair<at::Tensor, at::Tensor> rope_tables(int64_t begin, int64_t end) const;

    ~LlamaModel();

  private:
    LlamaModel() = default;
    struct Weights;
    ModelConfig config_;
    RuntimeOptions options_;
    std::unique_ptr<Weights> w_;
    at::Tensor inv_freq_;  // [head_dim/2] fp32, with rope scaling applied
    mutable std::atomic<int64_t> forward_calls_{0}, forward_batch_calls_{0};
};

}  // namespace varrate
