#include "models/attention_fused.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "base/error.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define VARRATE_FUSED_X86 1
#include <immintrin.h>
#endif

namespace varrate {

#ifdef VARRATE_FUSED_X86

// Everything below is built for AVX2 + FMA whatever the build's target; fused_attention_supported checks the
// CPU before any of it runs.
#pragma GCC push_options
#pragma GCC target("avx2,fma")

namespace {

constexpr int64_t kPanel = 16;      // keys per packed panel: two 8-float registers wide
constexpr int kScoreRows = 6;       // a 6 x 16 score tile: 12 accumulators of the 16 registers
constexpr int kValueRows = 3;       // 3 rows x 32 output columns: 12 accumulators
constexpr int kValueRegisters = 4;  // 32 columns

// exp(x) for x <= 0, 8 lanes: the online-softmax step's exp (models/online_softmax.cpp, Cephes' expf), the
// same operations in the same order; 0 below -87 and at -inf.
inline __m256 exp8_nonpositive(__m256 x) {
    const __m256 xc = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    const __m256 shifter = _mm256_set1_ps(12582912.0f);
    const __m256 t = _mm256_fmadd_ps(xc, _mm256_set1_ps(1.44269504088896341f), shifter);
    const __m256 n = _mm256_sub_ps(t, shifter);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r), _mm256_set1_ps(1.0f));
    const __m256i bits = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_sub_epi32(_mm256_castps_si256(t), _mm256_set1_epi32(0x4B400000)),
                         _mm256_set1_epi32(127)),
        23);
    const __m256 e = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
    return _mm256_and_ps(e, _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GE_OQ));
}

// n floats of buf from a 64-byte boundary: unaligned 32-byte loads that straddle cache lines cost a quarter
// of the kernel's speed (measured: 48 against 62 GFLOP/s on one Zen 3 core, depending on where malloc put
// it).
float* aligned_buffer(std::vector<float>& buf, int64_t n) {
    constexpr size_t kAlign = 64 / sizeof(float);
    buf.resize(static_cast<size_t>(n) + kAlign);
    const auto address = reinterpret_cast<uintptr_t>(buf.data());
    return buf.data() + (kAlign - address / sizeof(float) % kAlign) % kAlign;
}

