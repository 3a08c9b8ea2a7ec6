#include "models/attention.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/version.h>

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
#include "models/attention_fused.h"
#include "models/online_softmax.h"

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

// OpenBLAS (Debian's LibTorch calls it for matmuls) runs its own threads inside every call; inside the
// kernel's parallel tasks they would oversubscribe the cores (measured: 2 tasks x 2 BLAS threads on 2 cores,
// 16k tokens on the demo model, 20 % slower). Single-threaded for the scope, then restored, so that the
// large matmuls of the projections keep their threads. A no-op where OpenBLAS is not loaded.
class SingleThreadedBlas {
  public:
    SingleThreadedBlas() {
        static const auto api = [] {
            std::pair<int (*)(), void (*)(int)> f{nullptr, nullptr};
            f.first = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
            f.second = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
            return f;
        }();
        if (!api.first || !api.second || at::get_num_threads() < 2) return;
        set_ = api.second;
        previous_ = api.first();
        if (previous_ > 1) set_(1);
    }
    ~SingleThreadedBlas() {
        if (set_ && previous_ > 1) set_(previous_);
    }
    SingleThreadedBlas(const SingleThreadedBlas&) = delete;
    SingleThreadedBlas& operator=(const SingleThreadedBlas&) = delete;

  private:
    void (*set_)(int) = nullptr;
    int previous_ = 1;
};

}  // namespace

// New tokens from which gqa_causal_attention runs the blocked kernel on the CPU.
constexpr int64_t kBlockedMinNewTokens = 64;

// Multiply-adds per thread below which the blocked kernel's tasks stay on the calling thread (about 0.2 ms
// of a core's work).
constexpr double kParallelWorkPerThread = 1 << 23;

AttentionTiling runtime_tiling() {
    static const AttentionTiling tiling = [] {
        AttentionTiling t;
        if (const char* kernel = std::getenv("VARRATE_ATTENTION_KERNEL"); kernel && *kernel) {
            const std::string name = kernel;
            if (name != "fused" && name != "blas")
                throw Error("VARRATE_ATTENTION_KERNEL: '" + name + "' is neither fused nor blas");
            t.blas = name == "blas";
        }
        const char* text = std::getenv("VARRATE_ATTENTION_TILING");
        if (!text || !*text) return t;
        long long rows = 0, keys = 0;
        char tail = 0;
        if (std::sscanf(text, "%lldx%lld%c", &rows, &keys, &tail) != 2 || rows < 1 || keys < 1)
            throw Error(std::string("VARRATE_ATTENTION_TILING: '") + text +
                        "' is not ROWSxKEYS (query rows and keys per tile, e.g. 512x1024)");
        t.query_rows = rows;
        t.key_block = keys;
        return t;
    }();
    return tiling;
}

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

