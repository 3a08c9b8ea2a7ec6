#pragma once
// The fused fp32 kernel of one task of the blocked causal attention (models/attention.cpp) on x86-64 CPUs
// with AVX2 + FMA. Where the generic task makes three passes over a [rows, key_block] score tile (a BLAS
// matmul, the online-softmax step, a BLAS matmul), this one takes six query rows at a time against a block of
// keys held in the core's cache: their scores in registers (a 6 x 16 tile per step), the online-softmax step
// on those six rows while they are in L1, and the weighted values added into the rows' outputs, read and
// rescaled once per block. At head_dim 32 a BLAS matmul has too little depth to hide its own packing and the
// tile's round trips through memory (docs/PREFILL.md).
#include <cstdint>
#include <vector>

namespace varrate {

// Whether fused_attention_task runs on this CPU for this head size: x86-64 with AVX2 and FMA, head_dim a
// positive multiple of 8.
bool fused_attention_supported(int64_t head_dim);

// Buffers of one thread, reused from task to task.
struct FusedAttentionScratch {
    std::vector<float> packed_keys, scores, row_max, row_sum;
};

// One task: query rows q [rows, head_dim] (fp32, row-major, pre-scaled by 1/sqrt(head_dim)); row r is query
// token r % tokens, at cache index first_query + r % tokens, which sees the cache entries j <= that index
// and, when window > 0, j > index - window. k, v [key_end, head_dim]: one kv head's cache (fp32, row-major);
// the keys [key_begin, key_end) are walked key_block at a time, and nothing outside what some row may see is
// read into a result. out [rows, head_dim] receives the normalised attention output (fp32, row-major).
void fused_attention_task(const float* q, int64_t rows, int64_t tokens, int64_t first_query, int64_t window,
                          const float* k, const float* v, int64_t head_dim, int64_t key_begin,
                          int64_t key_end, int64_t key_block, float* out, FusedAttentionScratch& scratch);

}  // namespace varrate
