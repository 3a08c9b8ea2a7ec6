#pragma once
// Per-layer KV cache with spare capacity. Keys are stored post-RoPE. Layers may hold different numbers of
// entries (eviction), and the next RoPE position is tracked separately from the entry count, so a cache
// compressed at the end of a context of length L keeps decoding at positions L, L+1, ...
// A layer may begin with a LayerPrefix (a compressed store) that attention reads in its own way; the dense
// entries appended after it are the layer's tail.
// A Snapshot (lengths + position) restores the cache to a previous state cheaply: appends only write past
// the current length, so truncating back is exact. This is how one compression serves many questions.
#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

namespace varrate {

struct LayerKV {
    at::Tensor keys;    // [n_kv_head, n_tok, head_dim], post-RoPE
    at::Tensor values;  // [n_kv_head, n_tok, head_dim]
};

// A layer's leading entries held in another form than dense K/V (a compressed store,
// codec/compressed_layer.h): attention reads it through attend(), never as key/value tensors. Immutable once
// made; shared by caches.
class LayerPrefix {
  public:
    virtual ~LayerPrefix() = default;
    virtual int64_t length() const = 0;  // entries, at positions 0..length-1
    // Attention of post-RoPE queries q [n_head, n, head_dim] over the prefix followed by `tail` ([n_kv_head,
    // n_tail, head_dim] post-RoPE, n_tail >= n: the queries' own entries are its last n, causal among
    // themselves), scaled by `scale`. Returns [n_head, n, head_dim] in q's dtype.
    virtual at::Tensor attend(const at::Tensor& q, const at::Tensor& tail_keys, const at::Tensor& tail_values,
                              double scale) const = 0;
    // The dense entries the prefix stands for (reconstruct once): [n_kv_head, length, head_dim] each.
    virtual LayerKV reconstruct() const = 0;
    // Bytes of the tensors the prefix holds (shared model-level data, e.g. a basis, apart).
    virtual int64_t resident_bytes() const = 0;
};

// Scores of queries over a layer's tail, [n_kv_head, g * n_q, n_tail] (the g query heads of one KV head side
// by side, as LayerPrefix::attend lays them out), whose last n_q entries are the queries' own: masks to -inf
// the entries each query may not see (query i sees tail entries up to n_tail - n_q + i).
void mask_future_tail(at::Tensor& tail_scores, int64_t n_q, int64_t group);

class KVCache {
  public:
    struct Snapshot {
        std::vector<int64_t> lengths;
        int64_t next_position = 0;
    };

    KVCache() = default;
    KVCache(int64_t n_layer, int64_t n_kv_head, int64_t head_dim, at::TensorOptions options);

    int64_t n_layer() const { return static_cast<int64_t>(layers_.size()); }
    // Entries of a layer: its prefix's (if any) and the dense ones after it.
    int64_t length(int64_t layer) const { return prefix_length(layer) + layers_[layer].length; }
    int64_t next_position() const { return next_position_; }
    void set_next_position(int64_t p) { next_position_ = p; }

    // Appends [n_kv_head, n, head_dim] to one layer, growing capacity geometrically.
    void append(int64_t layer, const at::Tensor& keys, const at::Tensor& values);
    // Appends n entries to one layer and returns views of them ([n_kv_head, n, head_dim] keys and values) for
    // the caller to fill in place: the runtime writes the rotated keys straight into the cache.
    LayerKV extend(int64_t layer, int64_t n);
    // Makes room for at least `entries` dense entries in every layer at once, so that a prefill grows no
    // layer chunk by chunk (each growth copies the layer).
    void reserve_entries(int64_t entries);
    // Views of the valid entries: [n_kv_head, length, head_dim]. Throws for a layer with a prefix (its
    // entries are not tensors): read it through prefix() and the dense tail.
    at::Tensor keys(int64_t layer) const;
    at::Tensor values(int64_t layer) const;
    // The dense entries after the layer's prefix (all of them without one): [n_kv_head, n, head_dim].
    at::Tensor tail_keys(int64_t layer) const;
    at::Tensor tail_values(int64_t layer) const;
    // Replaces a layer's entries (the observer's compressed cache); the length may shrink. Drops a prefix.
    void replace(int64_t layer, const LayerKV& kv);
    // Replaces a layer's entries by a prefix (a compressed store); no dense entries after it yet.
    void set_prefix(int64_t layer, std::shared_ptr<const LayerPrefix> prefix);
    const LayerPrefix* prefix(int64_t layer) const { return layers_[layer].prefix.get(); }
    std::shared_ptr<const LayerPrefix> prefix_shared(int64_t layer) const { return layers_[layer].prefix; }
    int64_t prefix_length(int64_t layer) const {
        return layers_[layer].prefix ? layers_[layer].prefix->length() : 0;
    }
    bool has_prefix() const;
    // The same cache with every prefix rebuilt as dense entries (reconstruct once).
    KVCache densified() const;

    Snapshot snapshot() const;
    void restore(const Snapshot& s);
    void clear();
    // Bytes held by valid entries (not capacity), at the cache dtype, plus what the prefixes hold.
    int64_t used_bytes() const;

  private:
    struct Layer {
        std::shared_ptr<const LayerPrefix> prefix;  // entries 0..prefix->length()-1 when set
        at::Tensor k, v;     // [n_kv_head, capacity, head_dim]: the dense entries after it
        int64_t length = 0;  // dense entries
    };
    void reserve(int64_t layer, int64_t capacity);
    std::vector<Layer> layers_;
    int64_t next_position_ = 0;
    int64_t n_kv_heads_ = 0, head_dim_ = 0;
    at::TensorOptions options_;
};

}  // namespace varrate
