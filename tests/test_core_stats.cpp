// Confidence intervals (core/stats.h): Wilson's score interval against values worked out by hand from its
// formula, its edge cases and its refusals.
#include "tests/test_support.h"

#include <cmath>

#include "base/error.h"
#include "core/suites/stats.h"

using namespace varrate;

namespace {

// low = (p + z^2/2n - z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n), high with + (z = 1.959964), evaluated to 15
// digits with Python's decimal module.
struct Case {
    int64_t successes, n;
    double low, high;
};
const Case kCases[] = {
    {0, 10, 0.0, 0.277532803026058},
    {5, 10, 0.236593089011479, 0.763406910988521},
    {10, 10, 0.722467196973942, 1.0},
    {1, 3, 0.061491944020931, 0.792340401192176},
    {7, 20, 0.181191823123983, 0.567145724931556},
    {1, 1, 0.206549311791803, 1.0},
};

}  // namespace

class TestStats : public QObject {
    Q_OBJECT
  private Q_SLOTS:
    void sign_test_is_the_exact_binomial_tail() {
        // 2 P(W <= 1), W ~ Bin(10, 1/2): 2 (1 + 10) / 1024.
        QCOMPARE(sign_test_p(9, 1), 22.0 / 1024.0);
        QCOMPARE(sign_test_p(1, 9), 22.0 / 1024.0);
        QCOMPARE(sign_test_p(0, 6), 2.0 / 64.0);
        QCOMPARE(sign_test_p(3, 2), 1.0);  // 2 (1 + 5 + 10) / 32 = 1
        QCOMPARE(sign_test_p(0, 0), 1.0);
        // 2 P(W <= 40), W ~ Bin(100, 1/2) = 0.056887934 (exact, from the binomial coefficients).
        QVERIFY(std::abs(sign_test_p(60, 40) - 0.05688793364) < 1e-9);
    }
    // Significance takes both the interval and the sign test, and enough pairs for the test to be able to
    // reject: 20 wins and no loss is significant; six all one way is the fewest that can be (p = 2/64);
    // eight large wins and two tiny losses give an interval far from 0 but p = 0.11: not significant.
    void significance_needs_the_interval_and_the_sign_test() {
        const PairedComparison twenty =
            paired_comparison(std::vector<double>(20, 1.0), std::vector<double>(20, 0.0));
        QVERIFY(twenty.significant());
        QCOMPARE(twenty.sign_test_p, 2.0 / double(1 << 20));
        QVERIFY(paired_comparison(std::vector<double>(6, 1.0), std::vector<double>(6, 0.0)).significant());
        QVERIFY(paired_comparison(std::vector<double>(5, 1.0), std::vector<double>(5, 0.0)).significance() ==
                Significance::TooFewPairs);
        std::vector<double> a = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0}, b = {0, 0, 0, 0, 0, 0, 0, 0, 0.01, 0.01};
        const PairedComparison mixed = paired_comparison(a, b);
        QVERIFY2(mixed.interval.low > 0, qPrintable(QString::number(mixed.interval.low)));
        QCOMPARE(mixed.sign_test_p, sign_test_p(8, 2));
        QVERIFY(mixed.sign_test_p > 0.05);
        QVERIFY(mixed.significance() == Significance::NotSignificant);
        QCOMPARE(std::string(to_string(mixed.significance())), std::string("not significant"));
    }

    void paired_bootstrap_interval() {
        // No difference: a point interval at 0, never significant.
        const std::vector<double> same = {1, 0, 1, 1, 0};
        PairedComparison p = paired_comparison(same, same);
        QCOMPARE(p.mean_difference, 0.0);
        QCOMPARE(p.interval.low, 0.0);
        QCOMPARE(p.interval.high, 0.0);
        QVERIFY(!p.significant());
        QCOMPARE(p.sign_test_p, 1.0);
        // A constant difference: the interval is that difference, a point that excludes 0; four pairs cannot
        // make the sign test reject (p = 2/16), so it is "n too small", not significant.
        p = paired_comparison({1, 1, 1, 1}, {0, 0, 0, 0});
        QCOMPARE(p.interval.low, 1.0);
        QCOMPARE(p.interval.high, 1.0);
        QCOMPARE(p.wins, int64_t(4));
        QVERIFY(!p.significant());
        QVERIFY(p.significance() == Significance::TooFewPairs);
        QCOMPARE(std::string(to_string(p.significance())), std::string("n too small"));
        // One sample (`varrate eval --samples 1`): never significant.
        QVERIFY(paired_comparison({1}, {0}).significance() == Significance::TooFewPairs);
        // Two samples with differences 0 and 1: resampled means 0, 0.5, 1 with probabilities 1/4, 1/2, 1/4,
        // so the 2.5 and 97.5 percentiles are 0 and 1.
        p = paired_comparison({0, 1}, {0, 0});
        QCOMPARE(p.interval.low, 0.0);
        QCOMPARE(p.interval.high, 1.0);
        // 100 samples, 30 wins and 10 losses: mean 0.2, sd of a difference 0.6, so the interval is close to
        // 0.2 -+ 1.96 x 0.06; seeded, the same every time; another seed moves it a little.
        std::vector<double> a(100, 0), b(100, 0);
        for (int i = 0; i < 30; ++i) a[i] = 1;
        for (int i = 30; i < 40; ++i) b[i] = 1;
        p = paired_comparison(a, b);
        QVERIFY(std::abs(p.mean_difference - 0.2) < 1e-12);
        QVERIFY2(std::abs(p.interval.low - (0.2 - 1.96 * 0.06)) < 0.02,
                 qPrintable(QString::number(p.interval.low)));
        QVERIFY2(std::abs(p.interval.high - (0.2 + 1.96 * 0.06)) < 0.02,
                 qPrintable(QString::number(p.interval.high)));
        QVERIFY(p.significant());
        QCOMPARE(std::string(to_string(p.significance())), std::string("significant"));
        QCOMPARE(p.sign_test_p, sign_test_p(30, 10));
        const PairedComparison again = paired_comparison(a, b);
        QCOMPARE(again.interval.low, p.interval.low);
        QCOMPARE(again.interval.high, p.interval.high);
        // Scores on a continuous scale (the percentiles of 0/1 differences are multiples of 1/n and rarely
        // move): the seed is what draws the resamples.
        std::vector<double> x(50), y(50, 0.0);
        for (int i = 0; i < 50; ++i) x[i] = std::sin(1.7 * i) + 0.1;
        const PairedComparison s1 = paired_comparison(x, y),
                               s2 = paired_comparison(x, y, kBootstrapResamples, 7);
        QCOMPARE(s1.mean_difference, s2.mean_difference);
        QVERIFY(s1.interval.low != s2.interval.low && s1.interval.high != s2.interval.high);
        QVERIFY(s1.interval.low < s1.mean_difference && s1.mean_difference < s1.interval.high);
        // Unpaired inputs are refused by name.
        QVERIFY(test::error_message([] {
                    paired_comparison({1, 0}, {1});
                }).find("same samples") != std::string::npos);
    }
    void median_of_odd_even_and_empty() {
        QCOMPARE(median({3.0, 1.0, 2.0}), 2.0);
        QCOMPARE(median({4.0, 1.0, 3.0, 2.0}), 2.5);
        QCOMPARE(median({7.5}), 7.5);
        QCOMPARE(median({}), 0.0);
    }
    void wilson_matches_the_formula() {
        for (const Case& c : kCases) {
            const Interval ci = wilson_interval(c.successes, c.n);
            const QString what = QString("%1/%2: [%3, %4]")
                                     .arg(c.successes)
                                     .arg(c.n)
                                     .arg(ci.low, 0, 'g', 17)
                                     .arg(ci.high, 0, 'g', 17);
            QVERIFY2(std::abs(ci.low - c.low) < 1e-9, qPrintable(what));
            QVERIFY2(std::abs(ci.high - c.high) < 1e-9, qPrintable(what));
        }
    }

    void wilson_edges() {
        // The ends are exact where the formula's are: 0 successes start at 0, n of n end at 1.
        QCOMPARE(wilson_interval(0, 7).low, 0.0);
        QCOMPARE(wilson_interval(7, 7).high, 1.0);
        // No trials, no information: the whole range, never NaN.
        const Interval none = wilson_interval(0, 0);
        QCOMPARE(none.low, 0.0);
        QCOMPARE(none.high, 1.0);
        // Symmetric in successes and failures, inside [0, 1], around the point estimate, narrowing with n.
        for (int64_t n : {1, 2, 5, 13, 100, 10000})
            for (int64_t k = 0; k <= n; k += std::max<int64_t>(1, n / 7)) {
                const Interval a = wilson_interval(k, n), b = wilson_interval(n - k, n);
                QVERIFY(std::abs(a.low - (1 - b.high)) < 1e-12 && std::abs(a.high - (1 - b.low)) < 1e-12);
                const double p = static_cast<double>(k) / static_cast<double>(n);
                QVERIFY(a.low >= 0 && a.low <= p && p <= a.high && a.high <= 1);
            }
        QVERIFY(wilson_interval(500, 1000).high - wilson_interval(500, 1000).low <
                wilson_interval(5, 10).high - wilson_interval(5, 10).low);
        // A wider z widens the interval.
        QVERIFY(wilson_interval(3, 10, 2.575829).low < wilson_interval(3, 10).low);
    }

    void wilson_refuses_non_counts() {
        EXPECT_ERROR(wilson_interval(11, 10), "11 successes out of 10");
        EXPECT_ERROR(wilson_interval(-1, 10), "-1 successes");
        EXPECT_ERROR(wilson_interval(1, 10, 0), "z = 0");
    }
};

QTEST_GUILESS_MAIN(TestStats)
#include "test_core_stats.moc"
