#pragma once
// Causal grouped-query attention of a block of new queries against the KV cache, without repeating K/V:
// the query heads that share a kv head are stacked as rows, so one matmul per kv head serves them all.
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace varrate {

// q: [n_kv_head, group*n_new, head_dim], rows ordered (g, i) = query head kv*group+g, new token i.
// k, v: [n_kv_head, T, head_dim]: the cache, whose last n_new entries are the new tokens (new token i sees
// cache entries 0..T-n_new+i). Returns [n_kv_head, group*n_new, head_dim] in q's dtype.
// sliding_window > 0 limits each query to its last sliding_window cache entries (Mistral), counted in cache
// entries, which are positions as long as nothing was evicted.
// Long contexts never allocate a T x T score tensor for all heads: the blocked CPU kernel holds one tile per
// task, the batched path keeps the fp32 scores of a block of query rows under score_budget_bytes. On CPUs
// with LibTorch 1.x, 64 new tokens or more run the blocked kernel, fewer (decode steps) the batched path.
constexpr int64_t kDefaultScoreBudgetBytes = int64_t(256) << 20;
at::Tensor gqa_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t n_new,
                                int64_t sliding_window = 0,
                                int64_t score_budget_bytes = kDefaultScoreBudgetBytes);

// The batched formulation (fused scaled_dot_product_attention on LibTorch >= 2, else bmm + fp32 softmax) that
// gqa_causal_attention uses off the CPU and on LibTorch 2.x; same contract.
at::Tensor gqa_causal_attention_batched(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                        int64_t n_new, int64_t sliding_window = 0,
                                        int64_t score_budget_bytes = kDefaultScoreBudgetBytes);

// Tiles of the blocked kernel: a task holds about query_rows query rows (the group's heads of query_rows /
// group new tokens) and walks their keys key_block at a time. The defaults were the fastest measured for the
// fused kernel (docs/PREFILL.md: 512 keys keep a block's keys and values in a core's L2 at head_dim up to
// 128).
struct AttentionTiling {
    int64_t query_rows = 512;
    int64_t key_block = 512;
    bool blas = false;  // the generic task (BLAS matmuls around the online-softmax step) where the fused
                        // kernel (models/attention_fused.h) could run
};

// The tiling gqa_causal_attention runs: the defaults, or VARRATE_ATTENTION_TILING=ROWSxKEYS and
// VARRATE_ATTENTION_KERNEL=fused|blas (for measuring others with `varrate bench prefill`; read once, an Error
// naming the variable when malformed).
AttentionTiling runtime_tiling();

// Flash-style blocked attention, what gqa_causal_attention runs on CPUs with LibTorch 1.x: an online softmax
// over key blocks, so no score tensor larger than one tile exists; blocks that no query of a tile may see
// (beyond its causal edge, before its sliding window) are skipped; GQA without repeating K/V. The arithmetic
// is fp32 for every input dtype (one rounding, at the output). Same contract as gqa_causal_attention.
at::Tensor gqa_causal_attention_blocked(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                        int64_t n_new, int64_t sliding_window = 0,
                                        const AttentionTiling& tiling = {});

// How many threads the blocked kernel's tasks run on when there are `tasks` of them: min(tasks,
// at::get_num_threads()) where this file was built with LibTorch's OpenMP, 1 where not (at::parallel_for is a
// header template that runs serially without it). For the test that keeps it so.
int64_t blocked_attention_workers(int64_t tasks);

// Attention of a batch of rows, each against its own columns: q [B, n_kv_head, group*n_new, head_dim] (rows
// (g, i) as above), k, v [B, n_kv_head, >= max(seen), head_dim] where row b uses columns [0, seen[b]), its
// last n_new being the new tokens (causal among themselves; sliding_window as above). Returns [B, n_kv_head,
// group*n_new, head_dim] in q's dtype, scores in fp32. Rows of similar length are taken together, as many as
// keep their scores under score_budget_bytes: the default keeps them in a core's cache, which matters more
// than the number of blocks. Decodes several caches in lock-step (models/batch_cache.h).
constexpr int64_t kCachedScoreBytes = int64_t(1) << 20;
at::Tensor gqa_rows_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const std::vector<int64_t>& seen, int64_t n_new, int64_t sliding_window = 0,
                              int64_t score_budget_bytes = kCachedScoreBytes,
                              const at::Tensor& seen_on_device = {});  // [B] int64: `seen`, on q's device

}  // namespace varrate
