#include "models/online_softmax.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

// The loops below vectorise (omp simd, -fopenmp-simd); on x86-64 they are also built for AVX2 + FMA, picked
// at run time, so that a generic build runs 8-wide where the CPU can.
#if defined(__x86_64__) && defined(__GNUC__)
#define VARRATE_X86_DISPATCH 1
#endif
#define VARRATE_INLINE inline __attribute__((always_inline))

namespace varrate {

namespace {

// Cephes' expf: x = n ln2 + r with |r| <= ln2 / 2 (Cody-Waite split of ln2), exp(r) by a degree-6
// polynomial, 2^n put into the exponent bits. Branch-free, so that a loop over it vectorises; valid for
// x in [-87, 0], where 2^n stays a normal float.
VARRATE_INLINE float exp_poly(float x) {
    const float xc = x > -87.0f ? x : -87.0f;
    const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer in the low mantissa bits
    const float t = xc * 1.44269504088896341f + shifter;
    const float n = t - shifter;
    const float r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    // n + 127 in the exponent field (the bit casts as builtins: memcpy would keep the loops scalar).
    const float scale = __builtin_bit_cast(float, (__builtin_bit_cast(int32_t, t) - 0x4B400000 + 127) << 23);
    return x < -87.0f ? 0.0f : p * scale;
}

}  // namespace

float exp_nonpositive(float x) {
    return exp_poly(x);
}

namespace {

VARRATE_INLINE void step_body(float* s, int64_t rows, int64_t kn, int64_t tokens, int64_t kb,
                              int64_t first_query, int64_t window, float* m, float* l, float* o,
                              int64_t head_dim) {
    for (int64_t r = 0; r < rows; ++r) {
        float* row = s + r * kn;
        const int64_t index = first_query + r % tokens - kb;  // the query's cache index, relative to kb
        const int64_t hi = std::clamp<int64_t>(index + 1, 0, kn);
        const int64_t lo = window > 0 ? std::clamp<int64_t>(index - window + 1, 0, kn) : 0;
        if (hi <= lo) {
            std::fill(row, row + kn, 0.0f);
            continue;
        }
        float row_max = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : row_max)
        for (int64_t j = lo; j < hi; ++j) row_max = row[j] > row_max ? row[j] : row_max;
        const float m_new = std::max(m[r], row_max);
        const float alpha = exp_poly(m[r] - m_new);  // 0 on the first visible block (m = -inf)
        float sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = lo; j < hi; ++j) {
            const float p = exp_poly(row[j] - m_new);
            row[j] = p;
            sum += p;
        }
        std::fill(row, row + lo, 0.0f);
        std::fill(row + hi, row + kn, 0.0f);
        l[r] = l[r] * alpha + sum;
        m[r] = m_new;
        float* out = o + r * head_dim;
#pragma omp simd
        for (int64_t d = 0; d < head_dim; ++d) out[d] *= alpha;
    }
}

#ifdef VARRATE_X86_DISPATCH
__attribute__((target("avx2,fma"))) void step_avx2(float* s, int64_t rows, int64_t kn, int64_t tokens,
                                                   int64_t kb, int64_t first_query, int64_t window, float* m,
                                                   float* l, float* o, int64_t head_dim) {
    step_body(s, rows, kn, tokens, kb, first_query, window, m, l, o, head_dim);
}
#endif

}  // namespace

void online_softmax_step(float* s, int64_t rows, int64_t kn, int64_t tokens, int64_t kb, int64_t first_query,
                         int64_t window, float* m, float* l, float* o, int64_t head_dim) {
#ifdef VARRATE_X86_DISPATCH
    static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (avx2) return step_avx2(s, rows, kn, tokens, kb, first_query, window, m, l, o, head_dim);
#endif
    step_body(s, rows, kn, tokens, kb, first_query, window, m, l, o, head_dim);
}

}  // namespace varrate
