#include "models/attention.h"

#include <ATen/ATen.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace varrate {

namespace {

// mask: [rows, T] bool, true where the query may attend; undefined when every key is visible.
at::Tensor attend_block(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                        const at::Tensor& mask) {
#if TORCH_VERSION_MAJOR >= 2
    // Fused kernels (flash / memory-efficient / CPU flash) where the device and dtype allow.
    return at::scaled_dot_product_attention(
        q, k, v, mask.defined() ? c10::optional<at::Tensor>(mask) : c10::optional<at::Tensor>());
#else
    const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
    // As HF's eager attention: scores in the runtime dtype, scaled and soft-maxed in fp32.
    at::Tensor scores = at::bmm(q, k.transpose(1, 2)).to(at::kFloat).mul_(scale);  // [n_kv_head, rows, T]
    if (mask.defined()) scores.masked_fill_(mask.logical_not(), -std::numeric_limits<float>::infinity());
    const at::Tensor probs = at::softmax(scores, -1).to(q.scalar_type());
    return at::bmm(probs, v);  // [n_kv_head, rows, head_dim]
#endif
}

}  // namespace

at::Tensor gqa_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t n_new,
                                int64_t sliding_window, int64_t score_budget_bytes) {
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
        return attend_block(q.narrow(1, r0, rows), k, v, mask);
    };
    if (block_rows == n_rows) return block(0, n_rows);
    at::Tensor out = at::empty(q.sizes(), q.options());  // [n_kv_head, group*n_new, head_dim]
    for (int64_t r0 = 0; r0 < n_rows; r0 += block_rows) {
        const int64_t rows = std::min(block_rows, n_rows - r0);
        out.narrow(1, r0, rows).copy_(block(r0, rows));
    }
    return out;
}

}  // namespace varrate
