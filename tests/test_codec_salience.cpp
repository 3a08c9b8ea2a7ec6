// VarRate's salience (paper eq. 4) against the equation written out as plain loops in double: the mean over
// the |W| window queries and all H query heads of the attention weight on token t, the length-k moving
// average (zero padding counted, as SnapKV's avg_pool1d), and the window's own positions at the maximum.
#include "tests/test_support.h"

#include <algorithm>
#include <cmath>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "codec/salience.h"
#include "codec/synthetic.h"

using namespace varrate;

namespace {

std::vector<double> reference_salience(const LayerCapture& cap, int64_t w, int64_t kernel) {
    const at::Tensor k = cap.keys.to(at::kDouble).contiguous();            // [G, L, hd]
    const at::Tensor q = cap.window_queries.to(at::kDouble).contiguous();  // [H, w_cap, hd]
    const int64_t G = k.size(0), L = k.size(1), hd = k.size(2), H = q.size(0), w_cap = q.size(1);
    auto K = k.accessor<double, 3>();
    auto Q = q.accessor<double, 3>();
    // Eq. 4: s_t = 1 / (|W| H) sum_{q in W} sum_h alpha^h_{q,t}, for t outside the window.
    std::vector<double> s(L - w, 0.0);
    for (int64_t h = 0; h < H; ++h) {
        const int64_t g = h / (H / G);  // the KV head that query head h reads
        for (int64_t i = 0; i < w; ++i) {
            const int64_t qi = w_cap - w + i;  // the last w captured queries
            const int64_t pos = L - w + i;     // where that query sits: it sees keys 0..pos
            std::vector<double> alpha(pos + 1);
            double mx = -1e300, z = 0;
            for (int64_t j = 0; j <= pos; ++j) {
                double dot = 0;
                for (int64_t d = 0; d < hd; ++d) dot += Q[h][qi][d] * K[g][j][d];
                alpha[j] = dot / std::sqrt(static_cast<double>(hd));
                mx = std::max(mx, alpha[j]);
            }
            for (int64_t j = 0; j <= pos; ++j) z += (alpha[j] = std::exp(alpha[j] - mx));
            for (int64_t t = 0; t < L - w; ++t) s[t] += alpha[t] / z / static_cast<double>(w * H);
        }
    }
    // Moving average of length `kernel` over adjacent tokens; missing neighbours count as zero.
    std::vector<double> out(L, 0.0);
    for (int64_t t = 0; t < L - w; ++t) {
        double sum = 0;
        for (int64_t o = -kernel / 2; o <= kernel / 2; ++o)
            if (t + o >= 0 && t + o < L - w) sum += s[t + o];
        out[t] = sum / static_cast<double>(kernel);
    }
    // The window has no score of its own: it gets the largest.
    const double top = *std::max_element(out.begin(), out.begin() + (L - w));
    for (int64_t t = L - w; t < L; ++t) out[t] = top;
    return out;
}

}  // namespace

class TestCodecSalience : public QObject {
    Q_OBJECT
  private Q_SLOTS:
    void initTestCase() { at::set_num_threads(2); }

    void matchesEquation4Loop() {
        struct Case {
            int64_t n_kv, n_head, L, w_obs, kernel;
        };
        // GQA (3 and 2 query heads per KV head) and MHA; a window shorter than the captured one; kernels.
        for (const Case& c : {Case{2, 6, 200, 64, 5}, Case{2, 4, 301, 16, 5}, Case{4, 4, 150, 32, 3},
                              Case{1, 8, 120, 16, 1}}) {
            SyntheticShape shape;
            shape.n_kv_head = c.n_kv;
            shape.n_head = c.n_head;
            shape.head_dim = 16;
            shape.n_tokens = c.L;
            shape.obs_window = 64;
            const LayerCapture cap = synthetic_capture(shape, 100 + c.L);
            const at::Tensor got = varrate_salience(cap, c.w_obs, c.kernel);
            QVERIFY(got.sizes().vec() == std::vector<int64_t>({c.L}));
            QCOMPARE(got.scalar_type(), at::kFloat);
            const std::vector<double> ref = reference_salience(cap, c.w_obs, c.kernel);
            const at::Tensor g = got.to(at::kDouble).contiguous();
            const double* gp = g.data_ptr<double>();
            double worst = 0;
            for (int64_t t = 0; t < c.L; ++t)
                worst = std::max(worst, std::abs(gp[t] - ref[t]) / std::max(ref[t], 1e-12));
            QVERIFY2(worst < 1e-4, qPrintable(QString("L=%1 w=%2 k=%3 H=%4: relative error %5")
                                                  .arg(c.L)
                                                  .arg(c.w_obs)
                                                  .arg(c.kernel)
                                                  .arg(c.n_head)
                                                  .arg(worst)));
        }
    }

    // Unpooled (kernel 1), the scores of the tokens before the window add up to the average attention mass
    // the window queries put on them: between 0 and 1, where a sum over the 8 heads would reach several.
    void headsAreAveragedNotSummed() {
        SyntheticShape shape;
        shape.n_kv_head = 2;
        shape.n_head = 8;
        shape.n_tokens = 160;
        const LayerCapture cap = synthetic_capture(shape, 3);
        const double mass = varrate_salience(cap, 64, 1).narrow(0, 0, 160 - 64).sum().item<double>();
        QVERIFY2(mass > 0.0 && mass < 1.0, qPrintable(QString::number(mass)));
    }
};

QTEST_APPLESS_MAIN(TestCodecSalience)
#include "test_codec_salience.moc"
