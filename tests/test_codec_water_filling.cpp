#include "tests/test_support.h"

#include <algorithm>
#include <numeric>
#include <random>

#include <ATen/ATen.h>

#include "base/error.h"
#include "codec/water_filling.h"

using namespace varrate;

namespace {

// Algorithm 1, lines 6-11, as written: repeat { delta = B - sum r; r_t += delta * s_t / sum_U s; cap at R }.
std::vector<double> algorithm1_levels(const std::vector<double>& s, double B, double r_min, double R) {
    const size_t n = s.size();
    std::vector<double> r(n, r_min);
    std::vector<bool> in_u(n, true);
    for (int iter = 0; iter < 10000; ++iter) {
        double sum_r = 0, sum_s = 0;
        for (size_t t = 0; t < n; ++t) sum_r += r[t];
        for (size_t t = 0; t < n; ++t)
            if (in_u[t]) sum_s += s[t];
        const double delta = B - sum_r;
        if (sum_s <= 0) break;
        for (size_t t = 0; t < n; ++t)
            if (in_u[t]) r[t] += delta * s[t] / sum_s;
        bool capped = false;
        for (size_t t = 0; t < n; ++t) {
            if (in_u[t] && r[t] > R) {
                r[t] = R;
                in_u[t] = false;
                capped = true;
            }
        }
        if (!capped) break;
    }
    return r;
}

// Floor, then +1 to the largest fractional parts (ties to the earlier token), capped at R.
std::vector<int64_t> reference_integer(const std::vector<double>& r, int64_t B, int64_t R) {
    const size_t n = r.size();
    std::vector<int64_t> out(n);
    std::vector<double> frac(n);
    int64_t sum = 0;
    for (size_t t = 0; t < n; ++t) {
        out[t] = static_cast<int64_t>(std::floor(r[t] + 1e-9));
        frac[t] = out[t] < R ? r[t] - static_cast<double>(out[t]) : -1.0;
        sum += out[t];
    }
    std::vector<size_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return frac[a] > frac[b]; });
    for (int64_t i = 0; i < B - sum && i < static_cast<int64_t>(n); ++i) out[idx[i]] += 1;
    return out;
}

std::vector<double> to_vec(const at::Tensor& t) {
    at::Tensor c = t.to(at::kDouble).contiguous();
    return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

// A salience draw of one of several shapes: uniform, heavy-tailed, a few spikes, with exact zeros.
at::Tensor random_salience(std::mt19937& rng, int64_t n, int kind) {
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::vector<double> s(n);
    for (int64_t i = 0; i < n; ++i) {
        double x = u(rng);
        if (kind == 1) x = std::pow(x, 8.0);
        if (kind == 2) x = u(rng) < 0.05 ? 1.0 : 0.01 * x;
        s[i] = x;
    }
    at::Tensor t = at::tensor(s, at::TensorOptions().dtype(at::kDouble));
    return normalise_salience(t);
}

}  // namespace

class TestCodecWaterFilling : public QObject {
    Q_OBJECT
  private Q_SLOTS:
    void sumIsBudgetAndRanksWithinBounds() {
        std::mt19937 rng(7);
        for (int trial = 0; trial < 60; ++trial) {
            const int64_t n = 1 + static_cast<int64_t>(rng() % 700);
            const int64_t r_min = static_cast<int64_t>(rng() % 20),
                          R = r_min + 1 + static_cast<int64_t>(rng() % 300);
            const int64_t B =
                r_min * n + static_cast<int64_t>(rng() % (static_cast<uint64_t>((R - r_min) * n) + 1));
            const at::Tensor ranks = water_fill(random_salience(rng, n, trial % 3), B, r_min, R);
            QCOMPARE(ranks.scalar_type(), at::kLong);
            QCOMPARE(ranks.sum().item<int64_t>(), B);
            QVERIFY(ranks.min().item<int64_t>() >= r_min);
            QVERIFY(ranks.max().item<int64_t>() <= R);
        }
    }

