#include "models/attention.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/version.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

namespace varrate {

namespace {

constexpr float kMasked = -std::numeric_limits<float>::infinity();

// mask: [rows, T] bool, true where the query may attend; undefined when every key is visible.
at::Tensor attend_rows(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const at::Tensor& mask) {
#if TORCH_VERSION_MAJOR >= 2
    // Fused kernels (CPU flash; CUDA flash / memory-efficient) where the device and dtype allow. They take
    // [batch, heads, rows, head_dim] alone: given 3-D tensors scaled_dot_product_attention runs its unfused
    // math path (LibTorch 2.6, 4096 tokens on 2 CPU cores: 5x slower in bf16, 4x in fp32). The kv heads are
    // the heads, and the mask [rows, T] broadcasts over them.
    return at::scaled_dot_product_attention(
               q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0),
               mask.defined() ? c10::optional<at::Tensor>(mask) : c10::optional<at::Tensor>())
        .squeeze(0);
#else
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
    // As HF's eager attention: scores in the runtime dtype, scaled and soft-maxed in fp32.
    at::Tensor scores = at::bmm(q, k.transpose(1, 2)).to(at::kFloat).mul_(scale);  // [n_kv_head, rows, T]
    if (mask.defined()) scores.masked_fill_(mask.logical_not(), kMasked);
    const at::Tensor probs = at::softmax(scores, -1).to(q.scalar_type());
    return at::bmm(probs, v);  // [n_kv_head, rows, head_dim]
#endif
}

#if TORCH_VERSION_MAJOR < 2
// CPU: one task per (kv head, block of new tokens) holds the group's query rows for those tokens and only
// the keys they can see; its scores fit in cache and its ops run single-threaded inside parallel_for.
// The queries are scaled before the product (as scaled_dot_product_attention's math path does), and only
// the few columns a mask can hide are touched by it.
at::Tensor attention_cpu_tiled(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t n_new,
                               int64_t sliding_window, int64_t score_budget_bytes) {
    const int64_t n_kv = q.size(0), hd = q.size(2), n_keys = k.size(1), group = q.size(1) / n_new;
    const int64_t prior = n_keys - n_new;
    // ~256 query rows per tile, fewer if the scores would exceed the budget.
    const int64_t tile_tokens = std::clamp<int64_t>(
        std::min<int64_t>(256 / group, score_budget_bytes / std::max<int64_t>(1, group * n_keys * 4)), 1,
        n_new);
    const int64_t n_tiles = (n_new + tile_tokens - 1) / tile_tokens;
    const at::Tensor qg = q.mul(1.0 / std::sqrt(static_cast<double>(hd))).view({n_kv, group, n_new, hd});
    // Within a tile, token j hides the keys of tokens j+1.. of the same tile: the last `rows` columns.
    const at::Tensor causal = at::ones({tile_tokens, tile_tokens}, at::kBool).triu(1);  // [tile, tile]
    at::Tensor out = at::empty({n_kv, group, n_new, hd}, q.options());
    // Tiles are handed out one at a time rather than split up front: on a shared machine a descheduled
    // thread would otherwise leave the others waiting at the barrier with their share done.
    const int64_t n_tasks = n_kv * n_tiles;
    std::atomic<int64_t> next_task{0};
    at::parallel_for(0, std::min<int64_t>(n_tasks, at::get_num_threads()), 1, [&](int64_t, int64_t) {
        for (int64_t t = next_task++; t < n_tasks; t = next_task++) {
            const int64_t h = t / n_tiles, i0 = (t % n_tiles) * tile_tokens;
            const int64_t rows = std::min(tile_tokens, n_new - i0);
            const int64_t key_end = prior + i0 + rows;  // keys the last token of the tile sees
            const int64_t key_begin =
                sliding_window > 0 ? std::max<int64_t>(0, prior + i0 - sliding_window + 1) : 0;
            const int64_t n_vis = key_end - key_begin;
            const at::Tensor kt = k[h].narrow(0, key_begin, n_vis), vt = v[h].narrow(0, key_begin, n_vis);
            const at::Tensor qt = qg[h].narrow(1, i0, rows).reshape({group * rows, hd});
            const at::Tensor scores = at::mm(qt, kt.t());  // [group rows, n_vis], runtime dtype
            if (rows > 1) {                                // a single token sees exactly [key_begin, key_end)
                const at::Tensor per_head = scores.view({group, rows, n_vis});
                per_head.narrow(2, n_vis - rows, rows)
                    .masked_fill_(causal.narrow(0, 0, rows).narrow(1, 0, rows), kMasked);
                if (sliding_window > 0) {
                    // Token j also hides keys at or before its index - window: among the first `rows`
                    // columns.
                    const int64_t cols = std::min(rows, n_vis);
                    const at::Tensor query_index = at::arange(prior + i0, key_end, at::kLong).unsqueeze(1);
                    const at::Tensor key_index =
                        at::arange(key_begin, key_begin + cols, at::kLong).unsqueeze(0);
                    per_head.narrow(2, 0, cols)
                        .masked_fill_(key_index <= query_index - sliding_window, kMasked);
                }
            }
            // Softmax accumulates in fp32 also for bf16 input (the same values as fp32 then rounding).
            out[h].narrow(1, i0, rows).copy_(at::mm(at::softmax(scores, -1), vt).view({group, rows, hd}));
        }
    });
    return out.view({n_kv, group * n_new, hd});
}
#endif

}  // namespace