// Lanes [0, n) of 8 set, for the tail of a row.
inline __m256i lanes_below(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

inline float horizontal_max(__m256 x) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

inline float horizontal_sum(__m256 x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// Keys [0, n) of a block, transposed into panels of 16: packed[p][d][c] = key (16 p + c), component d; the
// columns past n are 0. [panels, head_dim, 16]
void pack_keys(const float* k, int64_t n, int64_t hd, float* packed) {
    const int64_t panels = (n + kPanel - 1) / kPanel;
    for (int64_t p = 0; p < panels; ++p) {
        float* dst = packed + p * hd * kPanel;
        const int64_t cols = std::min(kPanel, n - p * kPanel);
        for (int64_t c = 0; c < cols; ++c) {
            const float* key = k + (p * kPanel + c) * hd;
            for (int64_t d = 0; d < hd; ++d) dst[d * kPanel + c] = key[d];
        }
        for (int64_t c = cols; c < kPanel; ++c)
            for (int64_t d = 0; d < hd; ++d) dst[d * kPanel + c] = 0.0f;
    }
}

// s[r][0, 16) = q[r] . keys of one panel, for R rows.
template <int R>
void score_tile(const float* q, int64_t hd, const float* panel, float* s, int64_t lds) {
    __m256 lo[R], hi[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
    for (int64_t d = 0; d < hd; ++d) {
        const __m256 b0 = _mm256_loadu_ps(panel + d * kPanel), b1 = _mm256_loadu_ps(panel + d * kPanel + 8);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const __m256 a = _mm256_broadcast_ss(q + r * hd + d);
            lo[r] = _mm256_fmadd_ps(a, b0, lo[r]);
            hi[r] = _mm256_fmadd_ps(a, b1, hi[r]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        _mm256_storeu_ps(s + r * lds, lo[r]);
        _mm256_storeu_ps(s + r * lds + 8, hi[r]);
    }
}

template <int R>
void score_rows(const float* q, int64_t hd, const float* packed, int64_t panel_begin, int64_t panel_end,
                float* s, int64_t lds) {
    for (int64_t p = panel_begin; p < panel_end; ++p)
        score_tile<R>(q, hd, packed + p * hd * kPanel, s + p * kPanel, lds);
}

// o[r][0, 8 W) = o[r][0, 8 W) * alpha[r] + sum over j in [0, n) of s[r][j] v[j][0, 8 W), for R rows.
template <int R, int W>
void value_tile(const float* s, int64_t lds, const float* v, int64_t hd, int64_t n, const float* alpha,
                float* o) {
    __m256 acc[R][W];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        const __m256 a = _mm256_broadcast_ss(alpha + r);
#pragma GCC unroll 4
        for (int w = 0; w < W; ++w) acc[r][w] = _mm256_mul_ps(_mm256_loadu_ps(o + r * hd + 8 * w), a);
    }
    for (int64_t j = 0; j < n; ++j) {
        __m256 b[W];
#pragma GCC unroll 4
        for (int w = 0; w < W; ++w) b[w] = _mm256_loadu_ps(v + j * hd + 8 * w);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const __m256 p = _mm256_broadcast_ss(s + r * lds + j);
#pragma GCC unroll 4
            for (int w = 0; w < W; ++w) acc[r][w] = _mm256_fmadd_ps(p, b[w], acc[r][w]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int w = 0; w < W; ++w) _mm256_storeu_ps(o + r * hd + 8 * w, acc[r][w]);
}

template <int R>
void value_rows(const float* s, int64_t lds, const float* v, int64_t hd, int64_t n, const float* alpha,
                float* o) {
    int64_t c = 0;
    for (; c + 8 * kValueRegisters <= hd; c += 8 * kValueRegisters)
        value_tile<R, kValueRegisters>(s, lds, v + c, hd, n, alpha, o + c);
    switch ((hd - c) / 8) {
        case 3:
            value_tile<R, 3>(s, lds, v + c, hd, n, alpha, o + c);
            break;
        case 2:
            value_tile<R, 2>(s, lds, v + c, hd, n, alpha, o + c);
            break;
        case 1:
            value_tile<R, 1>(s, lds, v + c, hd, n, alpha, o + c);
            break;
        default:
            break;
    }
}

// The online-softmax step of one row over its visible columns [lo, hi) of the computed columns [c_lo, c_hi):
// m <- max(m, max s), s <- exp(s - m) there and 0 elsewhere, l <- l alpha + sum s; returns alpha = exp(m_old
// - m_new), by which the row's output is rescaled (1 when the row sees nothing here: s all 0, m and l kept).
float softmax_row(float* s, int64_t c_lo, int64_t c_hi, int64_t lo, int64_t hi, float& m, float& l) {
    std::fill(s + c_lo, s + std::max(c_lo, lo), 0.0f);
    std::fill(s + std::max(lo, hi), s + c_hi, 0.0f);
    if (hi <= lo) return 1.0f;
    const int64_t n = hi - lo, full = n / 8 * 8;
    float* x = s + lo;
    const __m256 minus_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    __m256 vmax = minus_inf;
    for (int64_t j = 0; j < full; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + j));
    const __m256i tail = lanes_below(n - full);
    if (full < n)
        vmax = _mm256_max_ps(
            vmax, _mm256_blendv_ps(minus_inf, _mm256_maskload_ps(x + full, tail), _mm256_castsi256_ps(tail)));
    const float m_new = std::max(m, horizontal_max(vmax));
    const float alpha = _mm256_cvtss_f32(exp8_nonpositive(_mm256_set1_ps(m - m_new)));  // 0 when m = -inf
    const __m256 shift = _mm256_set1_ps(m_new);
    __m256 vsum = _mm256_setzero_ps();
    for (int64_t j = 0; j < full; j += 8) {
        const __m256 p = exp8_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(x + j), shift));
        _mm256_storeu_ps(x + j, p);
        vsum = _mm256_add_ps(vsum, p);
    }
    if (full < n) {
        const __m256 p =
            _mm256_and_ps(exp8_nonpositive(_mm256_sub_ps(_mm256_maskload_ps(x + full, tail), shift)),
                          _mm256_castsi256_ps(tail));
        _mm256_maskstore_ps(x + full, tail, p);
        vsum = _mm256_add_ps(vsum, p);
    }
    l = l * alpha + horizontal_sum(vsum);
    m = m_new;
    return alpha;
}

// One block of R <= 6 query rows against keys [kb, kb + kn) (packed), continuing the rows' online softmax.
template <int R>
void row_block(const float* q, int64_t r0, int64_t tokens, int64_t first_query, int64_t window, int64_t kb,
               int64_t kn, const float* packed, const float* v, int64_t hd, float* s, int64_t lds, float* m,
               float* l, float* o) {
    int64_t lo[kScoreRows], hi[kScoreRows];
    int64_t block_lo = kn, block_hi = 0;
    for (int r = 0; r < R; ++r) {
        const int64_t index = first_query + (r0 + r) % tokens - kb;  // relative to kb
        hi[r] = std::clamp<int64_t>(index + 1, 0, kn);
        lo[r] = window > 0 ? std::clamp<int64_t>(index - window + 1, 0, kn) : 0;
        if (lo[r] < hi[r]) {
            block_lo = std::min(block_lo, lo[r]);
            block_hi = std::max(block_hi, hi[r]);
        }
    }
    if (block_hi <= block_lo) return;  // no row sees this block: nothing changes
    const int64_t panel_begin = block_lo / kPanel, panel_end = (block_hi + kPanel - 1) / kPanel;
    const int64_t c_lo = panel_begin * kPanel, c_hi = panel_end * kPanel;
    score_rows<R>(q + r0 * hd, hd, packed, panel_begin, panel_end, s, lds);
    float alpha[kScoreRows];
    for (int r = 0; r < R; ++r)
        alpha[r] = softmax_row(s + r * lds, c_lo, c_hi, lo[r], hi[r], m[r0 + r], l[r0 + r]);
    // Only the values of keys some row sees are read (the rest may be anything, even NaN: 0 x NaN is NaN).
    const float* vb = v + (kb + block_lo) * hd;
    const int64_t n = block_hi - block_lo;
    float* ob = o + r0 * hd;
    int r = 0;
    for (; r + kValueRows <= R; r += kValueRows)
        value_rows<kValueRows>(s + r * lds + block_lo, lds, vb, hd, n, alpha + r, ob + r * hd);
    if (R - r == 2) value_rows<2>(s + r * lds + block_lo, lds, vb, hd, n, alpha + r, ob + r * hd);
    if (R - r == 1) value_rows<1>(s + r * lds + block_lo, lds, vb, hd, n, alpha + r, ob + r * hd);
}

// row_block<R> for R = 1 .. kScoreRows, by R.
using RowBlock = void (*)(const float*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, const float*,
                          const float*, int64_t, float*, int64_t, float*, float*, float*);
constexpr RowBlock kRowBlocks[kScoreRows + 1] = {nullptr,      row_block<1>, row_block<2>, row_block<3>,
                                                 row_block<4>, row_block<5>, row_block<6>};
static_assert(kScoreRows == 6, "kRowBlocks lists row_block<1> .. row_block<kScoreRows>");

}  // namespace

