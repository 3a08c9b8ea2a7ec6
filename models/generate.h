#pragma once
// Greedy decoding over a LlamaModel and a KVCache.
#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "models/llama_model.h"

namespace varrate {

struct GenerateOptions {
    int64_t max_new_tokens = 128;
    std::vector<int64_t> stop_ids;  // generation ends after producing one of these (it is included)
    std::function<void(int64_t token)> on_token;  // streaming callback
    const std::atomic<bool>* cancel = nullptr;
    ProgressFn progress;
    ForwardOptions prefill;  // chunking/observer for the prompt pass
    // generate_greedy_batch: rebuild the caches' compressed prefixes dense once (the paper's measurement, and
    // the fastest) rather than attend through the compressed store (the default: resident bytes stay small).
    bool reconstruct_prefixes = false;
    // decode_greedy: tokens decoded between two reads of the ids on the host (stop checks, on_token and
    // progress come then). 0: every token on the CPU (a read costs nothing there), 16 on a device.
    int64_t host_sync_every = 0;
};

struct GenerateResult {
    std::vector<int64_t> generated;  // not including the prompt
    bool stopped = false;            // ended on a stop id
    double prefill_ms = 0, decode_ms = 0;
};

// Feeds `prompt` (non-empty; appended after whatever the cache holds) and decodes greedily (argmax, ties ->
// lowest id). The cache is left holding prompt + generated tokens except the last generated one.
GenerateResult generate_greedy(const LlamaModel& model, KVCache& cache, const std::vector<int64_t>& prompt,
                               const GenerateOptions& opt);

// The decoding half of generate_greedy: continues from the logits of a forward pass that the caller ran
// (e.g. a compressing prefill, then a reply prefix) — the one greedy loop of the project. opt.prefill is
// unused.
GenerateResult decode_greedy(const LlamaModel& model, KVCache& cache, at::Tensor last_logits,
                             const GenerateOptions& opt);

// The greedy choice of each row of logits [rows, vocab] (or [vocab]): [rows] int64 on the logits' device,
// the argmax with ties to the lowest id and NaN never winning; -1 for a row of NaN. No host read.
at::Tensor greedy_ids(const at::Tensor& logits);

// Greedy answers of several caches to the same `prompt` (appended to each; when empty, decoding starts from
// last_logits [B, vocab]), decoded together. A `draft` (e.g. another cache's greedy answer) is checked in the
// prompt's forward pass: a row takes it for as long as its own greedy tokens agree, and only rows that
// disagree decode on from there, in lock-step (models/batch_cache.h). The answers are the caches' greedy
// answers whatever the draft (it only saves steps), up to the rounding differences of batched and multi-token
// passes. The caches are not modified.
std::vector<GenerateResult> generate_greedy_batch(
    const LlamaModel& model, const std::vector<const KVCache*>& caches, const std::vector<int64_t>& prompt,
    const at::Tensor& last_logits, const std::vector<int64_t>& draft, const GenerateOptions& opt);

}  // namespace varrate