at::Tensor gqa_causal_attention_batched(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                        int64_t n_new, int64_t sliding_window, int64_t score_budget_bytes) {
    const int64_t n_kv = q.size(0), n_rows = q.size(1), n_keys = k.size(1);
    const int64_t prior = n_keys - n_new;  // cache entries every new token sees
    const int64_t block_rows =
        std::clamp<int64_t>(score_budget_bytes / std::max<int64_t>(1, n_kv * n_keys * 4), 1, n_rows);
    const bool windowed = sliding_window > 0 && n_keys > sliding_window;
    const at::Tensor key_index =
        n_new > 1 || windowed ? at::arange(n_keys, q.options().dtype(at::kLong)) : at::Tensor();  // [T]

    auto block = [&](int64_t r0, int64_t rows) {
        at::Tensor mask;
        if (key_index.defined()) {
            // Row r is new token r % n_new at cache index prior + r % n_new.
            const at::Tensor query_index = at::arange(r0, r0 + rows, q.options().dtype(at::kLong))
                                               .remainder(n_new)
                                               .add_(prior)
                                               .unsqueeze(1);
            mask = key_index.unsqueeze(0) <= query_index;  // [rows, T]
            if (windowed) mask.logical_and_(key_index.unsqueeze(0) > query_index - sliding_window);
        }
        return attend_rows(q.narrow(1, r0, rows), k, v, mask);
    };
    if (block_rows == n_rows) return block(0, n_rows);
    at::Tensor out = at::empty(q.sizes(), q.options());  // [n_kv_head, group*n_new, head_dim]
    for (int64_t r0 = 0; r0 < n_rows; r0 += block_rows) {
        const int64_t rows = std::min(block_rows, n_rows - r0);
        out.narrow(1, r0, rows).copy_(block(r0, rows));
    }
    return out;
}

at::Tensor gqa_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t n_new,
                                int64_t sliding_window, int64_t score_budget_bytes) {
#if TORCH_VERSION_MAJOR < 2
    if (q.device().is_cpu()) return attention_cpu_tiled(q, k, v, n_new, sliding_window, score_budget_bytes);
#endif
    return gqa_causal_attention_batched(q, k, v, n_new, sliding_window, score_budget_bytes);
}