// Blocked causal attention with an online softmax (flash-style). One task per (kv head, tile of new tokens)
// holds the group's query rows of those tokens and walks the keys they can see in blocks, so no score tile
// larger than [rows, block] exists; blocks that no row of the tile may see are never visited. A task runs the
// fused kernel (models/attention_fused.h: six rows at a time, all in registers and L1) where the CPU has
// AVX2 + FMA, else the BLAS task: per block the scores by one matmul, the softmax step fused into one pass
// (models/online_softmax.h: masks by index ranges, no mask tensors), and the weighted values added by one
// matmul. The arithmetic is fp32 whatever the runtime dtype (bf16 K/V are converted once per call: LibTorch
// 1.13's CPU bf16 matmul would round scores and weights to bf16); ops inside a task run single-threaded.
at::Tensor gqa_causal_attention_blocked(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                        int64_t n_new, int64_t sliding_window,
                                        const AttentionTiling& tiling) {
    const int64_t n_kv = q.size(0), hd = q.size(2), n_keys = k.size(1), group = q.size(1) / n_new;
    const int64_t prior = n_keys - n_new;
    const int64_t tile_tokens = std::clamp<int64_t>(tiling.query_rows / group, 1, n_new);
    const int64_t block = std::max<int64_t>(1, tiling.key_block);
    const int64_t n_tiles = (n_new + tile_tokens - 1) / tile_tokens;
    // fp32 (copies only for bf16); queries pre-scaled, as scaled_dot_product_attention's math path does.
    const at::Tensor qf = q.to(at::kFloat).mul(1.0 / std::sqrt(static_cast<double>(hd)));
    const at::Tensor qg = qf.view({n_kv, group, n_new, hd});
    const at::Tensor kf = k.to(at::kFloat), vf = v.to(at::kFloat);  // [n_kv_head, T, head_dim]
    at::Tensor out = at::empty({n_kv, group, n_new, hd}, q.options());
    // Longest tiles (the last, which see the most keys) first, so that short ones fill the gaps at the end;
    // tasks are handed out one at a time, which also keeps a descheduled thread on a shared machine from
    // holding the others at the barrier.
    const int64_t n_tasks = n_kv * n_tiles;
    // Threads only for work worth waking them: a decode step or a short chunk (a few hundred thousand
    // multiply-adds) takes less than starting a parallel region, and far more when another process holds a
    // core.
    const double work = 2.0 * n_kv * group * n_new * (prior + n_new / 2.0 + 1) * hd;  // multiply-adds
    const int64_t workers = std::clamp<int64_t>(static_cast<int64_t>(work / kParallelWorkPerThread), 1,
                                                std::min<int64_t>(n_tasks, at::get_num_threads()));
    std::atomic<int64_t> next_task{0};
    // Task t: kv head h, new tokens [i0, i0 + tokens) (their group*tokens query rows), the first at cache
    // index first_query; its rows see the keys [key_begin, key_end).
    struct Task {
        int64_t h, i0, tokens, rows, first_query, key_begin, key_end;
    };
    const auto task_at = [&](int64_t t) {
        Task k;
        k.h = t % n_kv;
        k.i0 = (n_tiles - 1 - t / n_kv) * tile_tokens;  // longest tiles first
        k.tokens = std::min(tile_tokens, n_new - k.i0);
        k.rows = group * k.tokens;
        k.first_query = prior + k.i0;
        k.key_begin = sliding_window > 0 ? std::max<int64_t>(0, k.first_query - sliding_window + 1) : 0;
        k.key_end = k.first_query + k.tokens;  // the last token sees up to here
        return k;
    };
    if (!tiling.blas && fused_attention_supported(hd)) {
        // The fused kernel (models/attention_fused.h): its own loops, no BLAS inside. It reads a head's keys
        // and values as rows of head_dim floats (the cache's layout: a view of its first T entries).
        const auto rows_of_floats = [&](const at::Tensor& x) {
            return x.stride(2) == 1 && x.stride(1) == hd ? x : x.contiguous();
        };
        const at::Tensor kr = rows_of_floats(kf), vr = rows_of_floats(vf);
        at::parallel_for(0, workers, 1, [&](int64_t, int64_t) {
            FusedAttentionScratch scratch;
            at::Tensor qt = at::empty({group * tile_tokens, hd}, qf.options());  // rows (g, i)
            at::Tensor o = at::empty({group * tile_tokens, hd}, qf.options());
            for (int64_t t = next_task++; t < n_tasks; t = next_task++) {
                const Task k = task_at(t);
                at::Tensor qr = qt.narrow(0, 0, k.rows), orows = o.narrow(0, 0, k.rows);
                qr.view({group, k.tokens, hd}).copy_(qg[k.h].narrow(1, k.i0, k.tokens));
                fused_attention_task(qr.data_ptr<float>(), k.rows, k.tokens, k.first_query, sliding_window,
                                     kr[k.h].data_ptr<float>(), vr[k.h].data_ptr<float>(), hd, k.key_begin,
                                     k.key_end, block, orows.data_ptr<float>(), scratch);
                out[k.h].narrow(1, k.i0, k.tokens).copy_(orows.view({group, k.tokens, hd}));
            }
        });
        return out.view({n_kv, group * n_new, hd});
    }
    const SingleThreadedBlas one_blas_thread_per_task;
    at::parallel_for(0, workers, 1, [&](int64_t, int64_t) {
        const int64_t max_rows = group * tile_tokens;
        at::Tensor score_buf = at::empty({max_rows * block}, qf.options());
        at::Tensor acc = at::empty({max_rows, hd}, qf.options());
        std::vector<float> row_max(static_cast<size_t>(max_rows)), row_sum(static_cast<size_t>(max_rows));
        for (int64_t t = next_task++; t < n_tasks; t = next_task++) {
            const auto [h, i0, tokens, rows, first_query, key_begin, key_end] = task_at(t);
            const at::Tensor qt = qg[h].narrow(1, i0, tokens).reshape({rows, hd});  // rows (g, i)
            at::Tensor o = acc.narrow(0, 0, rows);
            o.zero_();
            std::fill(row_max.begin(), row_max.end(), -std::numeric_limits<float>::infinity());
            std::fill(row_sum.begin(), row_sum.end(), 0.0f);
            for (int64_t kb = key_begin; kb < key_end; kb += block) {
                const int64_t kn = std::min(block, key_end - kb);
                at::Tensor s = score_buf.narrow(0, 0, rows * kn).view({rows, kn});
                at::mm_out(s, qt, kf[h].narrow(0, kb, kn).t());
                online_softmax_step(s.data_ptr<float>(), rows, kn, tokens, kb, first_query, sliding_window,
                                    row_max.data(), row_sum.data(), o.data_ptr<float>(), hd);
                o.addmm_(s, vf[h].narrow(0, kb, kn));
            }
            const at::Tensor sums = at::from_blob(row_sum.data(), {rows, 1}, qf.options());
            out[h].narrow(1, i0, tokens).copy_(o.div_(sums).view({group, tokens, hd}));
        }
    });
    return out.view({n_kv, group * n_new, hd});
}

