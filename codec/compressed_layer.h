#pragma once
// A VarRate / flat layer held compressed, at the size its budget accounts for, and attended without
// rebuilding the L x D cache:
//   exact tokens (anchors, then the rest of the window)  keys pre-RoPE and values at cache precision;
//   coded tokens (every other position, ascending)       the token's anchor set (one combination number,
//                                                         codec/anchor_sets.h, or c ordinals) and its rank
//                                                         (none when the ranks are uniform), each packed at
//                                                         the bits it needs (codec/footprint.h), and its
//                                                         r_t coefficients, ragged in one flat array (at
//                                                         cache precision, or b-bit codes packed with a
//                                                         scale and minimum per group of 32);
//   the layer's basis rows (shared: model-level or self-calibrated) are held apart and not counted here.
// Positions are not stored: they follow from the layout (L, stride, window).
// Attention (attend) factorises the values,
//   sum_t p_t v_t = sum_t p_t vbar_t + V_v^T (sum_t p_t c_t),
// where vbar_t is the mean of t's anchors (the weights p_t / c scatter onto the anchors), and rebuilds keys
// block by block of coded tokens into a bounded scratch (RoPE does not commute with the basis): mean of
// the anchors' keys plus V_k^T c_t, rotated at the token's position, scored, discarded.
// Compute is fp32 whatever the cache dtype; the same arithmetic serves reconstruct().
// Selective attention (select_tokens > 0, after ShadowKV and Quest): the store also holds one landmark per KV
// head and chunk of landmark_chunk coded tokens, charged to the budget: the channel-wise minimum and maximum
// of the chunk's post-RoPE keys (Quest's bounds: q . k <= sum_d max(q_d min_d, q_d max_d) for every key of
// the chunk; ShadowKV's mean key lost the needles, see docs/DEVIATIONS.md). A step scores the landmarks'
// bounds, takes per KV head the select_tokens / landmark_chunk chunks with the most softmax mass over its
// queries, and attends over the exact rows, those chunks' coded tokens and the tail only; the values stay
// factorised over the selected tokens on CUDA, where every selected chunk's keys are rebuilt each step (fixed
// shapes, no host read). On the CPU the rebuilt keys and values of (KV head, chunk) pairs are kept across
// steps in a bounded cache (twice one step's selection, at the cache dtype as a dense cache holds them), so a
// step rebuilds only the chunks it newly selects and attends densely over what it selected.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "models/kv_cache.h"

