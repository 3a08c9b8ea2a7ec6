#include "core/stats.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/base/error.h"

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

double median(std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace varrate