int64_t blocked_attention_workers(int64_t tasks) {
    std::mutex mutex;
    std::set<std::thread::id> workers;
    at::parallel_for(0, std::min<int64_t>(tasks, at::get_num_threads()), 1, [&](int64_t, int64_t) {
        // Long enough that a second thread of the region has started before the first is done.
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        const std::lock_guard<std::mutex> lock(mutex);
        workers.insert(std::this_thread::get_id());
    });
    return static_cast<int64_t>(workers.size());
}

at::Tensor gqa_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t n_new,
                                int64_t sliding_window, int64_t score_budget_bytes) {
#if TORCH_VERSION_MAJOR < 2
    // Decode steps and short chunks take the batched path: a task of a few query rows would spend more on
    // packing its keys than on its arithmetic (measured at 16k keys: 120 tokens/s greedy against 145-240).
    if (q.device().is_cpu() && n_new >= kBlockedMinNewTokens)
        return gqa_causal_attention_blocked(q, k, v, n_new, sliding_window, runtime_tiling());
#endif
    return gqa_causal_attention_batched(q, k, v, n_new, sliding_window, score_budget_bytes);
}

at::Tensor gqa_rows_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                              const std::vector<int64_t>& seen, int64_t n_new, int64_t sliding_window,
                              int64_t score_budget_bytes, const at::Tensor& seen_on_device) {
    const int64_t B = q.size(0), n_kv = q.size(1), rows = q.size(2), hd = q.size(3), group = rows / n_new;
    at::Tensor out = at::empty({B * n_kv, rows, hd}, q.options());
    const at::Tensor q3 = q.reshape({B * n_kv, rows, hd});
    const at::TensorOptions index = at::TensorOptions().dtype(at::kLong).device(q.device());
    const at::Tensor token = at::arange(n_new, index).view({1, n_new, 1});  // [1, n_new, 1]
    // Every row's length on the device, copied once per call (or given by the caller once per step).
    const at::Tensor seen_t =
        seen_on_device.defined() ? seen_on_device : at::tensor(seen, at::kLong).to(q.device());  // [B]
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
        const at::Tensor end = seen_t.narrow(0, b0, nb).view({nb, 1, 1}).sub(n_new - 1).add(token);
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