namespace varrate {

class CompressedLayer : public LayerPrefix {
  public:
    struct Parts {
        int64_t layer = 0, n_tokens = 0, n_kv_head = 0, head_dim = 0;
        int64_t stride = 0, window = 0;
        at::Tensor exact_keys;    // [n_kv_head, n_exact, head_dim] pre-RoPE, anchors first (cache dtype)
        at::Tensor exact_values;  // [n_kv_head, n_exact, head_dim]
        int64_t anchors = 0;      // c: anchor ordinals per coded token
        int64_t index_bits = 0;   // bits of one packed ordinal (>= anchor_index_bits(n_anchors))
        int64_t set_bits = 0;     // > 0: each token's anchor set is one number of these bits; 0: c ordinals
        int64_t rank_bits = 0;    // bits of one packed rank; 0: uniform ranks (rank_total over the tokens)
        int64_t rank_total = 0;   // with rank_bits 0: the sum of the ranks (each total / n, +1 for the first
                                  // total mod n tokens)
        // [packed_bytes(n_coded, set_bits)] (sets) or [packed_bytes(n_coded * c, index_bits)] (ordinals,
        // token after token) uint8
        at::Tensor nearest;
        at::Tensor ranks;  // [packed_bytes(n_coded, rank_bits)] uint8 (empty for uniform ranks)
        at::Tensor
            coefficients;  // [sum ranks] cache dtype: token after token in position order (coef_bits 16)
        // Quantized coefficients (coef_bits 2, 3, 4 or 8; `coefficients` then undefined): the codes of the
        // same order packed (codec/quantize.h), and the scale and minimum of each token's groups of 32 along
        // its rank.
        int64_t coef_bits = 16;
        at::Tensor codes;                   // [packed_bytes(sum ranks, coef_bits)] uint8
        at::Tensor group_scale, group_min;  // [sum over tokens of ceil(r_t / 32)] fp16, position order
        at::Tensor basis;                   // [>= max rank, D] fp32, shared (D = 2 * n_kv_head * head_dim)
        at::Tensor inv_freq;                // [head_dim / 2] fp32 RoPE frequencies (model-level)
        at::ScalarType rope_dtype = at::kFloat;  // the dtype the model's cos/sin tables are rounded to
        // Selective attention: coded tokens per landmark (0: no landmarks), the coded tokens a step rebuilds
        // (rounded up to whole chunks; 0: every one, the exact path) and the landmarks.
        int64_t landmark_chunk = 0;
        int64_t select_tokens = 0;
        at::Tensor
            landmarks;  // [n_kv_head, ceil(n_coded / landmark_chunk), 2, head_dim]: min, max; cache dtype
    };
    // Checks shapes and the layout; throws Error naming what does not match.
    explicit CompressedLayer(Parts parts);
    ~CompressedLayer() override;
    // Landmarks of a layer's coded tokens: the channel-wise minimum and maximum of each chunk of `chunk`
    // consecutive coded tokens' keys, keys [n_kv_head, L, head_dim] post-RoPE -> [n_kv_head,
    // ceil(n_coded / chunk), 2, head_dim] in keys' dtype.
    static at::Tensor make_landmarks(const at::Tensor& keys, int64_t stride, int64_t window, int64_t chunk);
    // The positions of the exact rows in store order for a context of L tokens: [n_exact] int64 CPU.
    static at::Tensor exact_order(int64_t n_tokens, int64_t stride, int64_t window);

    int64_t length() const override { return p_.n_tokens; }
    int64_t n_tokens() const { return p_.n_tokens; }
    int64_t n_exact() const { return p_.exact_keys.size(1); }
    int64_t n_coded() const { return n_coded_; }
    int64_t n_anchors() const { return n_anchors_; }
    int64_t sum_ranks() const { return sum_ranks_; }
    bool quantized() const { return p_.coef_bits < 16; }
    const Parts& parts() const { return p_; }
    // Ascending positions of the exact rows' order (anchors first, then the window's other tokens) and of the
    // coded tokens: [n_exact], [n_coded] int64 on the store's device.
    at::Tensor exact_positions() const;
    at::Tensor coded_positions(int64_t begin, int64_t count) const;
    // Coded ordinals (any shape, int64) -> their positions in a layout of anchors every `stride`.
    static at::Tensor coded_position_of(const at::Tensor& ordinals, int64_t stride);
    // Coded tokens [begin, begin + count): their anchor ordinals [count, c] and ranks [count], int64 on the
    // store's device, unpacked from the streams.
    at::Tensor nearest(int64_t begin, int64_t count) const;
    at::Tensor ranks(int64_t begin, int64_t count) const;
    // Packs ordinals [n_coded, c] and ranks [n_coded] (any integer type, on any device) into a store's
    // streams at the widths the budget counts (codec/footprint.h's scheme): anchor_set_stream_bits or
    // anchor_index_bits, and rank_bits_for(rank_cap, uniform_ranks). Uniform ranks must be exactly the
    // uniform split of their sum (checked, one host read).
    static void pack_metadata(Parts& parts, const at::Tensor& nearest, const at::Tensor& ranks,
                              int64_t n_anchors, int64_t rank_cap, bool uniform_ranks = false);

