#pragma once
// Several KV caches decoded in lock-step, one row each (e.g. one per compression method and budget): the
// dense half of every layer then runs once over all rows, which is most of a decoding step's cost on small
// models. Per layer one buffer holds row b's own entries followed by the entries the batch appends together,
// padded to the longest row:
//   [B, n_kv_head, max_b(own_b) + capacity, head_dim]; row b uses columns [0, own_b + appended).
// Attention (gqa_rows_attention) masks each row's columns beyond its own.
#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "models/kv_cache.h"

namespace varrate {

class BatchKVCache {
  public:
    // What a cache's compressed prefixes (KVCache::prefix) become in the batch: kept, and attended through
    // (the compressed store: what decoding reads by default), or rebuilt dense once.
    enum class PrefixMode { Keep, Reconstruct };
    // Copies `caches` (non-empty; the same layer count, head shape, dtype and device; layers may hold
    // different lengths) with room for `capacity` appended entries per row.
    BatchKVCache(const std::vector<const KVCache*>& caches, int64_t capacity,
                 PrefixMode mode = PrefixMode::Keep);

    int64_t batch_size() const { return static_cast<int64_t>(positions_.size()); }
    int64_t n_layer() const { return static_cast<int64_t>(layers_.size()); }
    // Entries row b has appended to a layer.
    int64_t appended(int64_t layer, int64_t b) const { return layers_[layer].appended[b]; }
    // RoPE position of row b's next appended entry, given `appended` entries so far.
    int64_t position(int64_t b, int64_t appended) const { return positions_[b] + appended; }

    // Forgets row b's appended entries past the first `appended` in every layer (a draft it rejected).
    void truncate(int64_t b, int64_t appended);
    // A batch of some rows only (copies).
    BatchKVCache select(const std::vector<int64_t>& rows) const;

    // Appends [B, n_kv_head, n, head_dim] to one layer, each row after its own entries (n <= what is left of
    // the capacity).
    void append(int64_t layer, const at::Tensor& keys, const at::Tensor& values);
    // The layer's buffer up to the longest row's last entry: [B, n_kv_head, max_b(seen_b), head_dim].
    at::Tensor keys(int64_t layer) const;
    at::Tensor values(int64_t layer) const;
    // Per row, the columns in use: own entries + appended ones (after the row's prefix, if any).
    std::vector<int64_t> seen(int64_t layer) const;
    // Row b's compressed prefix of a layer (its entries come before the buffer's columns), or null.
    const LayerPrefix* prefix(int64_t layer, int64_t b) const { return layers_[layer].prefixes[b].get(); }

  private:
    BatchKVCache() = default;
    struct Layer {
        at::Tensor k, v;  // [B, n_kv_head, longest own + capacity, head_dim]
        std::vector<std::shared_ptr<const LayerPrefix>> prefixes;  // per row (null: none)
        std::vector<int64_t> lengths;                              // own entries per row (after its prefix)
        std::vector<int64_t> appended;                             // appended entries per row
    };
    std::vector<Layer> layers_;
    std::vector<int64_t> positions_;  // per row: the position the first appended entry takes
    int64_t capacity_ = 0;
};

}  // namespace varrate
