// PyramidKV (codec/pyramidkv_method.h), as kvpress's PyramidKVPress: SnapKV's scores and kept sets with a
// per-layer count from a linear depth schedule at SnapKV's mean. The counts against worked examples of
// kvpress's formula (half-way cases rounded to even, as Python's round), the kept sets against a literal loop
// over heads and tokens, the layers' total footprint against SnapKV's, and the errors.
#include "tests/test_support.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cmath>

#include "base/error.h"
#include "codec/footprint.h"
#include "codec/methods/pyramidkv_method.h"
#include "codec/registry.h"
#include "codec/salience.h"
#include "codec/synthetic.h"

using namespace varrate;

namespace {

CodecSettings settings(double kappa, int64_t window) {
    CodecSettings s;
    s.budget = kappa;
    s.obs_window = window;
    s.pool_kernel = 5;
    s.precise_timing = false;
    return s;
}

// The positions a head keeps, by a literal loop: the window, and every other token whose score fewer than
// (kept - w) others beat (a higher score, or an equal one at an earlier position).
std::vector<std::vector<int64_t>> loop_kept(const at::Tensor& scores_in, int64_t n_tok, int64_t w,
                                            int64_t kept) {
    const at::Tensor scores = scores_in.to(at::kDouble).contiguous();
    const int64_t n_kv = scores.size(0), n_other = n_tok - w;
    std::vector<std::vector<int64_t>> out(static_cast<size_t>(n_kv));
    for (int64_t g = 0; g < n_kv; ++g) {
        const double* s = scores[g].data_ptr<double>();
        for (int64_t t = 0; t < n_tok; ++t) {
            if (t >= n_other) {
                out[g].push_back(t);
                continue;
            }
            int64_t beaten_by = 0;
            for (int64_t u = 0; u < n_other; ++u)
                if (s[u] > s[t] || (s[u] == s[t] && u < t)) ++beaten_by;
            if (beaten_by < kept - w) out[g].push_back(t);
        }
    }
    return out;
}

std::vector<std::vector<int64_t>> rows(const at::Tensor& kept) {
    const at::Tensor k = kept.to(at::kCPU).contiguous();
    std::vector<std::vector<int64_t>> out(static_cast<size_t>(k.size(0)));
    for (int64_t g = 0; g < k.size(0); ++g)
        out[g].assign(k[g].data_ptr<int64_t>(), k[g].data_ptr<int64_t>() + k.size(1));
    return out;
}

}  // namespace

class TestCodecPyramidKV : public QObject {
    Q_OBJECT
  private Q_SLOTS:
    void initTestCase() { at::set_num_threads(2); }

    // kvpress's get_layer_budget worked by hand: a valid schedule, one clamped at L - w, half-way values
    // rounded to even, and the fallback to SnapKV's count (round(L * kappa)) when the smallest count would
    // fall below the window.
    void scheduleMatchesKvpressFormula() {
        // L 4000, kappa 0.5, w 64, 4 layers: mean 2000, min 100, max 3900, steps 1266.67.
        const std::vector<int64_t> a{3900, 2633, 1367, 100};
        for (int64_t l = 0; l < 4; ++l)
            QCOMPARE(PyramidKVMethod::layer_kept_tokens(settings(0.5, 64), 4000, 4, l), a[l]);
        // L 1300, kappa 0.75, 5 layers: max 2 * 975 - 48.75 >= L - w, so max = 1236, min = 714; steps 130.5:
        // 1105.5 -> 1106 and 844.5 -> 844 (to even).
        const std::vector<int64_t> b{1236, 1106, 975, 844, 714};
        for (int64_t l = 0; l < 5; ++l)
            QCOMPARE(PyramidKVMethod::layer_kept_tokens(settings(0.75, 64), 1300, 5, l), b[l]);
        // L 1000, kappa 0.5: max 975 >= L - w, so max = 936 and min = 64 >= w: valid at the edge.
        const std::vector<int64_t> c{936, 500, 64};
        for (int64_t l = 0; l < 3; ++l)
            QCOMPARE(PyramidKVMethod::layer_kept_tokens(settings(0.5, 64), 1000, 3, l), c[l]);
        // L 1000, kappa 0.2: min 10 < w 64: every layer keeps round(200) = SnapKV's count.
        for (int64_t l = 0; l < 3; ++l)
            QCOMPARE(PyramidKVMethod::layer_kept_tokens(settings(0.2, 64), 1000, 3, l), int64_t(200));
        // The fallback rounds, half-way to even: L 302, kappa 0.25 -> 75.5 -> 76 (SnapKV: int() = 75);
        // L 306 -> 76.5 -> 76.
        QCOMPARE(PyramidKVMethod::layer_kept_tokens(settings(0.25, 64), 302, 3, 2), int64_t(76));
        QCOMPARE(snapkv_kept_tokens(settings(0.25, 64), 302), int64_t(75));
        QCOMPARE(PyramidKVMethod::layer_kept_tokens(settings(0.25, 64), 306, 3, 0), int64_t(76));
        // One layer: the top of the schedule.
        QCOMPARE(PyramidKVMethod::layer_kept_tokens(settings(0.5, 64), 4000, 1, 0), int64_t(3900));
        // Which of these fell back (min = L kappa / 20 below w): the valid ones above do not; L 1000 at 0.2
        // and L 302 at 0.25 do; a 4k context at kappa 0.3 with window 64 (1228.8 < 20 x 64) does, at 0.35
        // not.
        QVERIFY(!PyramidKVMethod::schedule_falls_back(settings(0.5, 64), 4000));
        QVERIFY(!PyramidKVMethod::schedule_falls_back(settings(0.75, 64), 1300));
        QVERIFY(!PyramidKVMethod::schedule_falls_back(settings(0.5, 64), 1000));
        QVERIFY(PyramidKVMethod::schedule_falls_back(settings(0.2, 64), 1000));
        QVERIFY(PyramidKVMethod::schedule_falls_back(settings(0.25, 64), 302));
        QVERIFY(PyramidKVMethod::schedule_falls_back(settings(0.3, 64), 4096));
        QVERIFY(!PyramidKVMethod::schedule_falls_back(settings(0.35, 64), 4096));
    }

