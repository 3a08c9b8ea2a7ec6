#include "models/batch_cache.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <string>

#include "base/error.h"

namespace varrate {

BatchKVCache::BatchKVCache(const std::vector<const KVCache*>& caches, int64_t capacity, PrefixMode mode)
    : capacity_(capacity) {
    if (caches.empty()) throw Error("BatchKVCache: no caches");
    if (capacity < 0) throw Error("BatchKVCache: the capacity must not be negative");
    // Reconstruct once: a compressed prefix is rebuilt dense here, and the batch reads every row as tensors.
    std::vector<KVCache> densified;
    densified.reserve(caches.size());
    std::vector<const KVCache*> rows = caches;
    if (mode == PrefixMode::Reconstruct)
        for (const KVCache*& c : rows)
            if (c->has_prefix()) c = &densified.emplace_back(c->densified());
    const KVCache& first = *rows.front();
    const int64_t B = static_cast<int64_t>(caches.size()), n_layer = first.n_layer();
    for (int64_t b = 0; b < B; ++b)
        if (rows[b]->n_layer() != n_layer)
            throw Error("BatchKVCache: cache " + std::to_string(b) + " has " +
                        std::to_string(rows[b]->n_layer()) + " layers, cache 0 has " +
                        std::to_string(n_layer));
    for (const KVCache* c : rows) positions_.push_back(c->next_position());
    layers_.resize(static_cast<size_t>(n_layer));
    for (int64_t l = 0; l < n_layer; ++l) {
        Layer& layer = layers_[l];
        // A kept prefix stays with its row; the buffer holds the dense entries after it.
        for (const KVCache* c : rows) {
            layer.prefixes.push_back(c->prefix_shared(l));
            layer.lengths.push_back(c->length(l) - c->prefix_length(l));
        }
        layer.appended.assign(static_cast<size_t>(B), 0);
        const int64_t longest = *std::max_element(layer.lengths.begin(), layer.lengths.end());
        const at::Tensor k0 = first.tail_keys(l);  // [n_kv_head, n, head_dim]
        // Zeros: columns past a row's own are masked, but 0 x NaN from stale memory would still poison it.
        layer.k = at::zeros({B, k0.size(0), longest + capacity, k0.size(2)}, k0.options());
        layer.v = at::zeros_like(layer.k);
        for (int64_t b = 0; b < B; ++b) {
            const int64_t n = layer.lengths[b];
            if (n == 0) continue;
            const at::Tensor k = rows[b]->tail_keys(l), v = rows[b]->tail_values(l);
            if (k.size(0) != k0.size(0) || k.size(2) != k0.size(2) || k.scalar_type() != k0.scalar_type() ||
                k.device() != k0.device())
                throw Error("BatchKVCache: cache " + std::to_string(b) + " layer " + std::to_string(l) +
                            " differs from cache 0 in head shape, dtype or device");
            layer.k[b].narrow(1, 0, n).copy_(k);
            layer.v[b].narrow(1, 0, n).copy_(v);
        }
    }
}

void BatchKVCache::append(int64_t layer, const at::Tensor& keys, const at::Tensor& values) {
    if (layer < 0 || layer >= n_layer())
        throw Error("BatchKVCache::append: layer " + std::to_string(layer) + " out of range");
    Layer& l = layers_[layer];
    if (keys.dim() != 4 || keys.size(0) != batch_size() || !values.sizes().equals(keys.sizes()))
        throw Error("BatchKVCache::append: expects keys and values [" + std::to_string(batch_size()) +
                    ", n_kv_head, n, head_dim]");
    const int64_t n = keys.size(2);
    for (int64_t b = 0; b < batch_size(); ++b)
        if (l.appended[b] + n > capacity_)
            throw Error("BatchKVCache::append: " + std::to_string(l.appended[b] + n) +
                        " appended entries exceed the " + std::to_string(capacity_) + " reserved");
    const std::vector<int64_t> at_column = seen(layer);
    if (std::equal(at_column.begin() + 1, at_column.end(), at_column.begin())) {
        l.k.narrow(2, at_column[0], n).copy_(keys);  // every row continues at the same column
        l.v.narrow(2, at_column[0], n).copy_(values);
    } else {
        for (int64_t b = 0; b < batch_size(); ++b) {
            l.k[b].narrow(1, at_column[b], n).copy_(keys[b]);
            l.v[b].narrow(1, at_column[b], n).copy_(values[b]);
        }
    }
    for (int64_t& a : l.appended) a += n;
}

void BatchKVCache::truncate(int64_t b, int64_t appended) {
    if (b < 0 || b >= batch_size())
        throw Error("BatchKVCache::truncate: row " + std::to_string(b) + " out of range");
    for (Layer& l : layers_) {
        if (appended < 0 || appended > l.appended[b])
            throw Error("BatchKVCache::truncate: row " + std::to_string(b) + " holds " +
                        std::to_string(l.appended[b]) + " appended entries, not " + std::to_string(appended));
        l.appended[b] = appended;
    }
}

BatchKVCache BatchKVCache::select(const std::vector<int64_t>& rows) const {
    if (rows.empty()) throw Error("BatchKVCache::select: no rows");
    BatchKVCache out;
    out.capacity_ = capacity_;
    for (int64_t b : rows) {
        if (b < 0 || b >= batch_size())
            throw Error("BatchKVCache::select: row " + std::to_string(b) + " out of range");
        out.positions_.push_back(positions_[b]);
    }
    const at::Tensor index = at::tensor(rows, at::kLong);
    for (const Layer& l : layers_) {
        Layer o;
        const at::Tensor on_device = index.to(l.k.device());
        o.k = l.k.index_select(0, on_device);
        o.v = l.v.index_select(0, on_device);
        for (int64_t b : rows) {
            o.prefixes.push_back(l.prefixes[b]);
            o.lengths.push_back(l.lengths[b]);
            o.appended.push_back(l.appended[b]);
        }
        out.layers_.push_back(std::move(o));
    }
    return out;
}

at::Tensor BatchKVCache::keys(int64_t layer) const {
    const std::vector<int64_t> s = seen(layer);
    return layers_[layer].k.narrow(2, 0, *std::max_element(s.begin(), s.end()));
}

at::Tensor BatchKVCache::values(int64_t layer) const {
    const std::vector<int64_t> s = seen(layer);
    return layers_[layer].v.narrow(2, 0, *std::max_element(s.begin(), s.end()));
}

std::vector<int64_t> BatchKVCache::seen(int64_t layer) const {
    const Layer& l = layers_[layer];
    std::vector<int64_t> out = l.lengths;
    for (size_t b = 0; b < out.size(); ++b) out[b] += l.appended[b];
    return out;
}

}  // namespace varrate
