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

// The fewest paired samples for which the exact two-sided sign test can give p < 0.05: all of them one way
// gives p = 2 / 2^n, below 0.05 from n = 6 on.
inline constexpr int64_t kMinPairsForSignificance = 6;
// The verdict on a paired difference (PairedComparison::significance).
enum class Significance { Significant, NotSignificant, TooFewPairs };
const char* to_string(Significance s);  // "significant", "not significant", "n too small"

// Paired comparison of two methods scored on the same samples (the paper's statistics): the mean of the
// per-sample differences a - b, a percentile bootstrap 95 % interval of that mean (`resamples` resamples of
// the n samples with replacement, seeded: the same inputs give the same interval), and an exact two-sided
// sign test over the samples where they differ (ties dropped).
struct PairedComparison {
    int64_t n = 0;
    double mean_difference = 0;
    Interval interval{0, 0};       // of the mean difference; {0, 0} when n = 0
    int64_t wins = 0, losses = 0;  // samples where a > b, a < b
    double sign_test_p = 1;        // 1 when they never differ
    // A difference counts only when the bootstrap interval excludes zero (the paper's rule) and the exact
    // sign test gives p < 0.05; with fewer than kMinPairsForSignificance pairs the test cannot, whatever the
    // scores: "n too small" (one sample, or identical differences, make the interval a point that may
    // exclude zero). No correction for multiple comparisons: each cell is its own test.
    Significance significance() const;
    bool significant() const { return significance() == Significance::Significant; }
};
// Fewer resamples than this make the percentile interval's ends noisy; commands refuse them.
inline constexpr int64_t kMinBootstrapResamples = 1000;
inline constexpr int64_t kBootstrapResamples = 10000;
inline constexpr uint64_t kBootstrapSeed = 20260512;
// Throws Error when a and b differ in length or resamples < 1.
PairedComparison paired_comparison(const std::vector<double>& a, const std::vector<double>& b,
                                   int64_t resamples = kBootstrapResamples, uint64_t seed = kBootstrapSeed);
// P(|W - m/2| >= |wins - m/2|) for W ~ Binomial(m, 1/2), m = wins + losses: the exact two-sided sign test.
double sign_test_p(int64_t wins, int64_t losses);

// The median of `values` (the mean of the middle two for an even count); 0 when empty. The benchmarks report
// medians of repeated runs.
double median(std::vector<double> values);

}  // namespace varrate
