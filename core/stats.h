#pragma once
// Confidence intervals for the accuracies the sweeps report. A NIAH cell holds a handful of documents, so a
// bare "80 %" hides whether it is 4 of 5 or 400 of 500; every accuracy carries a 95 % interval instead.
// Qt-free and LibTorch-free: plain arithmetic on counts.
#include <cstdint>
#include <vector>

namespace varrate {

// The two-sided 95 % normal quantile (Phi^-1(0.975), to the 7 digits the literature quotes).
inline constexpr double kZ95 = 1.959964;

struct Interval {
    double low = 0, high = 1;
};

// Wilson's score interval for `successes` out of `n` Bernoulli trials. Unlike the normal (Wald) interval it
// stays inside [0, 1] and is not empty at 0/n or n/n, which is where small NIAH cells usually sit. n = 0
// gives {0, 1}: no documents, no information (never NaN). The ends are exact at 0/n (low = 0) and n/n
// (high = 1). Throws Error when successes is outside [0, n] or z is not positive.
Interval wilson_interval(int64_t successes, int64_t n, double z = kZ95);

// The median of `values` (the mean of the middle two for an even count); 0 when empty. The benchmarks report
// medians of repeated runs.
double median(std::vector<double> values);

}  // namespace varrate
