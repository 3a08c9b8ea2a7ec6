#pragma once
// Several KV caches decoded in lock-step, one row each (e.g. one per compression method and budget): the
// dense half of every layer then runs once over all rows, which is most of a decoding step's cost on small
// models. Per layer one buffer holds row b's own entries followed by the entries the batch appends together,
// padded to the longest row:
//   [B, n_kv_head, max_b(own_b) + capacity, head_dim]; row b uses columns [0, own_b + appended).
// Attention (gqa_rows_attention) masks each row's columns beyond its own.
#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "models/kv_cache.h"

namespace varrate {

class BatchKVCache {
  public:
    // Copies `caches` (non-empty; the same layer count, head shape, dtype and device; layers may hold
    // different lengths) with room for `capacity` appended entries per row.
    BatchKVCache(const std::vector<const KVCache*>& caches, int64_t capacity);

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
    // Per row, the columns in use: own entries + appended ones.
    std::vector<int64_t> seen(int64_t layer) const;

  private:
    BatchKVCache() = default;
    struct Layer {
        at::Tensor k, v;                // [B, n_kv_head, longest own + capacity, head_dim]
        std::vector<int64_t> lengths;   // own entries per row
        std::vector<int64_t> appended;  // appended entries per row
    };
    std::vector<Layer> layers_;
    std::vector<int64_t> positions_;  // per row: the position the first appended entry takes
    int64_t capacity_ = 0;
};

}  // namespace varrate
