#pragma once
// Budgets and accounted footprints (what a compressed store would hold; the runtime cache still holds
// L x D). VarRate/flat: stored scalars = D per exact token + r_t per coded token (or their b-bit codes and
// group parameters), plus each coded token's anchor set (one packed combination number, codec/anchor_sets.h)
// and its rank (packed; none for flat, whose uniform ranks follow from B and the number of coded tokens),
// plus, for a basis fitted on the very context being
// compressed (self-calibrated: a per-sequence oracle a decoder would need to receive), its R x D scalars.
// By default index (and rank) and basis bytes are charged to B, so the accounted footprint is <= kappa and
// within one scalar of it; paper_accounting charges neither (the paper's footprint, slightly above kappa). A
// basis calibrated once on other texts is shared by every context and never charged.
#include <cstdint>
#include <string>

#include "codec/method.h"

namespace varrate {

struct CodecBudget {
    int64_t n_tokens = 0, dim = 0;
    int64_t n_anchors = 0, n_exact = 0, n_coded = 0;
    int64_t rank_cap = 0;       // R clamped to D
    int64_t element_size = 0;   // bytes per cache scalar
    int64_t anchors = 0;        // c anchors per coded token
    int64_t index_bits = 0;     // bits per anchor ordinal: anchor_index_bits(n_anchors)
    int64_t set_bits = 0;       // bits per coded token's anchor set as one number; 0: c ordinals
    int64_t rank_bits = 0;      // bits per coded token's rank; 0: uniform ranks, not stored
    int64_t index_scalars = 0;  // index bytes charged to B, in scalars (0 with paper accounting)
    int64_t basis_rows = 0;     // basis rows charged: R for a self-calibrated basis, else 0
    int64_t basis_scalars = 0;  // basis_rows * D
    int64_t coef_bits = 16;     // 16: coefficients at cache precision; else quantized (bits each)
    // Selective attention (select_tokens > 0): one post-RoPE landmark key per KV head and chunk of
    // landmark_chunk coded tokens, at cache precision, charged whatever the accounting (a decoder reads
    // them).
    int64_t landmark_chunk = 0;         // 0: no landmarks
    int64_t landmark_scalars = 0;       // ceil(n_coded / landmark_chunk) * D / 2
    int64_t budget_B = 0;               // sum of the coded ranks
    double min_feasible_budget = 0;     // smallest kappa that is feasible for this L
    double min_feasible_uncharged = 0;  // the same without the basis charge (with a calibrated basis file)

    int64_t full_bytes() const { return n_tokens * dim * element_size; }
    // The per-token metadata a decoder reads, each packed at the bits it needs (codec/quantize.h's bit
    // stream): the anchor set of every coded token (one number, or c ordinals), and its rank (if stored).
    int64_t index_total_bytes() const;
    int64_t basis_bytes() const { return basis_scalars * element_size; }
    bool quantized() const { return coef_bits < 16; }
    // Bytes of the coefficients: at cache precision, or packed codes plus each group's scale and minimum.
    int64_t coefficient_bytes(int64_t sum_ranks, int64_t n_groups) const;
    // n_groups: the quantization groups, sum over coded tokens of ceil(r_t / 32) (ignored unquantized).
    int64_t stored_bytes(int64_t sum_ranks, int64_t n_groups = 0) const {
        return n_exact * dim * element_size + coefficient_bytes(sum_ranks, n_groups) + index_total_bytes() +
               basis_bytes() + landmark_scalars * element_size;
    }
};

// How the store keeps each coded token's metadata. Every bit of it is charged to the budget at the cache's
// precision, so it costs a bf16 cache twice the scalars it costs an fp32 one; at small D (the demo model's
// 128) int16 indices and ranks took a third of the coded budget at kappa 0.1 in bf16.
//   Sets (the default): the anchor set as one combination number (ceil(log2 C(n_anchors, c)) bits) and the
//     rank at ceil(log2(R + 1)) bits, none for uniform ranks (flat);
//   Ordinals (VARRATE_METADATA=ordinals): c ordinals of ceil(log2 n_anchors) bits and every rank stored,
//     cache files of format 2;
//   Int16 (VARRATE_METADATA=int16, or VARRATE_METADATA_BITS=16): int16 ordinals (int32 from 32768 anchors)
//     and ranks, format 1.
// The two older schemes are kept to measure what each step changed; every store reads all three.
enum class MetadataScheme { Sets, Ordinals, Int16 };
MetadataScheme metadata_scheme();
int64_t anchor_index_bits(int64_t n_anchors);
// Bits of one coded token's anchor set under the scheme: anchor_set_bits, or 0 for ordinals one by one.
int64_t anchor_set_stream_bits(int64_t n_anchors, int64_t c);
// A rank is in [0, R]; uniform ranks (flat) are not stored under the Sets scheme: 0 bits.
int64_t rank_bits_for(int64_t rank_cap, bool uniform_ranks = false);

// Plans one layer of VarRate/flat. Quantized coefficients (s.coef_bits < 16) are counted in bits: what the
// exact tokens, indices and basis leave of kappa x L x D scalars becomes bits, and B is the most coefficients
// whose codes and group parameters fit, reserving one partial group per coded token (so the stored bytes
// never exceed the budget). self_calibrated_basis: the basis was fitted on this very context, so its R x D
// scalars (R = min(rank, D), the rows the codec projects on) are charged unless paper_accounting. Throws
// Error for infeasible settings: kappa outside (0, 1], L too short for the anchors and the window, r_min
// above R, or B below r_min per coded token; the message names the smallest feasible kappa for this L, and
// when the charged basis is what makes kappa infeasible it says so and gives the `varrate calibrate` command
// that makes a basis file instead. A budget above R per coded token is capped (logged). uniform_ranks: the
// method gives every coded token the same rank (+1 for the first B mod n_coded), so no rank is stored.
CodecBudget plan_codec_budget(const CodecSettings& s, int64_t n_tokens, int64_t dim, int64_t element_size,
                              const std::string& who = "varrate", bool self_calibrated_basis = false,
                              bool uniform_ranks = false);

// SnapKV: tokens kept per KV head = int(L * kappa), the observation window included. Throws Error when
// that cannot hold the window or kappa is outside (0, 1]; `who` names the method in the message (Ada-KV keeps
// as many per head on average).
int64_t snapkv_kept_tokens(const CodecSettings& s, int64_t n_tokens, const std::string& who = "snapkv");

}  // namespace varrate
