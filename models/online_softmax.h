#pragma once
// The online-softmax step of the blocked attention (models/attention.cpp), fused into one pass over a score
// tile: the row maxima, exp(s - max) in place with its row sums, and the rescaling of the running output. One
// loop with a vectorisable exp instead of five ATen ops over the tile: on a 2-core AVX2 CPU the ops cost as
// much as the tile's two matmuls (docs/PREFILL.md).
#include <cstdint>

namespace varrate {

// Scores s [rows, kn] (row-major, contiguous) of query rows r = (g, i), i = r % tokens, against keys kb ..
// kb + kn - 1 of the cache. Query token i sits at cache index first_query + i, and may see the keys j with
// j <= index and, when window > 0, j > index - window; s is masked accordingly (visible ranges are passed,
// not materialised). For each row: m_new = max(m, max visible s); s <- exp(s - m_new) where visible, 0
// elsewhere; l <- l * exp(m - m_new) + sum(s); o[r, :] *= exp(m - m_new); m <- m_new. m starts at -inf and l
// and o at 0; a row with nothing visible in this block is left as it was (its s set to 0).
// o: [rows, head_dim] row-major.
void online_softmax_step(float* s, int64_t rows, int64_t kn, int64_t tokens, int64_t kb, int64_t first_query,
                         int64_t window, float* m, float* l, float* o, int64_t head_dim);

// exp(x) for x <= 0 within 2 ulp, 0 below -87 (and for -inf): what the step uses, exposed for its test.
float exp_nonpositive(float x);

}  // namespace varrate
