// The codec's vectorised kernels against plain references: the top-k anchor search with its tie rule
// (exact ties, chunking), the batched GQA window attention, and VarRate's projection and reconstruction by
// rank width against the masked full-rank product.
#include "tests/test_support.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include "codec/anchors.h"
#include "codec/methods/varrate_method.h"
#include "codec/salience.h"
#include "codec/synthetic.h"
#include "models/rope.h"

using namespace varrate;

namespace {

// Nearest c anchors of every coded token by exact distances in double, ties to the lower ordinal.
std::vector<std::vector<int64_t>> reference_nearest(const at::Tensor& z, const AnchorLayout& layout,
                                                    int64_t c) {
    const at::Tensor zd = z.to(at::kDouble).contiguous();
    const at::Tensor anchors = zd.index_select(0, layout.anchor_pos);
    std::vector<std::vector<int64_t>> out;
    for (int64_t i = 0; i < layout.n_coded(); ++i) {
        const at::Tensor dist =
            (anchors - zd[layout.coded_pos[i].item<int64_t>()]).pow(2).sum(1).contiguous();
        const double* d = dist.data_ptr<double>();
        std::vector<int64_t> order(layout.n_anchors());
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return d[a] < d[b]; });
        order.resize(c);
        out.push_back(order);
    }
    return out;
}

}  // namespace

class TestCodecFastPaths : public QObject {
    Q_OBJECT
  private Q_SLOTS:
    void initTestCase() { at::set_num_threads(2); }

    void anchorTiesGoToTheLowerOrdinal() {
        // Small integers and 64 anchors (so their mean, the centre, is a multiple of 1/64): every
        // product and sum is exact in fp32, so equal distances are exactly equal whatever order the GEMM
        // sums in. Anchors repeat in pairs (anchor 2j+1 = anchor 2j) and coded
        // tokens copy anchors, so ties are everywhere, including at distance 0.
        const int64_t L = 512, D = 64, stride = 8, window = 16;
        const AnchorLayout layout = make_anchor_layout(L, stride, window);
        at::Generator gen = at::detail::createCPUGenerator(11);
        at::Tensor z = at::randint(-2, 3, {L, D}, gen, at::TensorOptions().dtype(at::kFloat));
        const int64_t n_a = layout.n_anchors();
        QCOMPARE(n_a, int64_t{64});
        for (int64_t j = 0; j + 1 < n_a; j += 2)
            z[layout.anchor_pos[j + 1].item<int64_t>()].copy_(z[layout.anchor_pos[j].item<int64_t>()]);
        for (int64_t i = 0; i < layout.n_coded(); i += 3)
            z[layout.coded_pos[i].item<int64_t>()].copy_(z[layout.anchor_pos[(i / 3) % n_a].item<int64_t>()]);

        const auto want = reference_nearest(z, layout, 4);
        int64_t tied_rows = 0;
        for (int64_t chunk : {1, 7, 4096}) {
            const AnchorResiduals r = anchor_residuals(z, layout, 4, chunk);
            QCOMPARE(r.nearest.size(0), layout.n_coded());
            for (int64_t i = 0; i < layout.n_coded(); ++i) {
                const at::Tensor expected = at::tensor(want[i], at::TensorOptions().dtype(at::kLong));
                QVERIFY2(at::equal(r.nearest[i], expected),
                         qPrintable(QString("chunk %1, coded token %2").arg(chunk).arg(i)));
            }
            // The mean of the chosen anchors and the residual, exactly (integers / 4 are exact).
            const at::Tensor anchors = z.index_select(0, layout.anchor_pos);
            const at::Tensor mean =
                anchors.index_select(0, r.nearest.reshape({-1})).view({-1, 4, D}).sum(1) / 4.0;
            QVERIFY(at::equal(r.mean, mean));
            QVERIFY(at::equal(r.residual, z.index_select(0, layout.coded_pos) - mean));
        }
        for (const auto& row : want) tied_rows += row[0] % 2 == 0 ? 1 : 0;  // a pair's lower member first
        QVERIFY(tied_rows > layout.n_coded() / 2);
    }

