#include "tests/test_support.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include "base/error.h"
#include "codec/methods/snapkv_method.h"
#include "codec/registry.h"
#include "codec/salience.h"
#include "codec/synthetic.h"

using namespace varrate;

namespace {

// kvpress SnapKVPress.score written out as loops, in double: [G][L - w] scores.
std::vector<std::vector<double>> reference_scores(const LayerCapture& cap, int64_t w, int64_t kernel) {
    const at::Tensor k = cap.keys.to(at::kDouble).contiguous(),
                     q = cap.window_queries.to(at::kDouble).contiguous();
    const int64_t G = k.size(0), L = k.size(1), hd = k.size(2), H = q.size(0), n_rep = H / G;
    const int64_t wq = q.size(1);
    auto K = k.accessor<double, 3>();
    auto Q = q.accessor<double, 3>();
    std::vector<std::vector<double>> per_head(H, std::vector<double>(L - w, 0.0));
    for (int64_t h = 0; h < H; ++h) {
        const int64_t g = h / n_rep;
        for (int64_t i = 0; i < w; ++i) {
            const int64_t qi = wq - w + i, pos = L - w + i;
            std::vector<double> logits(pos + 1);
            double mx = -1e300;
            for (int64_t j = 0; j <= pos; ++j) {
                double dot = 0;
                for (int64_t d = 0; d < hd; ++d) dot += Q[h][qi][d] * K[g][j][d];
                logits[j] = dot / std::sqrt(static_cast<double>(hd));
                mx = std::max(mx, logits[j]);
            }
            double z = 0;
            for (double& x : logits) z += (x = std::exp(x - mx));
            for (int64_t j = 0; j < L - w; ++j) per_head[h][j] += logits[j] / z / static_cast<double>(w);
        }
    }
    std::vector<std::vector<double>> out(G, std::vector<double>(L - w, 0.0));
    const int64_t pad = kernel / 2;
    for (int64_t h = 0; h < H; ++h) {
        for (int64_t j = 0; j < L - w; ++j) {
            double sum = 0;  // zero padding, always divided by the kernel (count_include_pad)
            for (int64_t o = -pad; o <= pad; ++o)
                if (j + o >= 0 && j + o < L - w) sum += per_head[h][j + o];
            out[h / n_rep][j] += sum / static_cast<double>(kernel) / static_cast<double>(n_rep);
        }
    }
    return out;
}

std::vector<int64_t> reference_keep(const std::vector<double>& scores, int64_t L, int64_t w, int64_t kept) {
    std::vector<int64_t> idx(scores.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return scores[a] > scores[b]; });
    idx.resize(kept - w);
    std::sort(idx.begin(), idx.end());
    for (int64_t t = L - w; t < L; ++t) idx.push_back(t);
    return idx;
}

SyntheticShape shape(int64_t L) {
    SyntheticShape s;
    s.n_kv_head = 2;
    s.n_head = 6;
    s.head_dim = 16;
    s.n_tokens = L;
    s.obs_window = 64;
    return s;
}

}  // namespace

class TestCodecSnapKV : public QObject {
    Q_OBJECT
  private Q_SLOTS:
    void initTestCase() { at::set_num_threads(2); }

    void scoresMatchLoopReference() {
        for (uint64_t seed : {1, 2, 3}) {
            const LayerCapture cap = synthetic_capture(shape(200 + 37 * seed), seed);
            const int64_t L = cap.keys.size(1);
            const at::Tensor got = snapkv_scores(cap, 64, 5);
            QVERIFY(got.sizes().vec() == std::vector<int64_t>({2, L - 64}));
            const auto ref = reference_scores(cap, 64, 5);
            for (int64_t g = 0; g < 2; ++g)
                for (int64_t j = 0; j < L - 64; ++j)
                    QVERIFY(std::abs(got[g][j].item<double>() - ref[g][j]) <
                            1e-6 * std::max(1.0, ref[g][j] * 1e3));
        }
    }