    // Bytes of every tensor the store holds (basis and RoPE frequencies apart: shared by all contexts).
    int64_t resident_bytes() const override;
    int64_t basis_bytes() const;
    // Coefficient slots the key rebuild multiplies: each block padded to its widest rank (>= sum_ranks()).
    int64_t padded_scalars() const;
    // The most scratch attend() allocates at once for n_q queries of n_head heads and n_tail tail entries.
    int64_t scratch_bytes(int64_t n_head, int64_t n_q, int64_t n_tail) const;

    // Selective attention: whether attend() selects chunks, the chunks, and how many each KV head takes.
    bool selective() const { return p_.select_tokens > 0 && p_.landmark_chunk > 0 && n_coded_ > 0; }
    int64_t n_chunks() const { return p_.landmarks.defined() ? p_.landmarks.size(1) : 0; }
    int64_t chunks_per_head() const;
    // The chunks post-RoPE queries q [n_head, n_q, head_dim] select: [n_kv_head, chunks_per_head()] int64
    // ascending, on the store's device.
    at::Tensor select_chunks(const at::Tensor& q, double scale) const;
    // The same store (tensors shared) attending with another selection; 0 is the exact path.
    std::shared_ptr<const CompressedLayer> with_selection(int64_t select_tokens) const;
    struct ChunkCacheStats {
        int64_t lookups = 0, hits = 0;  // (KV head, chunk) pairs a step selected, and found rebuilt
        int64_t capacity_bytes = 0;     // the cache's bound (0 before the first selective step, or on CUDA)
    };
    ChunkCacheStats chunk_cache_stats() const;
    // Whether CPU stores use the chunk cache (process-wide; default on, VARRATE_CHUNK_CACHE=off turns it
    // off): off, a CPU step takes the CUDA path (every selected key rebuilt, values factorised), to measure
    // the cache and to test that path without a GPU.
    static bool chunk_cache_enabled();
    static void set_chunk_cache_enabled(bool on);
    // Bytes one decoding step reads from the store: all of it on the exact path; on the selective path the
    // landmarks, the exact rows, the rank stream and at most the selected tokens' anchor sets and
    // coefficients.
    int64_t step_bytes() const;

    // Attention of post-RoPE queries q [n_head, n_q, head_dim] over the compressed prefix followed by `tail`
    // ([n_kv_head, n_tail, head_dim] post-RoPE entries appended after it, n_tail >= n_q: the queries' own
    // entries are its last n_q, causal among themselves). Returns [n_head, n_q, head_dim] in q's dtype.
    at::Tensor attend(const at::Tensor& q, const at::Tensor& tail_keys, const at::Tensor& tail_values,
                      double scale) const override;
    // The dense layer this store stands for: keys post-RoPE, values, [n_kv_head, L, head_dim] at cache dtype.
    LayerKV reconstruct() const override;

    static constexpr int64_t kBlock = 256;  // coded tokens per key-reconstruction block

  private:
    struct Block {
        int64_t begin = 0, count = 0;  // coded ordinals
        int64_t coef_offset = 0;       // into coefficients (or codes)
        int64_t group_offset = 0;      // into group_scale / group_min (quantized)
        int64_t width = 0;             // the block's largest rank
        int64_t n_coef = 0;            // the block's coefficients (sum of its ranks)
    };
    // The anchors' joint vectors [n_anchor, D] fp32 (pre-RoPE keys, values), which the coded tokens' means
    // read.
    at::Tensor anchor_vectors() const;
    // Quantized coefficients of n tokens padded to W, dequantized: their codes [n * W] (slot order), each
    // token's first group gstart [n], the slot index along the rank i [1, W] and the kept slots keep [n, W].
    at::Tensor dequantize_padded(const at::Tensor& codes, const at::Tensor& gstart, const at::Tensor& i,
                                 const at::Tensor& keep) const;
    // The block's coefficients padded to its width: [count, width] fp32, zero past each token's rank.
    at::Tensor padded_coefficients(const Block& b) const;
    // The block's keys and values pre-RoPE, [count, D] fp32 (values only when with_values).
    // near_all: every coded token's anchor ordinals [n_coded, c] (nearest(0, n_coded), decoded once a call).
    at::Tensor joint_rows(const Block& b, const at::Tensor& near_all, const at::Tensor& anchors_joint,
                          bool with_values) const;
    // cos/sin [n, head_dim] fp32 (rounded through rope_dtype) for positions [n] int64.
    std::pair<at::Tensor, at::Tensor> rope_tables(const at::Tensor& positions) const;