    void windowAttentionMatchesPerHeadReference() {
        for (auto dtype : {at::kFloat, at::kBFloat16}) {
            SyntheticShape s;
            s.n_kv_head = 2;
            s.n_head = 8;  // 4 query heads per KV head
            s.head_dim = 16;
            s.n_tokens = 300;
            s.obs_window = 64;
            const LayerCapture cap = synthetic_capture(s, 5, 0, dtype);
            const at::Tensor got = window_attention(cap, 48);  // [H, L - 48], a window shorter than captured
            QVERIFY(got.sizes().vec() == std::vector<int64_t>({8, 300 - 48}));
            const at::Tensor k = cap.keys.to(at::kDouble), q = cap.window_queries.to(at::kDouble);
            for (int64_t h = 0; h < 8; ++h) {
                at::Tensor acc = at::zeros({300 - 48}, at::TensorOptions().dtype(at::kDouble));
                for (int64_t i = 0; i < 48; ++i) {
                    const int64_t pos = 300 - 48 + i;  // sees keys 0..pos
                    const at::Tensor logits =
                        k[h / 4].narrow(0, 0, pos + 1).mv(q[h][64 - 48 + i]) / std::sqrt(16.0);
                    acc += at::softmax(logits, 0).narrow(0, 0, 300 - 48) / 48.0;
                }
                QVERIFY2(at::allclose(got[h].to(at::kDouble), acc, 1e-5, 1e-8),
                         qPrintable(QString("head %1").arg(h)));
            }
        }
    }
    // Ranks spread over several 64-row widths (D = 256), with R = D and R < D, fp32 and bf16 caches: the
    // cache and the per-token errors that allocate() reports against the paper's single projection at rank
    // R, truncated per token and reconstructed with one GEMM (Algorithm 1, line 12).
    void rankGroupedCodeMatchesFullRankProduct() {
        SyntheticShape shape;
        shape.n_kv_head = 4;
        shape.n_head = 8;
        shape.head_dim = 32;  // D = 256
        shape.n_tokens = 640;
        const int64_t D = 256;
        for (const int64_t R : {int64_t{256}, int64_t{200}}) {
            for (auto dtype : {at::kFloat, at::kBFloat16}) {
                const QString where = QString("R=%1 %2").arg(R).arg(dtype == at::kFloat ? "fp32" : "bf16");
                const LayerCapture cap = synthetic_capture(shape, 23, 0, dtype);
                auto basis = random_basis(1, D, R, 16, 4, 29);
                CodecSettings s;
                s.budget = 0.35;
                s.rank = R;
                s.r_min = 8;
                s.paper_accounting = true;
                s.precise_timing = false;
                VarRateMethod m(s, basis, RankAllocation::Salience);
                // A salience with a long tail: ranks from the floor to R.
                at::Generator gen = at::detail::createCPUGenerator(31);
                const at::Tensor sal = at::rand({640}, gen, at::TensorOptions().dtype(at::kFloat)).pow(6);
                const auto analysis = m.analyse_with_salience(cap, sal);
                const LayerAllocation alloc = m.allocate(*analysis, s);
                const LayerKV kv = m.materialise(cap, *analysis, alloc);
                const LayerDiagnostics& d = alloc.diagnostics;
                QVERIFY2(alloc.rank_groups.size() >= 3, qPrintable(where));
                QVERIFY2(d.min_rank == 8 && d.max_rank == R, qPrintable(where));

                const AnchorLayout layout = make_anchor_layout(640, 16, 64);
                const at::Tensor coded = layout.coded_pos;
                const at::Tensor z = joint_vectors(cap.keys_pre_rope, cap.values);
                const AnchorResiduals res = anchor_residuals(z, layout, 4);
                const at::Tensor V = basis->layer(0).to(at::kDouble);  // [R, D]
                const at::Tensor ranks = d.rank.index_select(0, coded);
                const at::Tensor mask = at::arange(R, ranks.options()).unsqueeze(0) < ranks.unsqueeze(1);
                at::Tensor coeff = res.residual.mm(basis->layer(0).t());  // [n_coded, R] fp32
                if (dtype != at::kFloat) coeff = coeff.to(dtype).to(at::kFloat);
                const at::Tensor z_hat = res.mean.to(at::kDouble) + (coeff.to(at::kDouble) * mask).mm(V);
                const at::Tensor z_coded = z.index_select(0, coded).to(at::kDouble);
                const at::Tensor want_err = (z_coded - z_hat).norm(2, {1}) / z_coded.norm(2, {1});
                const at::Tensor got_err = d.rel_error.index_select(0, coded).to(at::kDouble);
                const double worst_err = (got_err - want_err).abs().max().item<double>();
                QVERIFY2(worst_err < 1e-5, qPrintable(where + QString(": error off by %1").arg(worst_err)));
                QVERIFY2(
                    std::abs(d.mean_rel_error - d.rel_error.to(at::kDouble).mean().item<double>()) < 1e-6,
                    qPrintable(where));

                const at::Tensor parts = z_hat.view({-1, 2, 4, 32}).permute({1, 2, 0, 3});  // [2, G, n, hd]
                const at::Tensor k_want =
                    apply_rope(parts[0], cap.rope_cos.index_select(0, coded).to(at::kDouble),
                               cap.rope_sin.index_select(0, coded).to(at::kDouble));
                // fp32: rounding only; bf16: at most one step of the cache's rounding.
                const double tol = dtype == at::kFloat ? 1e-4 : 2e-2;
                const at::Tensor k_got = kv.keys.index_select(1, coded).to(at::kDouble);
                const at::Tensor v_got = kv.values.index_select(1, coded).to(at::kDouble);
                QVERIFY2(at::allclose(k_got, k_want, tol, tol), qPrintable(where + ": keys"));
                QVERIFY2(at::allclose(v_got, parts[1], tol, tol), qPrintable(where + ": values"));
                const at::Tensor exact = layout.exact_pos;
                QVERIFY(at::equal(kv.keys.index_select(1, exact), cap.keys.index_select(1, exact)));
                QVERIFY(at::equal(kv.values.index_select(1, exact), cap.values.index_select(1, exact)));
            }
        }
    }
};

QTEST_APPLESS_MAIN(TestCodecFastPaths)
#include "test_codec_fast_paths.moc"