void fused_attention_task(const float* q, int64_t rows, int64_t tokens, int64_t first_query, int64_t window,
                          const float* k, const float* v, int64_t hd, int64_t key_begin, int64_t key_end,
                          int64_t key_block, float* out, FusedAttentionScratch& scratch) {
    const int64_t block = std::max<int64_t>(1, key_block);
    const int64_t lds = (block + kPanel - 1) / kPanel * kPanel;
    float* const packed = aligned_buffer(scratch.packed_keys, lds * hd);
    float* const s = aligned_buffer(scratch.scores, kScoreRows * lds);
    scratch.row_max.assign(static_cast<size_t>(rows), -std::numeric_limits<float>::infinity());
    scratch.row_sum.assign(static_cast<size_t>(rows), 0.0f);
    float* m = scratch.row_max.data();
    float* l = scratch.row_sum.data();
    std::fill(out, out + rows * hd, 0.0f);
    for (int64_t kb = key_begin; kb < key_end; kb += block) {
        const int64_t kn = std::min(block, key_end - kb);
        pack_keys(k + kb * hd, kn, hd, packed);
        // Blocks of six rows, then the remaining rows as one block of that many.
        for (int64_t r0 = 0; r0 < rows; r0 += kScoreRows)
            kRowBlocks[std::min<int64_t>(kScoreRows, rows - r0)](q, r0, tokens, first_query, window, kb, kn,
                                                                 packed, v, hd, s, lds, m, l, out);
    }
    for (int64_t r = 0; r < rows; ++r) {
        const __m256 inv = _mm256_set1_ps(1.0f / l[r]);
        for (int64_t d = 0; d < hd; d += 8)
            _mm256_storeu_ps(out + r * hd + d, _mm256_mul_ps(_mm256_loadu_ps(out + r * hd + d), inv));
    }
}

#pragma GCC pop_options

bool fused_attention_supported(int64_t head_dim) {
    static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return avx2 && head_dim > 0 && head_dim % 8 == 0;
}

#else

bool fused_attention_supported(int64_t) {
    return false;
}

void fused_attention_task(const float*, int64_t, int64_t, int64_t, int64_t, const float*, const float*,
                          int64_t, int64_t, int64_t, int64_t, float*, FusedAttentionScratch&) {
    throw Error(
        "the fused attention kernel is built for x86-64 only (check fused_attention_supported first)");
}

#endif

}  // namespace varrate