    // The exact rows' keys rotated, [n_kv_head, n_exact, head_dim] fp32: made once and kept with the chunk
    // cache (scratch, not the store's bytes).
    at::Tensor rotated_exact_keys() const;
    // Both paths' exact rows and tail: their columns of scores [G, g * n_q, n_exact | ... | n_tail] (the
    // exact rows rotated, the tail's future masked), and the probabilities p's weighted exact and tail
    // values.
    void score_exact_and_tail(const at::Tensor& qf, const at::Tensor& tail_keys, int64_t n_q,
                              at::Tensor& scores) const;
    at::Tensor exact_and_tail_output(const at::Tensor& p, const at::Tensor& tail_values) const;
    // Selective attention's parts. Coded ordinals `tokens` [n] -> anchor ordinals [n, c], and coefficients
    // padded to `width` [n, width] fp32 (r_all / start_all: every coded token's rank and first coefficient).
    at::Tensor nearest_at(const at::Tensor& tokens) const;
    at::Tensor coefficients_at(const at::Tensor& tokens, const at::Tensor& r_all, const at::Tensor& start_all,
                               int64_t width) const;
    // Rows of KV heads `heads` [h] at coded ordinals tokens [h, m] from their anchor ordinals [h, m, c] and
    // padded coefficients [h, m, w]: post-RoPE keys [h, m, head_dim] fp32, and values (with_values).
    std::pair<at::Tensor, at::Tensor> rebuild_rows(const at::Tensor& heads, const at::Tensor& tokens,
                                                   const at::Tensor& near, const at::Tensor& coefs,
                                                   bool with_values) const;
    // Rows of one width class to rebuild into the chunk cache: per KV head, coded ordinals and cache rows;
    // then (lay_out) the heads that have some, each padded to the longest list, flat, and which rows are
    // real.
    struct RebuildClass {
        std::vector<std::vector<int64_t>> tokens, dest;
        std::vector<int64_t> heads, flat_tokens, flat_dest, real;
        int64_t longest = 0;
        void lay_out();
    };
    // near: the anchor ordinals of rc.flat_tokens, [n, c].
    void rebuild_class(int64_t width, const RebuildClass& rc, const at::Tensor& near, const at::Tensor& r_all,
                       const at::Tensor& start_all) const;
    // The selected chunks' keys and values [n_kv_head, kc * chunk, head_dim] fp32 through the chunk cache.
    std::pair<at::Tensor, at::Tensor> cached_rows(const at::Tensor& chunks) const;
    at::Tensor select_chunks_grouped(const at::Tensor& qf, double scale) const;  // qf [G, g * n_q, hd] fp32
    at::Tensor attend_selective(const at::Tensor& qf, const at::Tensor& tail_keys,
                                const at::Tensor& tail_values, double scale, int64_t n_q) const;

    Parts p_;
    int64_t n_anchors_ = 0, n_coded_ = 0, c_ = 0, dim_ = 0, sum_ranks_ = 0, max_width_ = 0;
    std::vector<Block> blocks_;
    struct ChunkCache;
    static std::shared_ptr<ChunkCache> new_chunk_cache();  // shared_ptr: the type is complete in one file
    std::shared_ptr<ChunkCache> cache_;  // selective attention's rebuilt chunks (CPU), guarded by its mutex
};

// How a cache's compressed stores are attended, said by `varrate ask` and the app: "" when no layer is a
// CompressedLayer, else "exact (...)" or "selective (...)" with the selection.
std::string store_attention_summary(const std::vector<std::shared_ptr<const LayerPrefix>>& stores);

}  // namespace varrate
