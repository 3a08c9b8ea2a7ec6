#pragma once
// A layer whose keys lost channels (ThinK, codec/methods/think_method.h): every token is kept, each KV head
// keeps the same subset of its key channels for every token, values stay whole. kvpress zeroes the pruned
// channels in place and so saves nothing; this store holds only the kept ones, so the cache holds what the
// budget accounts for:
//   keys      [n_kv_head, L, n_kept] post-RoPE, cache dtype (each head's kept channels, ascending)
//   channels  [n_kv_head, n_kept] uint8: which channels those are (head_dim <= 256)
//   values    [n_kv_head, L, head_dim]
// Attention is exact: a query's score over a pruned key is the product over the kept channels (the pruned
// ones are zero), so each query is gathered to its KV head's kept channels before one product with the keys.
#include <cstdint>

#include <ATen/core/Tensor.h>

#include "models/kv_cache.h"

namespace varrate {

class ChannelPrunedLayer : public LayerPrefix {
  public:
    struct Parts {
        int64_t layer = 0;
        int64_t head_dim = 0;
        at::Tensor keys;      // [G, L, n_kept] post-RoPE, cache dtype
        at::Tensor channels;  // [G, n_kept] uint8, ascending per head, < head_dim
        at::Tensor values;    // [G, L, head_dim]
    };
    // Checks shapes, dtypes and the channel lists (one host read); throws Error naming what does not match.
    explicit ChannelPrunedLayer(Parts parts);

    int64_t length() const override { return p_.values.size(1); }
    int64_t kept_channels() const { return p_.keys.size(2); }
    const Parts& parts() const { return p_; }
    // The bytes the budget accounts for: kept key channels and values at cache precision, one byte per kept
    // channel index.
    int64_t resident_bytes() const override;
    at::Tensor attend(const at::Tensor& q, const at::Tensor& tail_keys, const at::Tensor& tail_values,
                      double scale) const override;
    // Keys with the pruned channels zero (what kvpress's ThinKPress leaves in the cache), values as held.
    LayerKV reconstruct() const override;

  private:
    Parts p_;
};

// The bytes of a layer of L tokens, G KV heads and head_dim channels that keeps n_kept key channels per
// head, at element_size bytes per scalar: what ChannelPrunedLayer holds.
int64_t channel_pruned_bytes(int64_t n_tokens, int64_t n_kv_head, int64_t head_dim, int64_t n_kept,
                             int64_t element_size);

}  // namespace varrate
