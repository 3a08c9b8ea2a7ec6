// Selective attention through a compressed store (codec/compressed_layer.h): landmarks, the chunks a step
// selects, the selected tokens' keys rebuilt (through a cache of rebuilt chunks on the CPU) and the attention
// over the exact rows, the selected tokens and the tail.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>

#include "base/error.h"
#include "codec/anchor_sets.h"
#include "codec/anchors.h"
#include "codec/compressed_layer.h"
#include "codec/method.h"
#include "codec/quantize.h"
#include "models/rope.h"

namespace varrate {

namespace {

int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

std::atomic<bool>& chunk_cache_switch() {
    static std::atomic<bool> on{[] {
        const char* v = std::getenv("VARRATE_CHUNK_CACHE");
        return !(v && std::string(v) == "off");
    }()};
    return on;
}

}  // namespace

bool CompressedLayer::chunk_cache_enabled() {
    return chunk_cache_switch().load();
}

void CompressedLayer::set_chunk_cache_enabled(bool on) {
    chunk_cache_switch().store(on);
}

// Rebuilt post-RoPE keys of (KV head, chunk) pairs, kept across steps: `capacity` slots of one chunk's keys,
// replaced least recently used first (never one the current step reads).
struct CompressedLayer::ChunkCache {
    std::mutex mutex;
    int64_t capacity = 0;
    // [capacity, chunk, 2, head_dim] at the cache dtype (as a dense cache holds them): keys, values.
    at::Tensor slab;
    std::unordered_map<int64_t, int64_t> slot_of;  // head * n_chunks + chunk -> slot
    std::vector<int64_t> key_of, last_use;  // per slot: its pair (-1: free), the step that last read it
    int64_t step = 0, lookups = 0, hits = 0;
    at::Tensor exact_keys;  // [G, n_exact, hd] fp32, rotated: what every step of either path scores first
};

CompressedLayer::~CompressedLayer() = default;

at::Tensor CompressedLayer::rotated_exact_keys() const {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    if (!cache_->exact_keys.defined()) {
        auto [cos, sin] = rope_tables(exact_positions());
        cache_->exact_keys = apply_rope(p_.exact_keys.to(at::kFloat), cos, sin);
    }
    return cache_->exact_keys;
}

std::shared_ptr<CompressedLayer::ChunkCache> CompressedLayer::new_chunk_cache() {
    return std::make_shared<ChunkCache>();
}

at::Tensor CompressedLayer::make_landmarks(const at::Tensor& keys, int64_t stride, int64_t window,
                                           int64_t chunk) {
    const int64_t G = keys.size(0), L = keys.size(1), hd = keys.size(2);
    const int64_t n_coded = make_anchor_layout(L, stride, window).n_coded();
    if (chunk < 1) throw Error(fmt::format("landmarks: chunk {} (expected >= 1)", chunk));
    if (n_coded == 0) return at::empty({G, 0, 2, hd}, keys.options());
    const int64_t n_chunks = ceil_div(n_coded, chunk);
    // The last chunk padded with its last token (a repeat moves neither bound).
    const at::Tensor j = at::arange(n_chunks * chunk, keys.options().dtype(at::kLong)).clamp_max(n_coded - 1);
    const at::Tensor k = keys.index_select(1, coded_position_of(j, stride)).view({G, n_chunks, chunk, hd});
    return at::stack({std::get<0>(k.min(2)), std::get<0>(k.max(2))}, 2);  // [G, n_chunks, 2, hd]
}

int64_t CompressedLayer::chunks_per_head() const {
    if (!selective()) return n_chunks();
    return std::min(n_chunks(), ceil_div(p_.select_tokens, p_.landmark_chunk));
}

std::shared_ptr<const CompressedLayer> CompressedLayer::with_selection(int64_t select_tokens) const {
    Parts p = p_;
    p.select_tokens = select_tokens;
    return std::make_shared<const CompressedLayer>(std::move(p));
}

CompressedLayer::ChunkCacheStats CompressedLayer::chunk_cache_stats() const {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    return {cache_->lookups, cache_->hits,
            cache_->slab.defined() ? cache_->slab.numel() * cache_->slab.element_size() : 0};
}

int64_t CompressedLayer::step_bytes() const {
    if (!selective()) return resident_bytes();
    auto bytes = [](const at::Tensor& t) { return t.defined() ? t.numel() * t.element_size() : 0; };
    const int64_t tokens = std::min(n_coded_, chunks_per_head() * p_.landmark_chunk * p_.n_kv_head);
    const int64_t coef =
        bytes(p_.coefficients) + bytes(p_.codes) + bytes(p_.group_scale) + bytes(p_.group_min);
    const int64_t per_token = (bytes(p_.nearest) + coef + n_coded_ - 1) / std::max<int64_t>(n_coded_, 1);
    return bytes(p_.landmarks) + bytes(p_.exact_keys) + bytes(p_.exact_values) + bytes(p_.ranks) +
           tokens * per_token;
}

at::Tensor CompressedLayer::nearest_at(const at::Tensor& tokens) const {
    const int64_t n = tokens.size(0);
    if (p_.set_bits > 0)
        return decode_anchor_sets(unpack_bits_at(p_.nearest, p_.set_bits, tokens).to(at::kLong), n_anchors_,
                                  c_);
    const at::Tensor at = (tokens * c_).unsqueeze(1) + at::arange(c_, tokens.options());
    return unpack_bits_at(p_.nearest, p_.index_bits, at.reshape({-1})).to(at::kLong).view({n, c_});
}

at::Tensor CompressedLayer::coefficients_at(const at::Tensor& tokens, const at::Tensor& r_all,
                                            const at::Tensor& start_all, int64_t width) const {
    const int64_t n = tokens.size(0), W = width;
    const auto f32 = p_.exact_keys.options().dtype(at::kFloat);
    if (W == 0 || sum_ranks_ == 0) return at::zeros({n, W}, f32);
    const at::Tensor r = r_all.index_select(0, tokens);            // [n]
    const at::Tensor i = at::arange(W, r.options()).unsqueeze(0);  // [1, W]
    const at::Tensor keep = i < r.unsqueeze(1);                    // [n, W]
    const at::Tensor slot = (start_all.index_select(0, tokens).unsqueeze(1) + i).clamp_max(sum_ranks_ - 1);
    if (!quantized())
        return p_.coefficients.index_select(0, slot.reshape({-1})).to(at::kFloat).view({n, W}).mul_(keep);
    const at::Tensor n_groups = (r_all + kQuantGroup - 1).div(kQuantGroup, "floor");
    const at::Tensor gstart = (n_groups.cumsum(0) - n_groups).index_select(0, tokens);  // [n]
    return dequantize_padded(unpack_bits_at(p_.codes, p_.coef_bits, slot.reshape({-1})), gstart, i, keep);
}

std::pair<at::Tensor, at::Tensor> CompressedLayer::rebuild_rows(const at::Tensor& heads,
                                                                const at::Tensor& tokens,
                                                                const at::Tensor& near,
                                                                const at::Tensor& coefs,
                                                                bool with_values) const {
    const int64_t h = tokens.size(0), m = tokens.size(1), hd = p_.head_dim, G = p_.n_kv_head,
                  W = coefs.size(2);
    // The mean of each token's anchors in its KV head: a mean-mode bag over the anchors' rows [G *
    // n_anchors].
    const at::Tensor rows = (near + (heads * n_anchors_).view({h, 1, 1})).reshape({-1});  // [h * m * c]
    const at::Tensor offsets = at::arange(0, h * m * c_, c_, rows.options());
    auto part = [&](const at::Tensor& exact, int64_t column) {
        const at::Tensor table = exact.narrow(1, 0, n_anchors_).to(at::kFloat).reshape({G * n_anchors_, hd});
        at::Tensor z = std::get<0>(at::embedding_bag(table, rows, offsets, false, 1)).view({h, m, hd});
        if (W > 0) {  // + V^T c_t with the head's columns of the basis: [h, W, hd]
            const at::Tensor V = p_.basis.narrow(0, 0, W)
                                     .narrow(1, column, G * hd)
                                     .to(at::kFloat)
                                     .view({W, G, hd})
                                     .permute({1, 0, 2})
                                     .index_select(0, heads);
            z.baddbmm_(coefs, V);
        }
        return z;
    };
    auto [cos, sin] = rope_tables(coded_position_of(tokens.reshape({-1}), p_.stride));
    at::Tensor keys = apply_rope(part(p_.exact_keys, 0), cos.view({h, m, hd}), sin.view({h, m, hd}));
    return {keys, with_values ? part(p_.exact_values, G * hd) : at::Tensor()};
}

void CompressedLayer::RebuildClass::lay_out() {
    // The KV heads with rows to rebuild, each padded to the longest list with its own first token (rebuilt,
    // then dropped), so that one batched product serves every head.
    size_t n = 0;
    for (const auto& t : tokens) longest = std::max(longest, static_cast<int64_t>(t.size()));
    for (size_t h = 0; h < tokens.size(); ++h) {
        if (tokens[h].empty()) continue;
        const int64_t base = static_cast<int64_t>(heads.size()) * longest;
        heads.push_back(static_cast<int64_t>(h));
        for (int64_t i = 0; i < longest; ++i, ++n) {
            const bool is_real = i < static_cast<int64_t>(tokens[h].size());
            flat_tokens.push_back(tokens[h][is_real ? i : 0]);
            if (!is_real) continue;
            real.push_back(base + i);
            flat_dest.push_back(dest[h][i]);
        }
    }
}

void CompressedLayer::rebuild_class(int64_t width, const RebuildClass& rc, const at::Tensor& near,
                                    const at::Tensor& r_all, const at::Tensor& start_all) const {
    const auto index = r_all.options();
    const int64_t n_heads = static_cast<int64_t>(rc.heads.size()), m = rc.longest, hd = p_.head_dim;
    const at::Tensor t = at::tensor(rc.flat_tokens, index);  // [n_heads * m]
    const at::Tensor coefs = coefficients_at(t, r_all, start_all, width);
    auto [k, v] = rebuild_rows(at::tensor(rc.heads, index), t.view({n_heads, m}), near.view({n_heads, m, c_}),
                               coefs.view({n_heads, m, width}), /*with_values=*/true);
    const at::Tensor rows = at::stack({k.reshape({-1, hd}), v.reshape({-1, hd})}, 1);  // [n_heads * m, 2, hd]
    cache_->slab.view({-1, 2, hd})
        .index_copy_(0, at::tensor(rc.flat_dest, index),
                     rows.index_select(0, at::tensor(rc.real, index)).to(cache_->slab.scalar_type()));
}

std::pair<at::Tensor, at::Tensor> CompressedLayer::cached_rows(const at::Tensor& chunks) const {
    const int64_t G = p_.n_kv_head, kc = chunks.size(1), C = p_.landmark_chunk, hd = p_.head_dim;
    const int64_t T = kc * C, n_ch = n_chunks();
    ChunkCache& cache = *cache_;
    std::lock_guard<std::mutex> lock(cache.mutex);
    if (cache.capacity < 2 * G * kc) {  // twice one step's selection: room for the next step's new chunks
        cache.capacity = 2 * G * kc;
        cache.slab = at::empty({cache.capacity, C, 2, hd}, p_.exact_keys.options());
        cache.slot_of.clear();
        cache.key_of.assign(cache.capacity, -1);
        cache.last_use.assign(cache.capacity, -1);
    }
    const int64_t step = ++cache.step;
    const at::Tensor host = chunks.contiguous();  // on the CPU: no copy
    const int64_t* ch = host.data_ptr<int64_t>();
    std::vector<int64_t> slots(static_cast<size_t>(G * kc), -1);
    std::vector<std::vector<int64_t>> misses(static_cast<size_t>(G));  // per head: the chunks to rebuild
    int64_t n_miss = 0;
    for (int64_t h = 0; h < G; ++h)
        for (int64_t m = 0; m < kc; ++m) {
            const int64_t key = h * n_ch + ch[h * kc + m];
            const auto found = cache.slot_of.find(key);
            if (found == cache.slot_of.end()) {
                misses[h].push_back(m);
                ++n_miss;
                continue;
            }
            slots[h * kc + m] = found->second;
            cache.last_use[found->second] = step;
            ++cache.hits;
        }
    cache.lookups += G * kc;
    if (n_miss > 0) {
        // Victims: free slots first, then the least recently read; never one this step reads.
        std::vector<int64_t> order;
        for (int64_t s = 0; s < cache.capacity; ++s)
            if (cache.last_use[s] < step) order.push_back(s);
        std::stable_sort(order.begin(), order.end(),
                         [&](int64_t a, int64_t b) { return cache.last_use[a] < cache.last_use[b]; });
        const at::Tensor r_all =
            ranks(0, n_coded_).contiguous();  // the coefficients' offsets need every rank
        const int64_t* rank = r_all.data_ptr<int64_t>();
        // Per width class (the rank rounded up to a power of two, at least 32) and KV head: the coded
        // ordinals to rebuild (the last chunk's padding clamped to the last token: masked by the caller) and
        // the slab rows they go to. A class is rebuilt padded to its own width, so a few wide tokens do not
        // pad every row, and a token's arithmetic does not depend on which others are rebuilt with it.
        std::map<int64_t, RebuildClass> classes;
        size_t next = 0;
        for (int64_t h = 0; h < G; ++h)
            for (int64_t m : misses[h]) {
                const int64_t slot = order[next++], chunk = ch[h * kc + m];
                if (cache.key_of[slot] >= 0) cache.slot_of.erase(cache.key_of[slot]);
                cache.key_of[slot] = h * n_ch + chunk;
                cache.slot_of[h * n_ch + chunk] = slot;
                cache.last_use[slot] = step;
                slots[h * kc + m] = slot;
                for (int64_t i = 0; i < C; ++i) {
                    const int64_t t = std::min(chunk * C + i, n_coded_ - 1);
                    int64_t w = 32;
                    while (w < rank[t]) w *= 2;
                    RebuildClass& rc = classes[std::min(w, max_width_)];
                    rc.tokens.resize(G);
                    rc.dest.resize(G);
                    rc.tokens[h].push_back(t);
                    rc.dest[h].push_back(slot * C + i);
                }
            }
        const at::Tensor start_all = r_all.cumsum(0) - r_all;
        // Every class's anchor sets decoded at once (a few ops per call, whatever the count).
        std::vector<int64_t> all_tokens;
        for (auto& [width, rc] : classes) {
            rc.lay_out();
            all_tokens.insert(all_tokens.end(), rc.flat_tokens.begin(), rc.flat_tokens.end());
        }
        const at::Tensor near = nearest_at(at::tensor(all_tokens, r_all.options()));  // [n, c]
        int64_t offset = 0;
        for (const auto& [width, rc] : classes) {
            const int64_t n = static_cast<int64_t>(rc.flat_tokens.size());
            rebuild_class(width, rc, near.narrow(0, offset, n), r_all, start_all);
            offset += n;
        }
    }
    const at::Tensor rows =
        cache.slab.index_select(0, at::tensor(slots, chunks.options()));  // [G*kc, C, 2, hd]
    return {rows.select(2, 0).reshape({G, T, hd}).to(at::kFloat),
            rows.select(2, 1).reshape({G, T, hd}).to(at::kFloat)};
}

at::Tensor CompressedLayer::select_chunks_grouped(const at::Tensor& qf, double scale) const {
    const int64_t G = p_.n_kv_head, n = n_chunks(), kc = chunks_per_head();
    const auto index = p_.exact_keys.options().dtype(at::kLong);
    if (kc >= n) return at::arange(n, index).unsqueeze(0).expand({G, n}).contiguous();
    // Each query's bound on its scores in each chunk, sum_d max(q_d min_d, q_d max_d) (Quest), softmax over
    // the chunks, summed over the KV head's queries: [G, n].
    const at::Tensor lm = p_.landmarks.to(at::kFloat);  // [G, n, 2, hd]
    const at::Tensor s = at::bmm(qf.clamp_min(0), lm.select(2, 1).transpose(1, 2))
                             .add_(at::bmm(qf.clamp_max(0), lm.select(2, 0).transpose(1, 2)))
                             .mul_(scale);
    const at::Tensor mass = s.softmax(2).sum(1);
    const at::Tensor top = std::get<1>(at::topk(mass, kc, 1, /*largest=*/true, /*sorted=*/false));
    return std::get<0>(at::sort(top, /*stable=*/false, /*dim=*/1, /*descending=*/false));
}

at::Tensor CompressedLayer::select_chunks(const at::Tensor& q, double scale) const {
    const int64_t G = p_.n_kv_head, hd = p_.head_dim;
    if (q.dim() != 3 || q.size(2) != hd || q.size(0) % G != 0)
        throw Error(fmt::format("compressed layer {}: queries must be [k * {}, n, {}], got {}", p_.layer, G,
                                hd, shape_str(q)));
    return select_chunks_grouped(q.to(at::kFloat).reshape({G, -1, hd}), scale);
}

at::Tensor CompressedLayer::attend_selective(const at::Tensor& qf, const at::Tensor& tail_keys,
                                             const at::Tensor& tail_values, double scale, int64_t n_q) const {
    const int64_t G = p_.n_kv_head, gq = qf.size(1), C = p_.landmark_chunk, hd = p_.head_dim;
    const at::Tensor chunks = select_chunks_grouped(qf, scale);  // [G, kc] ascending
    const int64_t kc = chunks.size(1), T = kc * C;
    // The selected coded ordinals; the last chunk's padding (clamped to the last token) is masked.
    const at::Tensor ordinal = (chunks.unsqueeze(2) * C + at::arange(C, chunks.options())).view({G, T});
    const at::Tensor valid = ordinal.lt(n_coded_);              // [G, T]
    const at::Tensor tokens = ordinal.clamp_max(n_coded_ - 1);  // [G, T]
    // CUDA: every selected key rebuilt, values factorised (fixed shapes, no host read). CPU: keys and values
    // of the selected chunks from the cache of rebuilt chunks.
    const bool cached = !qf.is_cuda() && chunk_cache_enabled();
    at::Tensor keys, values, near, coefs;
    if (cached) {
        std::tie(keys, values) = cached_rows(chunks);
    } else {
        const at::Tensor flat = tokens.reshape({-1});
        const at::Tensor r_all = ranks(0, n_coded_);
        near = nearest_at(flat).view({G, T, c_});
        coefs = coefficients_at(flat, r_all, r_all.cumsum(0) - r_all, max_width_).view({G, T, max_width_});
        keys = rebuild_rows(at::arange(G, flat.options()), tokens, near, coefs, /*with_values=*/false).first;
    }
    const int64_t n_exact = this->n_exact(), n_all = n_exact + T + tail_keys.size(1);
    at::Tensor scores = at::empty({G, gq, n_all}, qf.options());  // [G, gq, exact | selected | tail]
    score_exact_and_tail(qf, tail_keys, n_q, scores);
    {
        at::Tensor s = scores.narrow(2, n_exact, T);
        at::bmm_out(s, qf, keys.transpose(1, 2));
        s.masked_fill_(valid.logical_not().unsqueeze(1), -std::numeric_limits<float>::infinity());
    }
    scores.mul_(scale);
    const at::Tensor p = scores.softmax(2);
    at::Tensor out = exact_and_tail_output(p, tail_values);  // [G, gq, hd]
    const at::Tensor pc = p.narrow(2, n_exact, T);           // [G, gq, T]
    if (cached) return out.baddbmm_(pc, values);
    // sum_t p_t vbar_t: each selected token's weight, over c, onto its anchors in its head.
    const at::Tensor onto = near.view({G, 1, T * c_}).expand({G, gq, T * c_});
    at::Tensor w = at::zeros({G, gq, n_anchors_}, p.options());
    w.scatter_add_(2, onto, pc.repeat_interleave(c_, 2).mul(1.0 / static_cast<double>(c_)));
    out.baddbmm_(w, p_.exact_values.narrow(1, 0, n_anchors_).to(at::kFloat));
    if (max_width_ > 0) {
        // V_v^T sum_t p_t c_t over each head's selected tokens.
        const at::Tensor sum = at::bmm(pc, coefs);  // [G, gq, W]
        const at::Tensor Vv = p_.basis.narrow(0, 0, max_width_)
                                  .narrow(1, G * hd, G * hd)
                                  .to(at::kFloat)
                                  .view({max_width_, G, hd})
                                  .permute({1, 0, 2});
        out.baddbmm_(sum, Vv);
    }
    return out;
}

std::string store_attention_summary(const std::vector<std::shared_ptr<const LayerPrefix>>& stores) {
    for (const auto& st : stores) {
        const auto* c = dynamic_cast<const CompressedLayer*>(st.get());
        if (!c) continue;
        if (!c->selective()) return "exact (every coded key rebuilt each step)";
        return fmt::format(
            "selective ({} coded tokens a step per KV head, in chunks of {} chosen by landmark)",
            c->chunks_per_head() * c->parts().landmark_chunk, c->parts().landmark_chunk);
    }
    return "";
}

}  // namespace varrate
