#pragma once
// Water-filling of a rank budget over coded tokens (paper eq. 5, Algorithm 1 lines 6-11), vectorised:
// r_t = clip(r_min + lambda * s_t, r_min, R) with sum_t r_t = B, lambda found from sorted saliences and
// prefix sums in O(n log n) with a constant number of tensor ops (no iteration, no host sync).
#include <cstdint>

#include <ATen/core/Tensor.h>

namespace varrate {

// Min-max normalisation to [0, 1]; a constant signal (max == min) becomes all ones (uniform ranks).
at::Tensor normalise_salience(const at::Tensor& s);  // [n] -> [n] fp32

// What water-filling needs of a signal whatever the budget: the signal (fp64, clamped at 0), sorted in
// decreasing order, with suffix sums. Kept by an analysis that many budgets allocate on.
struct WaterFillSignal {
    at::Tensor s;       // [n] fp64
    at::Tensor sorted;  // [n] fp64, decreasing
    at::Tensor suffix;  // [n] fp64, suffix[k] = sum_{i >= k} sorted[i]
};
WaterFillSignal water_fill_signal(const at::Tensor& s_hat);

// Real-valued levels. When every positive-salience token is capped at R and budget is left, the rest is
// spread evenly over the zero-salience tokens (Algorithm 1 would leave it unspent). Requires
// r_min * n <= B <= R * n. Returns double.
at::Tensor water_fill_levels(const at::Tensor& s_hat, int64_t budget, int64_t r_min,
                             int64_t rank_cap);  // [n]
at::Tensor water_fill_levels(const WaterFillSignal& signal, int64_t budget, int64_t r_min, int64_t rank_cap);

// Integer ranks with sum exactly B: floor, then +1 to the (B - sum) tokens with the largest fractional
// parts (ties to the earlier position), never above R (and -1 from the smallest ones should rounding
// overshoot, never below r_min).
at::Tensor integer_ranks(const at::Tensor& levels, int64_t budget, int64_t r_min,
                         int64_t rank_cap);  // [n] int64

// Both steps: [n] salience in [0, 1] -> [n] int64 ranks with sum B.
at::Tensor water_fill(const at::Tensor& s_hat, int64_t budget, int64_t r_min, int64_t rank_cap);
at::Tensor water_fill(const WaterFillSignal& signal, int64_t budget, int64_t r_min, int64_t rank_cap);

}  // namespace varrate