    // Per layer the kept set is SnapKV's cut at the layer's count: each KV head keeps the window and its top
    // scores (a literal loop over heads and tokens on snapkv_scores).
    void keptSetsMatchLoopReference() {
        SyntheticShape shape;
        shape.n_kv_head = 2;
        shape.n_head = 4;
        shape.n_tokens = 400;
        shape.head_dim = 16;
        shape.obs_window = 4;
        shape.n_layers = 4;
        for (double kappa : {0.5, 0.7}) {
            const CodecSettings s = settings(kappa, 4);
            std::vector<int64_t> counts;
            for (int64_t layer = 0; layer < 4; ++layer) {
                const LayerCapture cap = synthetic_capture(shape, 100 + layer, layer);
                QCOMPARE(cap.n_layers, int64_t(4));
                const LayerResult r = make_method("pyramidkv", s)->compress(cap);
                const int64_t kept = PyramidKVMethod::layer_kept_tokens(s, 400, 4, layer);
                counts.push_back(kept);
                const at::Tensor scores = snapkv_scores(cap, 4, 5);
                const auto want = loop_kept(scores, 400, 4, kept);
                QCOMPARE(r.kv.keys.size(1), kept);
                QCOMPARE(rows(at::nonzero(r.diagnostics.kept[0]).view({1, -1})).front(), want[0]);
                QCOMPARE(rows(at::nonzero(r.diagnostics.kept[1]).view({1, -1})).front(), want[1]);
                for (int64_t g = 0; g < 2; ++g) {
                    const at::Tensor idx = at::tensor(want[g], at::kLong);
                    QVERIFY(at::equal(r.kv.keys[g], cap.keys[g].index_select(0, idx)));
                    QVERIFY(at::equal(r.kv.values[g], cap.values[g].index_select(0, idx)));
                }
                QCOMPARE(r.diagnostics.method, std::string("pyramidkv"));
                QCOMPARE(r.diagnostics.stored_bytes, kept * 2 * 2 * 16 * 4);
            }
            // The schedule is valid here (L kappa / 20 >= 4): counts fall with depth.
            QVERIFY(counts.front() > counts.back());
            for (size_t i = 1; i < counts.size(); ++i) QVERIFY(counts[i] <= counts[i - 1]);
        }
    }

    // The layers keep SnapKV's total at the same kappa (within 0.5 %): the schedule's mean is L * kappa.
    void footprintTotalEqualsSnapKV() {
        for (auto [L, kappa, n_layers, w] :
             std::vector<std::tuple<int64_t, double, int64_t, int64_t>>{{4000, 0.5, 4, 64},
                                                                        {1300, 0.75, 5, 64},
                                                                        {32768, 0.1, 32, 64},
                                                                        {8000, 0.2, 28, 64},
                                                                        {400, 0.5, 4, 4},
                                                                        {1000, 0.5, 3, 64}}) {
            const CodecSettings s = settings(kappa, w);
            int64_t pyramid = 0;
            for (int64_t l = 0; l < n_layers; ++l)
                pyramid += PyramidKVMethod::layer_kept_tokens(s, L, n_layers, l);
            const int64_t snapkv = n_layers * snapkv_kept_tokens(s, L);
            const double rel = std::abs(static_cast<double>(pyramid - snapkv)) / static_cast<double>(snapkv);
            QVERIFY2(
                rel <= 0.005,
                qPrintable(QString("L %1 kappa %2: %3 vs %4").arg(L).arg(kappa).arg(pyramid).arg(snapkv)));
        }
    }

    void errors() {
        SyntheticShape shape;
        shape.n_tokens = 300;
        LayerCapture cap = synthetic_capture(shape, 7);
        cap.n_layers = 0;
        EXPECT_ERROR(make_method("pyramidkv", settings(0.5, 64))->compress(cap), "pyramidkv", "n_layers is 0",
                     "depth schedule");
        cap.n_layers = 1;
        EXPECT_ERROR(make_method("pyramidkv", settings(0.1, 64))->compress(cap), "fewer than the always-kept",
                     "smallest feasible kappa");
        EXPECT_ERROR(make_method("pyramidkv", settings(1.5, 64))->compress(cap),
                     "must be a number in (0, 1]");
        cap.layer = 3;
        EXPECT_ERROR(make_method("pyramidkv", settings(0.5, 64))->compress(cap), "layer 3", "1 layers");
    }
};

QTEST_GUILESS_MAIN(TestCodecPyramidKV)
#include "test_codec_pyramidkv.moc"
