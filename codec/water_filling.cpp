#include "codec/water_filling.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "base/error.h"

namespace varrate {

namespace {

// Inverse permutation: where each element landed in `order`.
at::Tensor inverse_permutation(const at::Tensor& order) {
    at::Tensor inv = at::empty_like(order);
    inv.scatter_(0, order, at::arange(order.size(0), order.options()));
    return inv;
}

void check_budget(int64_t n, int64_t budget, int64_t r_min, int64_t rank_cap) {
    if (r_min < 0 || rank_cap < r_min)
        throw Error(fmt::format("water-filling: need 0 <= r_min ({}) <= R ({})", r_min, rank_cap));
    if (budget < r_min * n || budget > rank_cap * n)
        throw Error(
            fmt::format("water-filling: budget B={} outside [r_min*n, R*n] = [{}, {}] for n={} tokens",
                        budget, r_min * n, rank_cap * n, n));
}

}  // namespace

at::Tensor normalise_salience(const at::Tensor& s) {
    at::Tensor f = s.to(at::kFloat);
    if (f.numel() == 0) return f;
    at::Tensor lo = f.min(), range = f.max() - lo;
    return at::where(range > 0, (f - lo) / range, at::ones_like(f));
}

WaterFillSignal water_fill_signal(const at::Tensor& s_hat) {
    WaterFillSignal w;
    w.s = s_hat.to(at::kDouble).clamp_min(0.0);
    w.sorted = std::get<0>(at::sort(w.s, /*stable=*/true, 0, /*descending=*/true));
    w.suffix = w.sorted.flip({0}).cumsum(0).flip({0});
    return w;
}

at::Tensor water_fill_levels(const at::Tensor& s_hat, int64_t budget, int64_t r_min, int64_t rank_cap) {
    check_budget(s_hat.size(0), budget, r_min, rank_cap);
    return water_fill_levels(water_fill_signal(s_hat), budget, r_min, rank_cap);
}

at::Tensor water_fill_levels(const WaterFillSignal& signal, int64_t budget, int64_t r_min, int64_t rank_cap) {
    const at::Tensor& s = signal.s;
    const int64_t n = s.size(0);
    check_budget(n, budget, r_min, rank_cap);
    if (n == 0) return at::empty({0}, s.options().dtype(at::kDouble));
    const double B = static_cast<double>(budget), lo = static_cast<double>(r_min),
                 hi = static_cast<double>(rank_cap);

    // Regular case: the k most salient tokens are capped at R, the rest sit at r_min + lambda_k * s with
    // lambda_k = (B - k R - (n - k) r_min) / (sum of the n - k smallest saliences). The solution is the
    // smallest k whose largest uncapped token stays at or below R.
    const at::Tensor& sorted = signal.sorted;
    const at::Tensor& suffix = signal.suffix;  // suffix[k] = sum_{i >= k} sorted[i]
    const at::Tensor k = at::arange(n, s.options());
    const at::Tensor lambda = (B - k * hi - (static_cast<double>(n) - k) * lo) /
                              at::where(suffix > 0, suffix, at::ones_like(suffix));
    const at::Tensor valid = (suffix > 0).logical_and(lambda * sorted <= hi - lo);
    const at::Tensor k_star = (valid.to(at::kLong).cumsum(0) == 0).sum();  // first valid k (n when none)
    const at::Tensor lambda_star = lambda.index_select(0, k_star.clamp_max(n - 1).reshape({1}));
    const at::Tensor regular = (lo + lambda_star * s).clamp(lo, hi);

    // Saturated case: every positive-salience token at R still leaves budget; zero-salience tokens share it.
    const at::Tensor positive = s > 0;
    const at::Tensor n_pos = positive.sum().to(at::kDouble);
    const at::Tensor n_zero = static_cast<double>(n) - n_pos;
    const at::Tensor full_spend = n_pos * hi + n_zero * lo;
    const at::Tensor share = (lo + (B - full_spend) / n_zero.clamp_min(1.0)).clamp(lo, hi);
    const at::Tensor saturated = at::where(positive, at::full_like(s, hi), share.expand_as(s));

    return at::where(full_spend <= B, saturated, regular);
}

at::Tensor integer_ranks(const at::Tensor& levels, int64_t budget, int64_t r_min, int64_t rank_cap) {
    const int64_t n = levels.size(0);
    check_budget(n, budget, r_min, rank_cap);
    if (n == 0) return at::empty({0}, levels.options().dtype(at::kLong));
    const at::Tensor lv = levels.to(at::kDouble);
    const at::Tensor fl = lv.floor().clamp(static_cast<double>(r_min), static_cast<double>(rank_cap));
    const at::Tensor frac = lv - fl;
    const at::Tensor base = fl.to(at::kLong);
    const at::Tensor deficit = budget - base.sum();  // device scalar, normally in [0, n)

    // +1 to the `deficit` largest fractional parts among tokens below R (stable sort: ties to earlier
    // tokens).
    const at::Tensor add_key = at::where(fl < static_cast<double>(rank_cap), frac, at::full_like(frac, -1.0));
    const at::Tensor add_order = std::get<1>(at::sort(add_key, /*stable=*/true, 0, /*descending=*/true));
    const at::Tensor add = inverse_permutation(add_order) < deficit;
    // -1 from the smallest fractional parts above r_min, only if rounding overshot (deficit < 0).
    const at::Tensor sub_key = at::where(fl > static_cast<double>(r_min), frac, at::full_like(frac, 2.0));
    const at::Tensor sub_order = std::get<1>(at::sort(sub_key, /*stable=*/true, 0, /*descending=*/false));
    const at::Tensor sub = inverse_permutation(sub_order) < -deficit;
    return base + add.to(at::kLong) - sub.to(at::kLong);
}

at::Tensor water_fill(const at::Tensor& s_hat, int64_t budget, int64_t r_min, int64_t rank_cap) {
    return integer_ranks(water_fill_levels(s_hat, budget, r_min, rank_cap), budget, r_min, rank_cap);
}

at::Tensor water_fill(const WaterFillSignal& signal, int64_t budget, int64_t r_min, int64_t rank_cap) {
    return integer_ranks(water_fill_levels(signal, budget, r_min, rank_cap), budget, r_min, rank_cap);
}

}  // namespace varrate