    void keepsTopTokensAndWindowInOrder() {
        for (double kappa : {0.4, 0.5, 0.8}) {
            const LayerCapture cap = synthetic_capture(shape(300), 7);
            CodecSettings s;
            s.budget = kappa;
            LayerResult r = make_method("snapkv", s)->compress(cap);
            const int64_t kept = static_cast<int64_t>(300 * kappa);
            QVERIFY(r.kv.keys.sizes().vec() == std::vector<int64_t>({2, kept, 16}));
            QVERIFY(r.kv.values.sizes().vec() == std::vector<int64_t>({2, kept, 16}));
            const auto ref = reference_scores(cap, 64, 5);
            for (int64_t g = 0; g < 2; ++g) {
                const std::vector<int64_t> idx = reference_keep(ref[g], 300, 64, kept);
                const at::Tensor ti = at::tensor(idx, at::TensorOptions().dtype(at::kLong));
                QVERIFY(at::equal(r.kv.keys[g], cap.keys[g].index_select(0, ti)));
                QVERIFY(at::equal(r.kv.values[g], cap.values[g].index_select(0, ti)));
                QVERIFY(r.diagnostics.kept[g].narrow(0, 300 - 64, 64).all().item<bool>());
                QCOMPARE(r.diagnostics.kept[g].sum().item<int64_t>(), kept);
            }
            const LayerDiagnostics& d = r.diagnostics;
            QCOMPARE(d.footprint, static_cast<double>(kept) / 300.0);
            QCOMPARE(d.stored_bytes, kept * 64 * 4);
            QCOMPARE(d.full_bytes, int64_t{300 * 64 * 4});
            QVERIFY(d.rel_error.narrow(0, 236, 64).max().item<float>() == 0.0f);
            // Evicted by every head: error 1, rank 0.
            const at::Tensor none = d.kept.any(0).logical_not();
            if (none.any().item<bool>()) {
                QVERIFY(
                    at::allclose(d.rel_error.masked_select(none), at::ones({none.sum().item<int64_t>()})));
                QCOMPARE(d.rank.masked_select(none).max().item<int64_t>(), int64_t{0});
            }
        }
    }

    void tiesGoToTheEarliestTokens() {
        // Zero keys: every window query attends uniformly, so every score ties, except the first two and last
        // two scored tokens, which the zero-padded pooling (count_include_pad) lowers to 3/5 and 4/5. The
        // stable descending sort (snapkv_order) gives the kept - w = 36 places that the window leaves
        // to the earliest of the tied tokens, 2..37, in every KV group; tokens 0 and 1 lose.
        LayerCapture cap = synthetic_capture(shape(200), 9);
        cap.keys = at::zeros_like(cap.keys);
        CodecSettings s;
        s.budget = 0.5;
        LayerResult r = make_method("snapkv", s)->compress(cap);
        const at::Tensor pos = at::arange(200, at::TensorOptions().dtype(at::kLong));
        const at::Tensor expected = ((pos >= 2) & (pos < 38)) | (pos >= 136);  // [L]
        for (int64_t g = 0; g < 2; ++g) {
            const at::Tensor kept = r.diagnostics.kept[g];
            QCOMPARE(kept.sum().item<int64_t>(), int64_t{100});
            QVERIFY2(at::equal(kept, expected),
                     qPrintable(QString("group %1 kept %2 of tokens 0..37")
                                    .arg(g)
                                    .arg(kept.narrow(0, 0, 38).sum().item<int64_t>())));
            const at::Tensor ti = expected.nonzero().squeeze(1);
            QVERIFY(at::equal(r.kv.values[g], cap.values[g].index_select(0, ti)));
        }
    }

    void bf16InputsKeepDtype() {
        CodecSettings s;
        LayerResult r =
            make_method("snapkv", s)->compress(synthetic_capture(shape(512), 11, 0, at::kBFloat16));
        QCOMPARE(r.kv.keys.scalar_type(), at::kBFloat16);
        QCOMPARE(r.kv.keys.size(1), int64_t{102});
        QCOMPARE(r.diagnostics.stored_bytes, int64_t{102 * 64 * 2});
    }

    void infeasibleBudgets() {
        const LayerCapture cap = synthetic_capture(shape(200), 13);
        for (double kappa : {0.1, 0.0, 1.2}) {
            CodecSettings s;
            s.budget = kappa;
            EXPECT_ERROR(make_method("snapkv", s)->compress(cap),
                         "smallest feasible kappa for L=200 is 0.3200");
        }
        QVERIFY_THROWS_EXCEPTION(
            Error, make_method("snapkv", CodecSettings{})->compress(synthetic_capture(shape(64), 1)));
    }
};

QTEST_APPLESS_MAIN(TestCodecSnapKV)
#include "test_codec_snapkv.moc"