at::Tensor gqa_rows_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const std::vector<int64_t>& seen, int64_t n_new, int64_t sliding_window,
                              int64_t score_budget_bytes) {
    const int64_t B = q.size(0), n_kv = q.size(1), rows = q.size(2), hd = q.size(3), group = rows / n_new;
    at::Tensor out = at::empty({B * n_kv, rows, hd}, q.options());
    const at::Tensor q3 = q.reshape({B * n_kv, rows, hd});
    const at::TensorOptions index = at::TensorOptions().dtype(at::kLong).device(q.device());
    const at::Tensor token = at::arange(n_new, index).view({1, n_new, 1});  // [1, n_new, 1]
    int64_t b0 = 0;
    while (b0 < B) {
        // Consecutive rows of similar length share a block, padded to the longest, while the scores stay
        // under the budget; a row much shorter or longer than the block starts its own.
        int64_t nb = 1, T = seen[b0];
        while (b0 + nb < B) {
            const int64_t t = seen[b0 + nb], longest = std::max(T, t);
            if (2 * std::min(T, t) < longest || (nb + 1) * n_kv * rows * longest * 4 > score_budget_bytes)
                break;
            T = longest;
            ++nb;
        }
        const std::vector<int64_t> block_seen(seen.begin() + b0, seen.begin() + b0 + nb);
        // Token i of row b sees columns [end - window, end) with end = seen_b - n_new + i + 1.
        const at::Tensor end =
            at::tensor(block_seen, at::kLong).to(q.device()).view({nb, 1, 1}).sub(n_new - 1).add(token);
        const int64_t earliest_end = *std::min_element(block_seen.begin(), block_seen.end()) - n_new + 1;
        const bool windowed = sliding_window > 0 && T > sliding_window;
        const int64_t from = windowed ? 0 : earliest_end;  // columns before are visible to every token
        const at::Tensor column = at::arange(from, T, index).view({1, 1, T - from});
        at::Tensor hidden = column.ge(end);  // [nb, n_new, T - from]
        if (windowed) hidden.logical_or_(column.lt(end.sub(sliding_window)));
#if TORCH_VERSION_MAJOR >= 2
        // 4-D, as the fused kernels need (see attend_rows): batch rows x kv heads, one mask row per query row
        // shared by the kv heads.
        at::Tensor visible = at::ones({nb, n_new, T}, index.dtype(at::kBool));
        visible.narrow(2, from, T - from).logical_and_(hidden.logical_not());
        const at::Tensor mask =
            visible.unsqueeze(1).expand({nb, group, n_new, T}).reshape({nb, 1, rows, T});  // rows (g, i)
        out.narrow(0, b0 * n_kv, nb * n_kv)
            .copy_(at::scaled_dot_product_attention(q.narrow(0, b0, nb), k.narrow(0, b0, nb).narrow(2, 0, T),
                                                    v.narrow(0, b0, nb).narrow(2, 0, T), mask)
                       .reshape({nb * n_kv, rows, hd}));
#else
        const at::Tensor qb = q3.narrow(0, b0 * n_kv, nb * n_kv);
        const at::Tensor kb = k.narrow(0, b0, nb).narrow(2, 0, T).reshape({nb * n_kv, T, hd}),
                         vb = v.narrow(0, b0, nb).narrow(2, 0, T).reshape({nb * n_kv, T, hd});
        // Queries scaled first (as the tiled path and scaled_dot_product_attention's math path do); one mask
        // row per new token, shared by the group's query heads and the kv heads.
        at::Tensor scores = at::bmm(qb.mul(1.0 / std::sqrt(static_cast<double>(hd))), kb.transpose(1, 2))
                                .to(at::kFloat);  // [nb n_kv, rows, T]
        if (from < T)
            scores.view({nb, n_kv, group, n_new, T})
                .narrow(4, from, T - from)
                .masked_fill_(hidden.view({nb, 1, 1, n_new, T - from}), kMasked);
        out.narrow(0, b0 * n_kv, nb * n_kv).copy_(at::bmm(at::softmax(scores, -1).to(q.scalar_type()), vb));
#endif
        b0 += nb;
    }
    return out.view({B, n_kv, rows, hd});
}

}  // namespace varrate
