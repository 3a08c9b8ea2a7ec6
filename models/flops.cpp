#include "models/flops.h"

namespace varrate {

PrefillFlops prefill_flops(const ModelConfig& c, int64_t n) {
    const double tokens = static_cast<double>(n);
    const double q = static_cast<double>(c.n_head * c.head_dim);
    const double kv = static_cast<double>(c.n_kv_head * c.head_dim);
    const double h = static_cast<double>(c.hidden_size);
    const double inter = static_cast<double>(c.intermediate_size);
    const double per_token_layer = h * q + 2 * h * kv + q * h + 3 * h * inter;  // multiply-adds
    PrefillFlops f;
    f.linear = 2.0 * tokens * per_token_layer * static_cast<double>(c.n_layer) +
               2.0 * h * static_cast<double>(c.vocab_size);
    // Causal: query i attends to i+1 keys; QK^T and AV each cost head_dim multiply-adds per (query, key,
    // head).
    const double pairs = tokens * (tokens + 1) / 2.0;
    f.attention =
        2.0 * 2.0 * pairs * static_cast<double>(c.n_head * c.head_dim) * static_cast<double>(c.n_layer);
    return f;
}

}  // namespace varrate
