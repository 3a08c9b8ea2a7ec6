#pragma once
// Causal grouped-query attention of a block of new queries against the KV cache, without repeating K/V:
// the query heads that share a kv head are stacked as rows, so one batched matmul per kv head serves them
// all.
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace varrate {

// q: [n_kv_head, group*n_new, head_dim], rows ordered (g, i) = query head kv*group+g, new token i.
// k, v: [n_kv_head, T, head_dim]: the cache, whose last n_new entries are the new tokens (new token i sees
// cache entries 0..T-n_new+i). Returns [n_kv_head, group*n_new, head_dim] in q's dtype.
// The fp32 score tensor is bounded (blocks of query rows), so long contexts do not allocate T x T.
at::Tensor gqa_causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t n_new);

}  // namespace varrate
