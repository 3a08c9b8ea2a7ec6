#include "core/suites/stats.h"

#include <algorithm>
#include <cmath>
#include <random>

#include <fmt/format.h>

#include "base/error.h"

namespace varrate {

Interval wilson_interval(int64_t successes, int64_t n, double z) {
    if (n < 0 || successes < 0 || successes > n)
        throw Error(
            fmt::format("wilson_interval: {} successes out of {} trials is not a count", successes, n));
    if (!(z > 0)) throw Error(fmt::format("wilson_interval: z = {} must be positive", z));
    if (n == 0) return {0, 1};
    const double nn = static_cast<double>(n);
    const double p = static_cast<double>(successes) / nn;
    const double z2 = z * z;
    const double denom = 1 + z2 / nn;
    const double centre = (p + z2 / (2 * nn)) / denom;
    const double half = z * std::sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn)) / denom;
    // At 0/n and n/n centre and half are equal in exact arithmetic; rounding must not move the end off 0
    // or 1.
    Interval r;
    r.low = successes == 0 ? 0 : std::max(0.0, centre - half);
    r.high = successes == n ? 1 : std::min(1.0, centre + half);
    return r;
}

double sign_test_p(int64_t wins, int64_t losses) {
    if (wins < 0 || losses < 0) throw Error(fmt::format("sign_test_p: {} wins, {} losses", wins, losses));
    const int64_t m = wins + losses;
    if (m == 0) return 1.0;
    // 2 P(W <= min) in log space (m may be in the thousands), capped at 1 (the middle term at an even split).
    const int64_t k = std::min(wins, losses);
    double tail = 0;
    for (int64_t i = 0; i <= k; ++i)
        tail += std::exp(std::lgamma(double(m) + 1) - std::lgamma(double(i) + 1) -
                         std::lgamma(double(m - i) + 1) - double(m) * std::log(2.0));
    return std::min(1.0, 2 * tail);
}

PairedComparison paired_comparison(const std::vector<double>& a, const std::vector<double>& b,
                                   int64_t resamples, uint64_t seed) {
    if (a.size() != b.size())
        throw Error(
            fmt::format("paired_comparison: {} scores against {}: a paired comparison needs the same "
                        "samples on both sides",
                        a.size(), b.size()));
    if (resamples < 1) throw Error(fmt::format("paired_comparison: {} bootstrap resamples", resamples));
    PairedComparison r;
    r.n = static_cast<int64_t>(a.size());
    if (r.n == 0) return r;
    std::vector<double> d(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
        d[i] = a[i] - b[i];
        r.mean_difference += d[i];
        r.wins += d[i] > 0;
        r.losses += d[i] < 0;
    }
    r.mean_difference /= static_cast<double>(r.n);
    r.sign_test_p = sign_test_p(r.wins, r.losses);
    // std::mt19937_64's output is fixed by the standard; the index from its raw bits (not
    // uniform_int_distribution, whose algorithm is the library's) keeps the interval the same on every
    // platform.
    std::mt19937_64 gen(seed);
    const uint64_t n = static_cast<uint64_t>(r.n);
    std::vector<double> means(static_cast<size_t>(resamples));
    for (auto& m : means) {
        double sum = 0;
        for (uint64_t i = 0; i < n; ++i) sum += d[static_cast<size_t>(gen() % n)];
        m = sum / static_cast<double>(n);
    }
    std::sort(means.begin(), means.end());
    // The 2.5 and 97.5 percentiles, linear between order statistics (numpy's default).
    auto percentile = [&](double q) {
        const double pos = q * static_cast<double>(means.size() - 1);
        const auto lo = static_cast<size_t>(std::floor(pos));
        const size_t hi = std::min(lo + 1, means.size() - 1);
        return means[lo] + (pos - static_cast<double>(lo)) * (means[hi] - means[lo]);
    };
    r.interval = {percentile(0.025), percentile(0.975)};
    return r;
}

double median(std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

const char* to_string(Significance s) {
    switch (s) {
        case Significance::Significant:
            return "significant";
        case Significance::NotSignificant:
            return "not significant";
        case Significance::TooFewPairs:
            break;
    }
    return "n too small";
}

Significance PairedComparison::significance() const {
    if (n < kMinPairsForSignificance) return Significance::TooFewPairs;
    const bool excludes_zero = interval.low > 0 || interval.high < 0;
    return excludes_zero && sign_test_p < 0.05 ? Significance::Significant : Significance::NotSignificant;
}

}  // namespace varrate