    void matchesAlgorithm1Loop() {
        std::mt19937 rng(11);
        const int n_trials = 40;
        int compared = 0;
        for (int trial = 0; trial < n_trials; ++trial) {
            const int64_t n = 5 + static_cast<int64_t>(rng() % 500);
            const int64_t r_min = 16, R = 64 + static_cast<int64_t>(rng() % 200);
            // Budgets from just above the floor up to 95 % of the cap (Algorithm 1's regime).
            const double frac = 0.02 + 0.93 * (rng() % 1000) / 1000.0;
            const int64_t B = r_min * n + static_cast<int64_t>(frac * static_cast<double>((R - r_min) * n));
            const at::Tensor s = random_salience(rng, n, trial % 3);
            const std::vector<double> ref_levels = algorithm1_levels(to_vec(s), B, r_min, R);
            const double ref_sum = std::accumulate(ref_levels.begin(), ref_levels.end(), 0.0);
            // Algorithm 1 as written leaves budget unspent when every positive-salience token is capped (the
            // library spreads it over the zero-salience ones): no reference to compare with then.
            if (std::abs(ref_sum - static_cast<double>(B)) > 1e-6 * B) continue;
            ++compared;
            const std::vector<double> levels = to_vec(water_fill_levels(s, B, r_min, R));
            for (int64_t t = 0; t < n; ++t) QVERIFY(std::abs(levels[t] - ref_levels[t]) < 1e-6 * R);
            const std::vector<int64_t> ref = reference_integer(ref_levels, B, R);
            const at::Tensor got = water_fill(s, B, r_min, R);
            QCOMPARE(std::accumulate(ref.begin(), ref.end(), int64_t{0}), B);
            QCOMPARE(got.sum().item<int64_t>(), B);
            const int64_t* g = got.data_ptr<int64_t>();
            for (int64_t t = 0; t < n; ++t)
                QVERIFY2(std::abs(g[t] - ref[t]) <= 1, qPrintable(QString::number(t)));
        }
        qInfo("matchesAlgorithm1Loop: %d of %d random trials compared with the loop", compared, n_trials);
        QVERIFY2(compared >= 36,
                 qPrintable(QString("only %1 of %2 trials compared").arg(compared).arg(n_trials)));
    }

    void higherSalienceNeverGetsLessRank() {
        std::mt19937 rng(3);
        const int64_t n = 400, B = 400 * 60;
        const at::Tensor s = random_salience(rng, n, 0);
        const std::vector<double> lv = to_vec(water_fill_levels(s, B, 16, 256));
        const std::vector<double> sv = to_vec(s);
        for (int64_t a = 0; a < n; ++a)
            for (int64_t b = 0; b < n; ++b)
                if (sv[a] > sv[b]) QVERIFY(lv[a] >= lv[b] - 1e-9);
    }

    void constantSalienceIsUniform() {
        const int64_t n = 37, B = 37 * 20 + 11;
        const at::Tensor ranks = water_fill(normalise_salience(at::full({n}, 0.3)), B, 16, 128);
        const int64_t* r = ranks.data_ptr<int64_t>();
        for (int64_t t = 0; t < n; ++t) QCOMPARE(r[t], t < 11 ? int64_t{21} : int64_t{20});
    }

    void saturatedBudgets() {
        // Every token at the cap.
        at::Tensor s = normalise_salience(at::rand({50}, at::TensorOptions().dtype(at::kDouble)));
        QVERIFY(at::equal(water_fill(s, 50 * 64, 16, 64),
                          at::full({50}, 64, at::TensorOptions().dtype(at::kLong))));
        // Budget beyond what the positive-salience tokens can take: zero-salience tokens absorb the rest.
        at::Tensor spiky = at::zeros({10}, at::TensorOptions().dtype(at::kDouble));
        spiky[3] = 1.0;
        spiky[7] = 0.5;
        at::Tensor r = water_fill(spiky, 2 * 64 + 8 * 40, 16, 64);
        QCOMPARE(r.sum().item<int64_t>(), int64_t{2 * 64 + 8 * 40});
        QCOMPARE(r[3].item<int64_t>(), int64_t{64});
        QCOMPARE(r[7].item<int64_t>(), int64_t{64});
        QCOMPARE(r[0].item<int64_t>(), int64_t{40});
        // Budget at the floor: everyone at r_min.
        QVERIFY(at::equal(water_fill(spiky, 10 * 16, 16, 64),
                          at::full({10}, 16, at::TensorOptions().dtype(at::kLong))));
    }

    void outOfRangeBudgetThrows() {
        at::Tensor s = at::ones({10});
        QVERIFY_THROWS_EXCEPTION(Error, water_fill(s, 10 * 16 - 1, 16, 64));
        QVERIFY_THROWS_EXCEPTION(Error, water_fill(s, 10 * 64 + 1, 16, 64));
    }
};

QTEST_APPLESS_MAIN(TestCodecWaterFilling)
#include "test_codec_water_filling.moc"
