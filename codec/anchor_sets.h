#pragma once
// A coded token's anchor set stored as one number. The codec reads a token's c nearest anchors only through
// their mean, so their order carries nothing: the set is stored as its rank in the colexicographic order of
// c-subsets of the layer's n anchor ordinals (the combinatorial number system, sum_i C(a_i, i) over the
// ascending ordinals a_1 < ... < a_c), ceil(log2 C(n, c)) bits instead of c ordinals of ceil(log2 n) bits
// each: 16 bits instead of 20 for 4 of 32 anchors, about log2(c!) fewer in general.
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace varrate {

// Bits of one anchor set's rank, ceil(log2 C(n_anchors, c)) (at least 1); 0 when C(n_anchors, c) needs more
// than kMaxAnchorSetBits (the sets are then stored as ordinals, one by one).
int64_t anchor_set_bits(int64_t n_anchors, int64_t c);
// C(n_anchors, c), the number of sets (0 where anchor_set_bits is 0).
int64_t anchor_set_count(int64_t n_anchors, int64_t c);
// Ranks up to this width are exact in int64 while they are formed (i * C(a, i) stays below 2^63).
constexpr int64_t kMaxAnchorSetBits = 56;

// ordinals [n, c] (distinct in each row, any order, any integer type, in [0, n_anchors)) -> [n] int64
// colex ranks, on the ordinals' device. Needs anchor_set_bits(n_anchors, c) > 0.
at::Tensor encode_anchor_sets(const at::Tensor& ordinals, int64_t n_anchors);
// ranks [n] (integers in [0, C(n_anchors, c))) -> [n, c] int64 ordinals, ascending, on the ranks' device:
// c binary searches per row, no host data.
at::Tensor decode_anchor_sets(const at::Tensor& ranks, int64_t n_anchors, int64_t c);

}  // namespace varrate
