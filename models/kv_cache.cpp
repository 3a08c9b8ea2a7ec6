#include "models/kv_cache.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <limits>
#include <string>

#include "base/error.h"

namespace varrate {

namespace {

// Smallest capacity a layer grows to: decoding one token at a time must not reallocate every step.
constexpr int64_t kMinCapacity = 256;

std::string shape_string(const at::Tensor& t) {
    std::string s = "[";
    for (int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
    return s + "]";
}

std::string prefixed_error(int64_t layer) {
    return "KVCache: layer " + std::to_string(layer) +
           " begins with a compressed prefix, whose entries are not key/value tensors (attend through it, or "
           "densify the cache)";
}

}  // namespace

KVCache::KVCache(int64_t n_layer, int64_t n_kv_head, int64_t head_dim, at::TensorOptions options)
    : layers_(static_cast<size_t>(n_layer)), n_kv_heads_(n_kv_head), head_dim_(head_dim), options_(options) {
    if (n_layer <= 0 || n_kv_head <= 0 || head_dim <= 0)
        throw Error("KVCache: n_layers, n_kv_heads and head_dim must be positive (got " +
                    std::to_string(n_layer) + ", " + std::to_string(n_kv_head) + ", " +
                    std::to_string(head_dim) + ")");
}

void mask_future_tail(at::Tensor& tail_scores, int64_t n_q, int64_t group) {
    const int64_t n_tail = tail_scores.size(2);
    const at::Tensor col = at::arange(n_tail, tail_scores.options().dtype(at::kLong));
    const at::Tensor row = at::arange(n_q, col.options()) + (n_tail - n_q);
    const at::Tensor masked = (col.unsqueeze(0) > row.unsqueeze(1)).repeat({group, 1});  // [g * n_q, n_tail]
    tail_scores.masked_fill_(masked.unsqueeze(0), -std::numeric_limits<float>::infinity());
}

void KVCache::reserve(int64_t layer, int64_t capacity) {
    Layer& l = layers_[layer];
    const int64_t current = l.k.defined() ? l.k.size(1) : 0;
    if (capacity <= current) return;
    at::Tensor k =
        at::empty({n_kv_heads_, capacity, head_dim_}, options_);  // [n_kv_head, capacity, head_dim]
    at::Tensor v = at::empty({n_kv_heads_, capacity, head_dim_}, options_);
    if (l.length > 0) {
        k.narrow(1, 0, l.length).copy_(l.k.narrow(1, 0, l.length));
        v.narrow(1, 0, l.length).copy_(l.v.narrow(1, 0, l.length));
    }
    l.k = std::move(k);
    l.v = std::move(v);
}

void KVCache::append(int64_t layer, const at::Tensor& keys, const at::Tensor& values) {
    if (layer < 0 || layer >= n_layer())
        throw Error("KVCache::append: layer " + std::to_string(layer) + " out of range [0, " +
                    std::to_string(n_layer()) + ")");
    if (keys.dim() != 3 || keys.size(0) != n_kv_heads_ || keys.size(2) != head_dim_ ||
        !values.sizes().equals(keys.sizes()))
        throw Error("KVCache::append: layer " + std::to_string(layer) + " expects keys and values [" +
                    std::to_string(n_kv_heads_) + ", n, " + std::to_string(head_dim_) + "], got keys " +
                    shape_string(keys) + " and values " + shape_string(values));
    if (keys.size(1) == 0) return;
    const LayerKV slots = extend(layer, keys.size(1));
    slots.keys.copy_(keys);
    slots.values.copy_(values);
}

LayerKV KVCache::extend(int64_t layer, int64_t n) {
    if (layer < 0 || layer >= n_layer())
        throw Error("KVCache::extend: layer " + std::to_string(layer) + " out of range [0, " +
                    std::to_string(n_layer()) + ")");
    if (n < 0) throw Error("KVCache::extend: negative entry count " + std::to_string(n));
    Layer& l = layers_[layer];
    const int64_t capacity = l.k.defined() ? l.k.size(1) : 0;
    if (l.length + n > capacity)
        reserve(layer, std::max({l.length + n, 2 * capacity, kMinCapacity}));  // geometric growth
    LayerKV slots{l.k.narrow(1, l.length, n), l.v.narrow(1, l.length, n)};
    l.length += n;
    return slots;
}

void KVCache::reserve_entries(int64_t entries) {
    for (int64_t layer = 0; layer < n_layer(); ++layer) {
        const int64_t capacity = layers_[layer].k.defined() ? layers_[layer].k.size(1) : 0;
        // Geometric past the current capacity, so that asking for a little more at every decoding step
        // does not copy the layer every step.
        if (entries > capacity) reserve(layer, std::max({entries, capacity + capacity / 2, kMinCapacity}));
    }
}

at::Tensor KVCache::keys(int64_t layer) const {
    if (prefix(layer)) throw Error(prefixed_error(layer));
    return tail_keys(layer);
}

at::Tensor KVCache::values(int64_t layer) const {
    if (prefix(layer)) throw Error(prefixed_error(layer));
    return tail_values(layer);
}

at::Tensor KVCache::tail_keys(int64_t layer) const {
    const Layer& l = layers_.at(static_cast<size_t>(layer));
    if (!l.k.defined()) return at::empty({n_kv_heads_, 0, head_dim_}, options_);
    return l.k.narrow(1, 0, l.length);
}

at::Tensor KVCache::tail_values(int64_t layer) const {
    const Layer& l = layers_.at(static_cast<size_t>(layer));
    if (!l.v.defined()) return at::empty({n_kv_heads_, 0, head_dim_}, options_);
    return l.v.narrow(1, 0, l.length);
}

void KVCache::replace(int64_t layer, const LayerKV& kv) {
    if (layer < 0 || layer >= n_layer())
        throw Error("KVCache::replace: layer " + std::to_string(layer) + " out of range [0, " +
                    std::to_string(n_layer()) + ")");
    if (!kv.keys.defined() || !kv.values.defined() || kv.keys.dim() != 3 || kv.keys.size(0) != n_kv_heads_ ||
        kv.keys.size(2) != head_dim_ || !kv.values.sizes().equals(kv.keys.sizes()))
        throw Error("KVCache::replace: layer " + std::to_string(layer) + " expects keys and values [" +
                    std::to_string(n_kv_heads_) + ", n, " + std::to_string(head_dim_) + "], got keys " +
                    (kv.keys.defined() ? shape_string(kv.keys) : "undefined") + " and values " +
                    (kv.values.defined() ? shape_string(kv.values) : "undefined"));
    const int64_t n = kv.keys.size(1);
    // Fresh buffers: the replacement may be a view of the current ones (an observer handing back the cache).
    Layer fresh;
    const int64_t capacity = std::max(n + kMinCapacity, kMinCapacity);
    fresh.k = at::empty({n_kv_heads_, capacity, head_dim_}, options_);  // [n_kv_head, capacity, head_dim]
    fresh.v = at::empty({n_kv_heads_, capacity, head_dim_}, options_);
    fresh.k.narrow(1, 0, n).copy_(kv.keys);
    fresh.v.narrow(1, 0, n).copy_(kv.values);
    fresh.length = n;
    layers_[layer] = std::move(fresh);
}

void KVCache::set_prefix(int64_t layer, std::shared_ptr<const LayerPrefix> prefix) {
    if (layer < 0 || layer >= n_layer())
        throw Error("KVCache::set_prefix: layer " + std::to_string(layer) + " out of range [0, " +
                    std::to_string(n_layer()) + ")");
    if (!prefix) throw Error("KVCache::set_prefix: layer " + std::to_string(layer) + " gets no prefix");
    Layer fresh;
    fresh.prefix = std::move(prefix);
    layers_[layer] = std::move(fresh);
}

bool KVCache::has_prefix() const {
    return std::any_of(layers_.begin(), layers_.end(), [](const Layer& l) { return l.prefix != nullptr; });
}

KVCache KVCache::densified() const {
    KVCache out(n_layer(), n_kv_heads_, head_dim_, options_);
    for (int64_t l = 0; l < n_layer(); ++l) {
        if (const LayerPrefix* p = prefix(l)) {
            const LayerKV kv = p->reconstruct();
            out.replace(l, kv);
        }
        out.append(l, tail_keys(l), tail_values(l));
    }
    out.next_position_ = next_position_;
    return out;
}

KVCache::Snapshot KVCache::snapshot() const {
    Snapshot s;
    s.lengths.reserve(layers_.size());
    for (const Layer& l : layers_) s.lengths.push_back(l.length);
    s.next_position = next_position_;
    return s;
}

void KVCache::restore(const Snapshot& s) {
    if (s.lengths.size() != layers_.size())
        throw Error("KVCache::restore: snapshot has " + std::to_string(s.lengths.size()) +
                    " layers, cache has " + std::to_string(layers_.size()));
    // Only truncation is exact: entries past a layer's current length may have been overwritten or dropped.
    for (size_t i = 0; i < layers_.size(); ++i)
        if (s.lengths[i] < 0 || s.lengths[i] > layers_[i].length)
            throw Error("KVCache::restore: layer " + std::to_string(i) + " holds " +
                        std::to_string(layers_[i].length) + " entries, the snapshot needs " +
                        std::to_string(s.lengths[i]) + " (was the layer replaced after the snapshot?)");
    for (size_t i = 0; i < layers_.size(); ++i) layers_[i].length = s.lengths[i];
    next_position_ = s.next_position;
}

void KVCache::clear() {
    for (Layer& l : layers_) {
        l.prefix.reset();
        l.length = 0;
    }
    next_position_ = 0;
}

int64_t KVCache::used_bytes() const {
    const int64_t element =
        static_cast<int64_t>(c10::elementSize(c10::typeMetaToScalarType(options_.dtype())));
    int64_t total = 0;
    for (const Layer& l : layers_) {
        total += 2 * n_kv_heads_ * l.length * head_dim_ * element;
        if (l.prefix) total += l.prefix->resident_bytes();
    }
    return total;
}

}  // namespace varrate
