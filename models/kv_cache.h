#pragma once
// Per-layer KV cache with spare capacity. Keys are stored post-RoPE. Layers may hold different numbers of
// entries (eviction), and the next RoPE position is tracked separately from the entry count, so a cache
// compressed at the end of a context of length L keeps decoding at positions L, L+1, ...
// A Snapshot (lengths + position) restores the cache to a previous state cheaply: appends only write past
// the current length, so truncating back is exact. This is how one compression serves many questions.
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

namespace varrate {

struct LayerKV {
    at::Tensor keys;    // [n_kv_head, n_tok, head_dim], post-RoPE
    at::Tensor values;  // [n_kv_head, n_tok, head_dim]
};

class KVCache {
  public:
    struct Snapshot {
        std::vector<int64_t> lengths;
        int64_t next_position = 0;
    };

    KVCache() = default;
    KVCache(int64_t n_layer, int64_t n_kv_head, int64_t head_dim, at::TensorOptions options);

    int64_t n_layer() const { return static_cast<int64_t>(layers_.size()); }
    int64_t length(int64_t layer) const { return layers_[layer].length; }
    int64_t next_position() const { return next_position_; }
    void set_next_position(int64_t p) { next_position_ = p; }

    // Appends [n_kv_head, n, head_dim] to one layer, growing capacity geometrically.
    void append(int64_t layer, const at::Tensor& keys, const at::Tensor& values);
    // Views of the valid entries: [n_kv_head, length, head_dim].
    at::Tensor keys(int64_t layer) const;
    at::Tensor values(int64_t layer) const;
    // Replaces a layer's entries (the observer's compressed cache); the length may shrink.
    void replace(int64_t layer, const LayerKV& kv);

    Snapshot snapshot() const;
    void restore(const Snapshot& s);
    void clear();
    // Bytes held by valid entries (not capacity), at the cache dtype.
    int64_t used_bytes() const;

  private:
    struct Layer {
        at::Tensor k, v;  // [n_kv_head, capacity, head_dim]
        int64_t length = 0;
    };
    void reserve(int64_t layer, int64_t capacity);
    std::vector<Layer> layers_;
    int64_t next_position_ = 0;
    int64_t n_kv_heads_ = 0, head_dim_ = 0;
    at::TensorOptions options_;
};

}  // namespace varrate
